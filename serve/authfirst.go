package serve

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
)

// authKey holds a call's authentication (authFirst) in its context.
type authKey struct{}

// authResult is what authFirst found: the caller, or why there is none.
type authResult struct {
	caller *Caller
	err    error
}

// authFirst authenticates a call from its headers before anything reads
// its body (up to MaxRequestSize): an unknown credential counts toward the
// lockout whatever the body holds, and a refused call's body is never
// read or parsed. The handler then gets the protocol's empty message in
// place of the body, so that the interceptor (metrics, logs, spans) is
// the one to answer the refusal, in the call's protocol. On a server
// without credentials it passes calls through (guard keeps them on
// loopback).
func (s *Server) authFirst(h http.Handler) http.Handler {
	if s.callers == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, err := s.authenticate(r.Header, r.RemoteAddr)
		ctx := context.WithValue(r.Context(), authKey{}, authResult{caller, err})
		r = r.WithContext(ctx)
		if err != nil {
			r.Body.Close()
			body := emptyMessage(r.Header.Get("Content-Type"))
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r.Header.Del("Content-Encoding")         // Connect unary compression: the empty body is plain
			r.Header.Del("Connect-Content-Encoding") // Connect streaming (an envelope says it is not compressed)
		}
		h.ServeHTTP(w, r)
	})
}

// authenticated returns the caller authFirst found for the call of ctx,
// or the refusal.
func (s *Server) authenticated(ctx context.Context) (*Caller, error) {
	if s.callers == nil {
		return local, nil
	}
	a, ok := ctx.Value(authKey{}).(authResult)
	if !ok { // a handler New did not wrap in authFirst: refused
		return nil, protoconv.NewError(connect.CodeUnauthenticated, freqcapv1.Reason_REASON_UNAUTHENTICATED, "no credential checked")
	}
	return a.caller, a.err
}

// emptyMessage is an empty request message in the protocol and codec a
// Content-Type names: gRPC, gRPC-Web and Connect streaming frame it in an
// uncompressed envelope; Connect unary sends it bare; JSON's is {},
// protobuf's no bytes. A type connect does not serve gets no bytes (and
// connect refuses it as unsupported).
func emptyMessage(contentType string) []byte {
	mt, _, _ := mime.ParseMediaType(contentType)
	payload := []byte(nil)
	if strings.HasSuffix(mt, "json") {
		payload = []byte("{}")
	}
	if !strings.HasPrefix(mt, "application/grpc") && !strings.HasPrefix(mt, "application/connect+") {
		return payload
	}
	env := []byte{0, 0, 0, 0, byte(len(payload))} // flags 0, big-endian length
	return append(env, payload...)
}
