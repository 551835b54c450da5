"""A sender in Python asking freqcap serve before each push, over gRPC.

Generate the stubs from the repository's schema first (Debian: apt-get
install python3-grpcio python3-protobuf protobuf-compiler python3-grpc-tools),
and serve the policies it uses, examples/senders.yaml:

    mkdir gen-py
    protoc -I proto -I /usr/include --python_out=gen-py freqcap/v1/freqcap.proto
    python3 -m grpc_tools.protoc -I proto -I /usr/include --grpc_python_out=gen-py freqcap/v1/freqcap.proto
    PYTHONPATH=gen-py FREQCAP_ADDR=127.0.0.1:8081 FREQCAP_TOKEN=… python3 examples/python/sender.py

FREQCAP_USER names the person (default 18829340001), FREQCAP_ZONE their
IANA time zone (default Asia/Shanghai).
"""
import hashlib
import base64
import datetime
import os
import random
import time
import uuid
import zoneinfo

import grpc

from freqcap.v1 import freqcap_pb2 as pb
from freqcap.v1 import freqcap_pb2_grpc as rpc

# Codes worth a retry: the call may not have been decided, or it was and
# its answer was lost (serve killed or redeployed mid-call, a connection
# reset, a deadline passed on the wire): retry with the same idempotency
# key, which never counts twice. Every other code is serve's refusal of
# the call itself: a retry gets the same.
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def fingerprint(text):
    """sdk.Fingerprint: the first 10 bytes of SHA-256, base32, lower case."""
    digest = hashlib.sha256(text.encode()).digest()[:10]
    return base64.b32encode(digest).decode().lower().rstrip("=")


def may_send(stub, token, user, text, message_id=None, tries=5, deadline=4.0):
    """Takes one unit of policy "push" for (user, content); returns the
    Decision. Retries transient failures with exponential back-off and
    jitter, within deadline seconds in all, with one idempotency key: the
    message id, or a random one made once, before the first send."""
    request = pb.TakeRequest(
        policy="push",
        subject={"user": user, "content": fingerprint(text)},
        idempotency_key=message_id or uuid.uuid4().hex,
    )
    if message_id is None:
        # A random key only has to outlive this call's re-sends: keep it a
        # minute past the deadline, not the policy's whole IdempotencyTTL.
        request.idempotency_ttl.FromMilliseconds(int(deadline * 1000) + 60000)
    return take(stub, token, request, tries, deadline)


# The kinds of message of policy "messages" (examples/senders.yaml): each
# one's class, which the policy declares (what it is exempt from), and its
# priority, 0 (the default) to 9.
KINDS = {
    "promotion": ("", 0),   # capped, and the day's last unit is not for it
    "alert": ("alert", 1),  # may use the last unit; passes quiet hours
    "otp": ("otp", 0),      # exempt from every cap, still counted, and from quiet hours
}


def may_notify(stub, token, identity, zone, kind, message_id, tries=5, deadline=4.0):
    """Takes one unit of policy "messages" for a message of kind to
    identity (a phone number: serve decides it for the person it is linked
    to), in the recipient's IANA zone, where the policy's calendar day and
    quiet hours are counted; returns the Decision. Retries as may_send."""
    cls, priority = KINDS[kind]
    request = pb.TakeRequest(policy="messages", identity=identity, zone=zone,
                             priority=priority, idempotency_key=message_id)
    setattr(request, "class", cls)  # class is a keyword in Python
    return take(stub, token, request, tries, deadline)


def take(stub, token, request, tries, deadline):
    """Sends request with its idempotency key, retrying transient
    failures within deadline seconds."""
    end = time.monotonic() + deadline
    for attempt in range(tries):
        try:
            return stub.Take(request, timeout=max(0.001, min(2.0, end - time.monotonic())),
                             metadata=[("authorization", "Bearer " + token)]).decision
        except grpc.RpcError as err:
            pause = min(1.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.5)
            if (err.code() not in RETRYABLE or attempt == tries - 1
                    or time.monotonic() + pause >= end):
                raise
            time.sleep(pause)


def explain(d, zone):
    """What a decision of policy "messages" says, in the recipient's local
    time: allowed with how much of the day is used, what its class was
    exempt from and the quiet hours it passed; or why it was denied (quiet
    hours, the units kept for higher priorities, or the rules) and the
    earliest time the same message may go, if nothing else is sent."""
    def local(ts):
        return datetime.datetime.fromtimestamp(ts.seconds, zoneinfo.ZoneInfo(zone)).strftime("%H:%M")

    if d.allowed:
        text = "allowed, %d of %d used today" % (d.rules[0].used, d.rules[0].limit)
        if d.exempted:
            text += ", past %s as its class %s is exempt" % (",".join(d.exempted), getattr(d, "class"))
        if d.HasField("quiet_until"):
            text += ", in quiet hours until %s" % local(d.quiet_until)
        return text
    if not d.denied and d.HasField("quiet_until"):
        why = "quiet hours until %s" % local(d.quiet_until)
    elif d.headroom:
        why = "%s: its last %d kept for higher priorities" % (
            ",".join(d.denied), max(r.keep for r in d.rules if r.headroom))
    else:
        why = ",".join(d.denied)
    return "denied by %s, next eligible at %s" % (why, local(d.next_eligible))


def main():
    channel = grpc.insecure_channel(os.environ.get("FREQCAP_ADDR", "127.0.0.1:8081"))
    stub = rpc.FreqcapServiceStub(channel)
    token = os.environ["FREQCAP_TOKEN"]
    user = os.environ.get("FREQCAP_USER", "18829340001")
    for n in range(1, 4):
        d = may_send(stub, token, user, "Your parcel is on its way", "parcel-%d" % n)
        if d.allowed:
            print("send #%d: allowed, %d of %d left this minute"
                  % (n, d.rules[0].remaining, d.rules[0].limit))
        elif d.override.kind == pb.OVERRIDE_KIND_BLOCK:
            # A per-person block (OverrideService) denies without a rule.
            print("send #%d: blocked by override #%d (%s), retry in %.0fs"
                  % (n, d.override.id, d.override.reason,
                     d.retry_after.ToTimedelta().total_seconds()))
        else:
            print("send #%d: blocked by %s, retry in %.0fs"
                  % (n, ",".join(d.denied), d.retry_after.ToTimedelta().total_seconds()))
    # A retry of a message already decided gets its first decision back.
    d = may_send(stub, token, user, "Your parcel is on its way", "parcel-1")
    print("retry of #1: allowed=%s replayed=%s" % (d.allowed, d.replayed))
    # Messages of each kind to the same person, in their zone.
    zone = os.environ.get("FREQCAP_ZONE", "Asia/Shanghai")
    for n, kind in enumerate(["promotion", "promotion", "promotion", "alert", "otp"], 1):
        d = may_notify(stub, token, user, zone, kind, "%s-%d" % (kind, n))
        print("message #%d, %s: %s" % (n, kind, explain(d, zone)))
    # Refusals are errors with a code, never a crash.
    try:
        stub.Reset(pb.ResetRequest(policy="push", subject={"user": user}),
                   metadata=[("authorization", "Bearer " + token)])
    except grpc.RpcError as err:
        print("reset: %s" % err.code().name)


if __name__ == "__main__":
    main()
