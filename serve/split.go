package serve

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
)

// split routes each connection a listener accepts to one of the two
// stacks (grpcstack.go) by its first request: HTTP/2 whose first request
// is gRPC (content type application/grpc, not gRPC-Web) to grpc-go,
// everything else (HTTP/1.1, HTTP/2 carrying Connect, gRPC-Web, JSON or
// GETs) to net/http. A connection stays with its stack: a client that
// sends gRPC first and then another protocol on the same HTTP/2
// connection is answered 415 for the other protocol (connect's clients
// and grpc-go's never mix). With TLS, split completes the handshake; an
// HTTP/1.1 (ALPN) connection goes to net/http as it is.
//
// To read an HTTP/2 connection's first request split answers the
// client's preface with an empty SETTINGS frame (gRPC clients wait for
// the server's before they send a request), and removes the client's
// acknowledgement of it from what the stack reads, so that each stack
// sees the connection as if it had been first.
type split struct {
	ln        net.Listener
	tls       *tls.Config
	grpc, web *connQueue
	timeout   time.Duration // to read the first request
	stopped   func() bool   // whether the server is shutting down (nil: never)
}

// http2Preface is the client connection preface of HTTP/2 (RFC 9113 3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// maxSniff bounds what split reads before the first request's headers.
const maxSniff = 64 << 10

// run accepts connections until the listener fails or is closed, then
// closes both queues.
func (sp *split) run() error {
	defer sp.grpc.Close()
	defer sp.web.Close()
	var backoff time.Duration
	for {
		c, err := sp.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || sp.stopped != nil && sp.stopped() {
				return err
			}
			// Out of file descriptors and the like: wait and accept
			// again, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go sp.route(c)
	}
}

// route reads c's first request and queues c to its stack.
func (sp *split) route(c net.Conn) {
	c.SetDeadline(time.Now().Add(sp.timeout))
	conn := c
	if sp.tls != nil {
		tc := tls.Server(c, sp.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		if tc.ConnectionState().NegotiatedProtocol != "h2" {
			tc.SetDeadline(time.Time{})
			sp.web.put(tc) // net/http sees the *tls.Conn: r.TLS is set
			return
		}
		conn = tc
	}
	buf, isH2 := readPreface(conn)
	if !isH2 {
		conn.SetDeadline(time.Time{})
		sp.web.put(&sniffed{Conn: conn, r: io.MultiReader(bytes.NewReader(buf), conn)})
		return
	}
	if _, err := conn.Write(settingsFrame); err != nil {
		conn.Close()
		return
	}
	buf, grpc, err := readFirstRequest(conn, buf)
	if err != nil {
		conn.Close()
		return
	}
	conn.SetDeadline(time.Time{})
	rest := &dropSettingsAck{src: io.MultiReader(bytes.NewReader(buf[len(http2Preface):]), conn)}
	s := &sniffed{Conn: conn, r: io.MultiReader(strings.NewReader(http2Preface), rest)}
	if grpc {
		sp.grpc.put(s)
	} else {
		sp.web.put(s)
	}
}

// settingsFrame is an empty SETTINGS frame (all defaults).
var settingsFrame = []byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0}

// readPreface reads from c until what it read differs from the HTTP/2
// preface or holds all of it.
func readPreface(c net.Conn) (buf []byte, isH2 bool) {
	buf = make([]byte, 0, 512)
	for len(buf) < len(http2Preface) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		m := min(len(buf), len(http2Preface))
		if string(buf[:m]) != http2Preface[:m] || err != nil {
			return buf, false
		}
	}
	return buf, true
}

// readFirstRequest reads HTTP/2 frames after the preface (buf holds what
// was read) until the first HEADERS frame and its CONTINUATIONs, and
// reports whether its content type is gRPC's.
func readFirstRequest(c net.Conn, buf []byte) ([]byte, bool, error) {
	pos := len(http2Preface)
	var block []byte
	fill := func(n int) error {
		for len(buf) < n {
			if len(buf) > maxSniff {
				return errors.New("serve: no request in the first 64 KiB")
			}
			if cap(buf) == len(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			m, err := c.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if err != nil && len(buf) < n {
				return err
			}
		}
		return nil
	}
	for {
		if err := fill(pos + 9); err != nil {
			return buf, false, err
		}
		length := int(buf[pos])<<16 | int(buf[pos+1])<<8 | int(buf[pos+2])
		typ, flags := buf[pos+3], buf[pos+4]
		if err := fill(pos + 9 + length); err != nil {
			return buf, false, err
		}
		payload := buf[pos+9 : pos+9+length]
		pos += 9 + length
		switch typ {
		case 0x1: // HEADERS
			if flags&0x8 != 0 && len(payload) > 0 { // PADDED
				pad := int(payload[0])
				if 1+pad > len(payload) {
					return buf, false, errors.New("serve: bad HEADERS padding")
				}
				payload = payload[1 : len(payload)-pad]
			}
			if flags&0x20 != 0 { // PRIORITY
				if len(payload) < 5 {
					return buf, false, errors.New("serve: bad HEADERS priority")
				}
				payload = payload[5:]
			}
			block = append(block, payload...)
		case 0x9: // CONTINUATION
			block = append(block, payload...)
		default:
			continue
		}
		if flags&0x4 != 0 { // END_HEADERS
			return buf, isGRPC(block), nil
		}
	}
}

// isGRPC reports whether a request's header block names gRPC's content
// type (application/grpc, +proto, +json…; not gRPC-Web).
func isGRPC(block []byte) bool {
	ct := ""
	d := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "content-type" {
			ct = f.Value
		}
	})
	if _, err := d.Write(block); err != nil {
		return false
	}
	return (ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")) && !strings.HasPrefix(ct, "application/grpc-web")
}

// sniffed is a connection whose first bytes split read: r gives them
// again, then the rest.
type sniffed struct {
	net.Conn
	r io.Reader
}

func (s *sniffed) Read(p []byte) (int, error) { return s.r.Read(p) }

// dropSettingsAck passes HTTP/2 frames through but the first SETTINGS
// acknowledgement (of split's SETTINGS frame), then everything as it
// comes.
type dropSettingsAck struct {
	src     io.Reader
	done    bool
	pending []byte // a frame header to give
	left    int    // payload bytes of the current frame still to pass
	hdr     [9]byte
}

func (d *dropSettingsAck) Read(p []byte) (int, error) {
	for {
		switch {
		case len(d.pending) > 0:
			n := copy(p, d.pending)
			d.pending = d.pending[n:]
			return n, nil
		case d.done:
			return d.src.Read(p)
		case d.left > 0:
			n, err := d.src.Read(p[:min(len(p), d.left)])
			d.left -= n
			return n, err
		}
		if _, err := io.ReadFull(d.src, d.hdr[:]); err != nil {
			return 0, err
		}
		length := int(binary.BigEndian.Uint32(append([]byte{0}, d.hdr[:3]...)))
		if d.hdr[3] == 0x4 && d.hdr[4]&0x1 != 0 && length == 0 {
			d.done = true // split's acknowledgement: dropped
			continue
		}
		d.pending, d.left = d.hdr[:], length
	}
}

// connQueue is a net.Listener whose connections split gives it.
type connQueue struct {
	addr   net.Addr
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (q *connQueue) put(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.closed:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
