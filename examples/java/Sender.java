// A sender in Java asking freqcap serve before each push, over gRPC, with
// stubs generated from proto/freqcap/v1 by protoc and grpc-java's plugin.
// examples/java/build.sh builds it (README.md beside this file); against a
// server of the policies it uses, examples/senders.yaml, run it as
//
//     FREQCAP_ADDR=127.0.0.1:8081 FREQCAP_TOKEN=… java -jar /tmp/freqcap-java/sender.jar
//
// FREQCAP_USER names the person (default 18829340001), FREQCAP_ZONE their
// IANA time zone (default Asia/Shanghai).

import com.google.protobuf.Timestamp;
import dev.freqcap.v1.Attempt;
import dev.freqcap.v1.BatchResult;
import dev.freqcap.v1.Decision;
import dev.freqcap.v1.FreqcapServiceGrpc;
import dev.freqcap.v1.OverrideKind;
import dev.freqcap.v1.ResetRequest;
import dev.freqcap.v1.RuleDecision;
import dev.freqcap.v1.TakeBatchRequest;
import dev.freqcap.v1.TakeBatchResponse;
import dev.freqcap.v1.TakeRequest;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

public final class Sender {
    private static final int TRIES = 5;

    private final FreqcapServiceGrpc.FreqcapServiceBlockingStub stub;

