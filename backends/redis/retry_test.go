package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// replyErr is an error reply, as go-redis reports one (goredis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestRefusalOf: only error replies that the server sends before a
// command runs count as refusals; a timeout, a broken connection, a
// script's own error or a plain error with the same words never does.
func TestRefusalOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want refusal
	}{
		{"nil", nil, mayHaveRun},
		{"NOSCRIPT", replyErr("NOSCRIPT No matching script. Please use EVAL."), noScript},
		{"TRYAGAIN", replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), clusterRefused},
		{"MOVED", replyErr("MOVED 5258 127.0.0.1:7001"), clusterRefused},
		{"ASK", replyErr("ASK 5258 127.0.0.1:7001"), clusterRefused},
		{"CLUSTERDOWN", replyErr("CLUSTERDOWN Hash slot not served"), clusterRefused},
		{"wrapped TRYAGAIN", fmt.Errorf("redis: take: %w", replyErr("TRYAGAIN Multiple keys request during rehashing of slot")), clusterRefused},
		{"a script's error", replyErr("ERR Error running script (call to f_x): @user_script:1: TRYAGAIN"), mayHaveRun},
		{"a script refused inside", replyErr("ERR Script attempted to access a non local key in a cluster node script: x"), mayHaveRun},
		{"LOADING", replyErr("LOADING Redis is loading the dataset in memory"), mayHaveRun},
		{"BUSY", replyErr("BUSY Redis is busy running a script."), mayHaveRun},
		{"ASKING-like word", replyErr("ASKING is not a reply"), mayHaveRun},
		{"timeout", context.DeadlineExceeded, mayHaveRun},
		{"broken connection", io.ErrUnexpectedEOF, mayHaveRun},
		{"plain error with the words", errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), mayHaveRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusalOf(tc.err); got != tc.want {
				t.Errorf("refusalOf(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// TestResenderWait: a pause that would end past the deadline (with the
// latest send's round trip) is not taken; one that fits is, and counts a
// re-send; a cancelled ctx ends the pause with its error.
func TestResenderWait(t *testing.T) {
	b := New(nil, nil)
	tight, cancel := context.WithTimeout(context.Background(), resendFirst/4)
	defer cancel()
	r := b.resender()
	if err := r.wait(tight); !errors.Is(err, errNoTime) {
		t.Errorf("wait(deadline in %v) = %v, want %v", resendFirst/4, err, errNoTime)
	}
	roomy, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	r = b.resender()
	if err := r.wait(roomy); err != nil {
		t.Errorf("wait(deadline in 1m) = %v, want nil", err)
	}
	if n := b.resends.count.Load(); n != 1 {
		t.Errorf("resends = %d, want 1", n)
	}
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := r.wait(done); !errors.Is(err, context.Canceled) {
		t.Errorf("wait(cancelled) = %v, want %v", err, context.Canceled)
	}
	refused := replyErr("TRYAGAIN Multiple keys request during rehashing of slot")
	err := r.giveUp(refused, errNoTime)
	if !errors.Is(err, ErrNotRun) || !errors.Is(err, errNoTime) || !errors.Is(err, refused) {
		t.Errorf("giveUp = %v, want it to wrap ErrNotRun, errNoTime and the refusal", err)
	}
}
