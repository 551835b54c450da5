// Package docker holds freqcap's container tests: the conformance suite
// against a Redis container and a Redis Cluster on a docker network, fault
// injection (pause, stop and restart, master failover) and the
// docker-compose.yml check. The package itself is empty; see the _test.go
// files and docs/DOCKER.md.
//
// Run them with local images (no registry needed):
//
//	scripts/build-images.sh
//	FREQCAP_IMAGE_REDIS=freqcap/redis:7.0-debian FREQCAP_IMAGE_CONSOLE=freqcap/console:dev \
//	  go test -race ./tests/docker/
//
// Without a Docker engine or the images the tests skip, unless
// FREQCAP_REQUIRE_SERVERS=1.
package docker
