// Package demo generates synthetic traffic over a set of policies, so that
// a new user of the console (freqcap console --demo) sees counters move and
// denials appear at once.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/freqcap/freqcap/sdk"
)

// Options configures the traffic.
type Options struct {
	// Rate is the number of decisions per second; 0 means 20.
	Rate float64
	// Seed makes the traffic reproducible; 0 means a fixed default.
	Seed uint64
	// Logger receives backend errors; nil means slog.Default().
	Logger *slog.Logger
}

// Users are the featured users of the demo traffic. The first is
// "hot": it receives a fifth of all sends, is throttled by recv-1m within
// seconds and exhausts recv-24h within minutes, like the user in "user
// 18829340001 stopped receiving pushes". The other four share another
// fifth; a long tail of generated users keeps most traffic allowed.
var Users = []string{"18829340001", "18829340002", "18829340003", "18829340004", "18829340005"}

// messages are what the demo sends; content dimensions get their
// fingerprints.
var messages = []string{
	"Your parcel is out for delivery",
	"Flash sale: 30% off today only",
	"Your verification code is 482910",
	"Someone replied to your comment",
	"Your ride is arriving",
	"New login from a new device",
	"Your invoice is ready",
	"A friend joined the app",
	"Price drop on your wishlist",
	"Your subscription renews tomorrow",
	"Weekly summary is here",
	"Your order has shipped",
}

// Demo is synthetic traffic over a set of policies, so that a new
// user of the console sees counters move and denials appear at once. It
// owns one goroutine, started by Start; Close stops it and waits.
type Demo struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start starts sending opts.Rate decisions per second through lim,
// cycling over policies. Each dimension of a subject takes its value from
// a small pool: "user" from Users (weighted to one hot user) or a
// long tail of generated users, "content" from the fingerprints of a few
// messages, any other dimension from "<dim>-1" to "<dim>-3".
func Start(lim *sdk.Limiter, policies []*sdk.Policy, opts Options) *Demo {
	if opts.Rate <= 0 {
		opts.Rate = 20
	}
	if opts.Seed == 0 {
		opts.Seed = 18829340001
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Demo{cancel: cancel, done: make(chan struct{})}
	go d.run(ctx, lim, policies, opts)
	return d
}

// Close stops the traffic and waits for the goroutine to end. It is safe
// to call more than once.
func (d *Demo) Close() error {
	d.once.Do(d.cancel)
	<-d.done
	return nil
}

func (d *Demo) run(ctx context.Context, lim *sdk.Limiter, policies []*sdk.Policy, opts Options) {
	defer close(d.done)
	if len(policies) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed>>1|1))
	contents := make([]string, len(messages))
	for i, c := range messages {
		contents[i] = sdk.Fingerprint(c)
	}
	interval := time.Duration(float64(time.Second) / opts.Rate)
	if interval < time.Millisecond {
		interval = time.Millisecond
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr time.Time
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := policies[i%len(policies)]
		s := subject(rng, p, contents)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := lim.Allow(cctx, p, s)
		cancel()
		if err != nil && ctx.Err() == nil && time.Since(lastErr) > 10*time.Second {
			lastErr = time.Now()
			opts.Logger.Warn("demo traffic: decision failed", "policy", p.Name(), "err", err)
		}
	}
}

// subject picks one subject for p.
func subject(rng *rand.Rand, p *sdk.Policy, contents []string) sdk.Subject {
	s := sdk.Subject{}
	for _, dim := range p.Dimensions() {
		switch dim {
		case "user":
			switch x := rng.IntN(100); {
			case x < 20:
				s[dim] = Users[0]
			case x < 40:
				s[dim] = Users[1+rng.IntN(len(Users)-1)]
			default:
				s[dim] = fmt.Sprintf("1882935%04d", rng.IntN(2000))
			}
		case "content":
			s[dim] = contents[rng.IntN(len(contents))]
		default:
			s[dim] = fmt.Sprintf("%s-%d", dim, 1+rng.IntN(3))
		}
	}
	return s
}
