// A sender in Java asking freqcap serve before each push, over gRPC, with
// stubs generated from proto/freqcap/v1 by protoc and grpc-java's plugin.
// examples/java/build.sh builds it (README.md beside this file); run it as
//
//     FREQCAP_ADDR=127.0.0.1:8081 FREQCAP_TOKEN=… java -jar /tmp/freqcap-java/sender.jar

import dev.freqcap.v1.Attempt;
import dev.freqcap.v1.BatchResult;
import dev.freqcap.v1.Decision;
import dev.freqcap.v1.FreqcapServiceGrpc;
import dev.freqcap.v1.OverrideKind;
import dev.freqcap.v1.ResetRequest;
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
import java.util.LinkedHashMap;
import java.util.List;
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
        TakeRequest request = TakeRequest.newBuilder()
                .setPolicy("push")
                .putSubject("user", user)
                .putSubject("content", fingerprint(text))
                .setIdempotencyKey(messageId)
                .build();
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
