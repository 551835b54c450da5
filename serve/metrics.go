package serve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/httpauth"
	"github.com/freqcap/freqcap/internal/lockout"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/ratelimitheaders"
)

// RequestDuration is the histogram of the server's calls, labelled by
// operation (the method: Take, TakeBatch…) and code ("ok", or the error's
// code: "invalid_argument", "unavailable"…). A denial is "ok".
const RequestDuration = "freqcap_serve_request_duration_seconds"

// InFlight is the gauge of calls being served.
const InFlight = "freqcap_serve_requests_in_flight"

type metrics struct {
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
	ok       sync.Map // op → the duration's observer of code "ok" (most calls: no label hashing)
}

// observer is the duration's observer of op and code.
func (m *metrics) observer(op, code string) prometheus.Observer {
	if code != "ok" {
		return m.duration.WithLabelValues(op, code)
	}
	if o, ok := m.ok.Load(op); ok {
		return o.(prometheus.Observer)
	}
	o := m.duration.WithLabelValues(op, code)
	m.ok.Store(op, o)
	return o
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    RequestDuration,
			Help:    "Time freqcap serve took to answer a call, by operation and code (a denial is ok).",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"op", "code"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: InFlight,
			Help: "Calls freqcap serve is answering now.",
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.inflight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// callerKey holds the authenticated *Caller in a call's context.
type callerKey struct{}

func callerOf(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// interceptor is frame on connect's stack: the caller is authFirst's,
// found before the body was read.
func (s *Server) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			op := req.Spec().Procedure[strings.LastIndexByte(req.Spec().Procedure, '/')+1:]
			var res connect.AnyResponse
			err := s.frame(ctx, op, s.authenticated, func(ctx context.Context) (err error) {
				res, err = next(ctx, req)
				return err
			})
			return res, err
		}
	}
}

// frame is every call's frame, on both stacks (connect's and grpc-go's):
// it refuses calls while draining and those auth refuses (answering the
// refusal in the call's protocol), bounds the call's time, runs it with
// its caller in its context, and measures and logs it.
func (s *Server) frame(ctx context.Context, op string, auth func(context.Context) (*Caller, error), run func(context.Context) error) error {
	start := time.Now()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()
	caller, err := s.call(ctx, auth, run)
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	s.metrics.observer(op, code).Observe(time.Since(start).Seconds())
	name := ""
	if caller != nil {
		name = caller.Name
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded:
		if err != nil && protoconv.ReasonOf(err) != freqcapv1.Reason_REASON_SHUTTING_DOWN {
			s.logRate.Log(s.log, slog.LevelWarn, "call-"+op+"-"+code, "serve: call failed (one line per operation and code every 10 s)", "op", op, "code", code, "caller", name, "err", err)
		}
	}
	if s.log.Enabled(ctx, -4) { // slog.LevelDebug
		s.log.Debug("serve: call", "op", op, "code", code, "caller", name, "took", time.Since(start))
	}
	return err
}

func (s *Server) call(ctx context.Context, auth func(context.Context) (*Caller, error), run func(context.Context) error) (*Caller, error) {
	if s.draining.Load() {
		return nil, protoconv.NewError(connect.CodeUnavailable, freqcapv1.Reason_REASON_SHUTTING_DOWN,
			"the server is shutting down: nothing was done, retry on another replica")
	}
	caller, err := auth(ctx)
	if err != nil {
		return nil, err
	}
	annotate(ctx, AttrCaller.String(caller.Name))
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, callerKey{}, caller), s.cfg.Timeout)
	defer cancel()
	return caller, run(ctx)
}

// authenticate returns the caller whose secret a call's headers h send,
// from remoteAddr (authFirst, before the body is read). A call that
// sends none is refused; one that sends a credential from an address
// locked out (package lockout, the console's rule) is refused unchecked, with ResourceExhausted
// and Retry-After; an unknown credential, or an Authorization header that
// is not a bearer token, counts a failure against the address.
func (s *Server) authenticate(h http.Header, remoteAddr string) (*Caller, error) {
	noCredential := func() error {
		return protoconv.NewError(connect.CodeUnauthenticated, freqcapv1.Reason_REASON_UNAUTHENTICATED,
			`no credential: send "Authorization: Bearer <secret>"`)
	}
	if h.Get("Authorization") == "" {
		return nil, noCredential()
	}
	remote := addrHost(remoteAddr)
	var caller *Caller
	tok, ok := httpauth.Bearer(h)
	v := s.lockout.Try(func() bool {
		if ok {
			caller = s.callers.find(tok)
		}
		return caller != nil
	}, lockout.Addr(remote))
	if v.Locked > 0 {
		secs := strconv.FormatInt(ratelimitheaders.Seconds(v.Locked), 10)
		e := protoconv.NewError(connect.CodeResourceExhausted, freqcapv1.Reason_REASON_LOCKED_OUT,
			"too many failed credentials from your address: try again in "+secs+"s")
		e.Meta().Set("Retry-After", secs)
		return nil, e
	}
	if !v.OK {
		s.log.Warn("serve: failed credential", "remote", remote, "failures", v.Failures, "locked_for", v.Wait)
		if !ok {
			return nil, noCredential()
		}
		return nil, protoconv.NewError(connect.CodeUnauthenticated, freqcapv1.Reason_REASON_UNAUTHENTICATED, "unknown credential")
	}
	return caller, nil
}

// addrHost is the host of a remote address ("host:port"), or the address.
func addrHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
