package protoconv_test

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	freqcapv1 "github.com/freqcap/freqcap/gen/freqcap/v1"
	"github.com/freqcap/freqcap/internal/protoconv"
	"github.com/freqcap/freqcap/sdk"
)

// A batch's attempts, with and without their own idempotency TTL, survive
// the trip to the wire and back; 0 (the policy's) travels as absent, so
// an attempt without one reads as before.
func TestAttemptsRoundTrip(t *testing.T) {
	as := []sdk.Attempt{
		{Subject: sdk.Subject{"user": "1"}, Cost: 2, IdempotencyKey: "k1", IdempotencyTTL: 90 * time.Second},
		{Subject: sdk.Subject{"user": "2"}, IdempotencyKey: "k2"},
		{Subject: sdk.Subject{"user": "3"}, IdempotencyKey: "k3", IdempotencyTTL: -time.Millisecond}, // the sdk refuses it
		{Subject: sdk.Subject{"user": "4"}, IdempotencyTTL: 1500 * time.Millisecond},
	}
	w := protoconv.ToAttempts(as)
	if got := protoconv.Attempts(w); !reflect.DeepEqual(got, as) {
		t.Errorf("round trip = %+v, want %+v", got, as)
	}
	if w[1].GetIdempotencyTtl() != nil {
		t.Errorf("IdempotencyTTL 0 went on the wire as %v, want absent", w[1].GetIdempotencyTtl())
	}
	j, err := protojson.Marshal(w[0])
	if err != nil {
		t.Fatal(err)
	}
	var back freqcapv1.Attempt
	if err := protojson.Unmarshal([]byte(`{"subject": {"user": "1"}, "cost": 2, "idempotency_key": "k1", "idempotency_ttl": "90s"}`), &back); err != nil {
		t.Fatalf("JSON attempt with idempotency_ttl: %v", err)
	}
	if got := protoconv.Attempts([]*freqcapv1.Attempt{&back})[0]; !reflect.DeepEqual(got, as[0]) {
		t.Errorf("JSON %s read as %+v, want %+v", j, got, as[0])
	}
}
