// Package docker holds freqcap's container tests: the conformance suite
// against a Redis container, a Redis Cluster and a Sentinel deployment on
// docker networks (and module images, opt-in), fault injection (pause,
// stop and restart, master failover) and the docker-compose.yml checks.
// They start their servers with the public container kit,
// sdk/conformance/containers. The package itself is empty; see the _test.go
// files and docs/DOCKER.md.
//
// Run them with local images (no registry needed):
//
//	scripts/build-images.sh
//	go test -race ./tests/docker/
//
// Without a Docker engine or the images the tests skip, unless
// FREQCAP_REQUIRE_SERVERS=1.
package docker
