// Package conformance holds a test to copy into your own repository's
// tests: it runs freqcap's conformance suite (sdk/conformance) against a
// Redis-protocol server started from an image you name — a Tair or Redis
// module build, or a server of your own — with the container kit
// (sdk/conformance/containers). docs/DOCKER.md shows the same file ("Run
// the conformance suite against your own server image"), and a test keeps
// the two identical. The package itself is empty; see conformance_test.go.
package conformance