    Sender(ManagedChannel channel, String token) {
        Metadata auth = new Metadata();
        auth.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
        stub = FreqcapServiceGrpc.newBlockingStub(channel)
                .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(auth));
    }

    /** sdk.Fingerprint: the first 10 bytes of SHA-256, base32, lower case. */
    static String fingerprint(String text) {
        byte[] digest;
        try {
            digest = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        String alphabet = "abcdefghijklmnopqrstuvwxyz234567";
        StringBuilder out = new StringBuilder();
        int buffer = 0, bits = 0;
        for (int i = 0; i < 10; i++) { // 80 bits: 16 characters, no padding
            buffer = (buffer << 8) | (digest[i] & 0xff);
            for (bits += 8; bits >= 5; bits -= 5) {
                out.append(alphabet.charAt((buffer >> (bits - 5)) & 31));
            }
        }
        return out.toString();
    }

    /**
     * Takes one unit of policy "push" for (user, content) and returns the
     * Decision. Retries transient failures (the call may not have been
     * decided, or its answer was lost) with exponential back-off and
     * jitter, at most TRIES times within 4 s, with one idempotency key: a retry of a
     * call serve decided gets its first decision back and counts nothing.
     * Every other code is serve's refusal of the call: a retry gets the same.
     */
    Decision maySend(String user, String text, String messageId) throws InterruptedException {
        return take(TakeRequest.newBuilder()
                .setPolicy("push")
                .putSubject("user", user)
                .putSubject("content", fingerprint(text))
                .setIdempotencyKey(messageId)
                .build());
    }

    /**
     * The kinds of message of policy "messages" (examples/senders.yaml):
     * each one's class, which the policy declares (what it is exempt from),
     * and its priority, 0 (the default) to 9.
     */
    enum Kind {
        PROMOTION("", 0), // capped, and the day's last unit is not for it
        ALERT("alert", 1), // may use the last unit; passes quiet hours
        OTP("otp", 0); // exempt from every cap, still counted, and from quiet hours

        final String messageClass;
        final int priority;

        Kind(String messageClass, int priority) {
            this.messageClass = messageClass;
            this.priority = priority;
        }

        @Override
        public String toString() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /**
     * Takes one unit of policy "messages" for a message of kind to identity
     * (a phone number: serve decides it for the person it is linked to), in
     * the recipient's IANA zone, where the policy's calendar day and quiet
     * hours are counted, and returns the Decision. Retries as maySend.
     */
    Decision mayNotify(String identity, String zone, Kind kind, String messageId) throws InterruptedException {
        return take(TakeRequest.newBuilder()
                .setPolicy("messages")
                .setIdentity(identity)
                .setZone(zone)
                .setClass_(kind.messageClass)
                .setPriority(kind.priority)
                .setIdempotencyKey(messageId)
                .build());
    }

    /** Sends request with its idempotency key, retrying transient failures within 4 s. */
    private Decision take(TakeRequest request) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(4);
        for (int attempt = 0; ; attempt++) {
            long left = Math.max(1, Math.min(2000, TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime())));
            try {
                return stub.withDeadlineAfter(left, TimeUnit.MILLISECONDS).take(request).getDecision();
            } catch (StatusRuntimeException err) {
                Status.Code code = err.getStatus().getCode();
                long pause = (long) (Math.min(1000, 50L << attempt) * ThreadLocalRandom.current().nextDouble(0.5, 1.5));
                boolean retryable = code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED;
                if (!retryable || attempt == TRIES - 1 || System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(pause) >= end) {
                    throw err;
                }
                Thread.sleep(pause);
            }
        }
    }

    /** What a decision says: allowed with what is left, or what denied and when to retry. */
    static String describe(Decision d) {
        if (d.getAllowed() && d.getDegraded()) {
            // A fail-open policy allowed it without its backend: no rules, nothing counted.
            return "allowed, degraded: " + d.getDegradedReason();
        }
        if (d.getAllowed()) {
            return String.format("allowed, %d of %d left this minute",
                    d.getRules(0).getRemaining(), d.getRules(0).getLimit());
        }
        double retry = d.getRetryAfter().getSeconds() + d.getRetryAfter().getNanos() / 1e9;
        if (d.getOverride().getKind() == OverrideKind.OVERRIDE_KIND_BLOCK) {
            // A per-person block (OverrideService) denies without a rule.
            return String.format("blocked by override #%d (%s), retry in %.0fs",
                    d.getOverride().getId(), d.getOverride().getReason(), retry);
        }
        return String.format("denied by %s, retry in %.0fs", String.join(",", d.getDeniedList()), retry);
    }

    /**
     * What a decision of policy "messages" says, in the recipient's local
     * time: allowed with how much of the day is used, what its class was
     * exempt from and the quiet hours it passed; or why it was denied (quiet
     * hours, the units kept for higher priorities, or the rules) and the
     * earliest time the same message may go, if nothing else is sent.
     */
    static String explain(Decision d, String zone) {
        DateTimeFormatter local = DateTimeFormatter.ofPattern("HH:mm").withZone(ZoneId.of(zone));
        if (d.getAllowed()) {
            StringBuilder text = new StringBuilder(String.format("allowed, %d of %d used today",
                    d.getRules(0).getUsed(), d.getRules(0).getLimit()));
            if (d.getExemptedCount() > 0) {
                text.append(String.format(", past %s as its class %s is exempt",
                        String.join(",", d.getExemptedList()), d.getClass_()));
            }
            if (d.hasQuietUntil()) {
                text.append(", in quiet hours until ").append(local.format(instant(d.getQuietUntil())));
            }
            return text.toString();
        }
        String why;
        if (d.getDeniedCount() == 0 && d.hasQuietUntil()) {
            why = "quiet hours until " + local.format(instant(d.getQuietUntil()));
        } else if (d.getHeadroom()) {
            long keep = d.getRulesList().stream().filter(RuleDecision::getHeadroom)
                    .mapToLong(RuleDecision::getKeep).max().orElse(0);
            why = String.format("%s: its last %d kept for higher priorities", String.join(",", d.getDeniedList()), keep);
        } else {
            why = String.join(",", d.getDeniedList());
        }
        return String.format("denied by %s, next eligible at %s", why, local.format(instant(d.getNextEligible())));
    }

    static Instant instant(Timestamp ts) {
        return Instant.ofEpochSecond(ts.getSeconds(), ts.getNanos());
    }

    /**
     * Sends one campaign message to several people in one TakeBatch call:
     * one result per attempt, in order, each with its decision or its own
     * error. Each attempt has its own idempotency key, so the whole batch
     * can be re-sent after a lost reply.
     */
    List<BatchResult> campaign(String campaign, String text, Map<String, String> people) {
        TakeBatchRequest.Builder batch = TakeBatchRequest.newBuilder().setPolicy("push");
        for (Map.Entry<String, String> p : people.entrySet()) {
            batch.addAttempts(Attempt.newBuilder()
                    .putSubject("user", p.getKey())
                    .putSubject(p.getValue(), fingerprint(text))
                    .setIdempotencyKey(campaign + ":" + p.getKey()));
        }
        TakeBatchResponse response = stub.withDeadlineAfter(2, TimeUnit.SECONDS).takeBatch(batch.build());
        return response.getResultsList();
    }

    public static void main(String[] args) throws InterruptedException {
        String addr = System.getenv().getOrDefault("FREQCAP_ADDR", "127.0.0.1:8081");
        String user = System.getenv().getOrDefault("FREQCAP_USER", "18829340001");
        ManagedChannel channel = ManagedChannelBuilder.forTarget(addr).usePlaintext().build();
        try {
            Sender sender = new Sender(channel, System.getenv("FREQCAP_TOKEN"));
            for (int n = 1; n <= 3; n++) {
                Decision d = sender.maySend(user, "Your parcel is on its way", "parcel-" + n);
                System.out.printf("send #%d: %s%n", n, describe(d));
            }
            // A retry of a message already decided gets its first decision back.
            Decision d = sender.maySend(user, "Your parcel is on its way", "parcel-1");
            System.out.printf("retry of #1: allowed=%s replayed=%s%n", d.getAllowed(), d.getReplayed());

            // One call for many people; the second names a dimension push
            // does not have, so that attempt alone fails. Sent twice, as
            // after a lost reply: the same keys get the first decisions.
            Map<String, String> people = new LinkedHashMap<>();
            people.put("18829340002", "content");
            people.put("18829340003", "colour");
            people.put(user, "content");
            for (String round : new String[] {"campaign", "re-sent"}) {
                List<BatchResult> results = sender.campaign("parcel-7", "Your parcel is on its way", people);
                int i = 0;
                for (String person : people.keySet()) {
                    BatchResult r = results.get(i++);
                    if (r.hasError()) {
                        System.out.printf("%s to %s: error %s (%s)%n", round, person,
                                r.getError().getCode(), r.getError().getReason());
                    } else {
                        System.out.printf("%s to %s: %s%s%n", round, person, describe(r.getDecision()),
                                r.getDecision().getReplayed() ? " (replayed)" : "");
                    }
                }
            }

            // Messages of each kind to the same person, in their zone.
            String zone = System.getenv().getOrDefault("FREQCAP_ZONE", "Asia/Shanghai");
            Kind[] messages = {Kind.PROMOTION, Kind.PROMOTION, Kind.PROMOTION, Kind.ALERT, Kind.OTP};
            for (int n = 1; n <= messages.length; n++) {
                Kind kind = messages[n - 1];
                Decision m = sender.mayNotify(user, zone, kind, kind + "-" + n);
                System.out.printf("message #%d, %s: %s%n", n, kind, explain(m, zone));
            }

            // Refusals are errors with a code, never a crash.
            try {
                sender.stub.reset(ResetRequest.newBuilder().setPolicy("push").putSubject("user", user).build());
            } catch (StatusRuntimeException err) {
                System.out.printf("reset: %s%n", err.getStatus().getCode());
            }
        } finally {
            channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        }
    }
}
