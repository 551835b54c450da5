#!/usr/bin/env bash
# The freqcap test command (README.md). It installs what the tests need,
# builds the local container images, then runs vet, format, generate and
# race-enabled tests, and removes the images it built (FREQCAP_KEEP_IMAGES=1
# keeps them). CI runs it with FREQCAP_REQUIRE_SERVERS=1, which turns
# "server not found" skips into failures.
set -euo pipefail
cd "$(dirname "$0")/.."

# What is missing: redis-server, redis-tools, chromium, and docker-compose
# when no Compose is installed (scripts/missing-packages.sh); then protoc and
# the well-known types (scripts/gen-proto.sh, checked below), the
# non-Go clients of serve's end-to-end tests (Debian's Python 3 gRPC, curl,
# and the JDK and grpc-java jars the Java sender's build lists), and a C
# compiler.
need=$(scripts/missing-packages.sh)
command -v protoc >/dev/null || need="$need protobuf-compiler"
[ -f /usr/include/google/protobuf/duration.proto ] || need="$need libprotobuf-dev"
/usr/bin/python3 -c 'import grpc' 2>/dev/null || need="$need python3-grpcio"
/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null || need="$need python3-protobuf"
/usr/bin/python3 -c 'import grpc_tools' 2>/dev/null || need="$need python3-grpc-tools"
command -v curl >/dev/null || need="$need curl"
# A C compiler and libc's headers: internal/redistest.Clock builds its clock
# shim at test time (tests/messaging's simulation on Redis).
command -v cc >/dev/null || need="$need gcc"
echo '#include <sys/mman.h>' | cc -E - >/dev/null 2>&1 || need="$need libc6-dev"
need="$need $(examples/java/build.sh --missing)"
need=$(echo $need)
if [ -n "$need" ]; then
  echo "== installing" $need
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086 # one package name per word
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

# The local images are removed when this script exits (after go test, which
# uses them), but only those this run created: an image of that name that was
# there before is the user's and stays, as do both with FREQCAP_KEEP_IMAGES=1.
created_images=""
drop_images() {
  [ -n "$created_images" ] || return 0
  if [ "${FREQCAP_KEEP_IMAGES:-0}" = 1 ]; then
    echo "== keeping the local images$created_images (FREQCAP_KEEP_IMAGES=1)"
    return 0
  fi
  echo "== removing the local images this run built:$created_images (FREQCAP_KEEP_IMAGES=1 keeps them)"
  local img
  for img in $created_images; do
    docker image rm "$img" >/dev/null 2>&1 || echo "could not remove $img (still in use?)" >&2
  done
}
if [ -x scripts/build-images.sh ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  for img in $(scripts/build-images.sh --names); do
    docker image inspect "$img" >/dev/null 2>&1 || created_images="$created_images $img"
  done
  trap drop_images EXIT
  echo "== building local images"
  scripts/build-images.sh
  export FREQCAP_IMAGE_REDIS="${FREQCAP_IMAGE_REDIS:-freqcap/redis:7.0-debian}"
  export FREQCAP_IMAGE_CONSOLE="${FREQCAP_IMAGE_CONSOLE:-freqcap/console:dev}"
fi

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== templ generate leaves no diff"
# Every .templ under console/ (the views live in console/internal/views).
if [ -n "$(find console -name '*.templ' -print -quit)" ]; then
  go run github.com/a-h/templ/cmd/templ@v0.3.977 generate -path console >/dev/null
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -n "$(git status --porcelain -- console)" ]; then
    git status --porcelain -- console; echo "templ generate changed files: commit the generated code"; exit 1
  fi
fi

echo "== gen-proto leaves no diff"
scripts/gen-proto.sh
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -n "$(git status --porcelain -- gen proto)" ]; then
  git status --porcelain -- gen proto; echo "scripts/gen-proto.sh changed files: commit the generated code"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
# The longest packages (backends/redis: every conformance suite, Cluster,
# Sentinel, under the race detector; tests/docker) take 3 to 7 minutes
# each on a 2-core machine, more when the machine is shared: the timeout
# catches a hung test, not a slow one. They wait on servers and containers
# much of that time, so three packages run at once (-p 3), not one per
# core: the CPU stays busy.
go test -race -p 3 -timeout 20m -count=1 ./... "$@"
