#!/usr/bin/env bash
# Builds the local container images the container tests and docker-compose.yml
# use, without any image registry (docs/DOCKER.md):
#
#   freqcap/redis:7.0-debian  the host's Debian redis-server and redis-cli plus
#                             the shared libraries ldd lists, packed as a tar
#                             stream and turned into an image by docker import.
#   freqcap/console:dev       a static (CGO_ENABLED=0) build of ./cmd/freqcap,
#                             built on the host and COPY'd into FROM scratch.
#
# Usage: scripts/build-images.sh [redis] [console]   (default: both)
#        scripts/build-images.sh --names              (prints the image names)
#
# Idempotent: each image carries a label with the sha256 of what went into it
# and is rebuilt only when that changes (FORCE=1 rebuilds anyway), so a second
# run takes about as long as a cached `go build`.
# Use them with FREQCAP_IMAGE_REDIS=freqcap/redis:7.0-debian and
# FREQCAP_IMAGE_CONSOLE=freqcap/console:dev (scripts/test.sh sets both).
set -euo pipefail
cd "$(dirname "$0")/.."

# Fixed names: FREQCAP_IMAGE_* say which image to *use* and may name a
# public image, which a local build must never shadow.
REDIS_IMAGE=freqcap/redis:7.0-debian
CONSOLE_IMAGE=freqcap/console:dev
LABEL=org.freqcap.fingerprint
# Bump when the way an image is assembled changes, to force a rebuild.
RECIPE=2

# --names prints the two image names (scripts/test.sh removes those it built).
if [ "${1:-}" = --names ]; then
  echo "$REDIS_IMAGE $CONSOLE_IMAGE"
  exit 0
fi

want_redis=0 want_console=0
[ $# -eq 0 ] && set -- redis console
for a in "$@"; do
  case "$a" in
    redis) want_redis=1 ;;
    console) want_console=1 ;;
    *) echo "usage: $0 [redis] [console]" >&2; exit 2 ;;
  esac
done

command -v docker >/dev/null || { echo "build-images: docker CLI not found" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build-images: Docker engine not reachable" >&2; exit 1; }

# current_label IMAGE prints the image's fingerprint label, or nothing.
current_label() {
  docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true
}

# drop_superseded OLD-ID IMAGE removes the image IMAGE used to name, if the
# tag has moved on and no container uses it (so rebuilds leave no <none>).
drop_superseded() {
  if [ -n "$1" ] && [ "$1" != "$(docker image inspect -f '{{.Id}}' "$2")" ]; then
    docker image rm "$1" >/dev/null 2>&1 || true
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

build_redis() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "== installing redis-server redis-tools"
    SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
  fi
  local server cli
  server=$(readlink -f "$(command -v redis-server)")
  cli=$(readlink -f "$(command -v redis-cli)")
  local fp
  fp=$( { echo "recipe $RECIPE"; sha256sum "$server" "$cli"; } | sha256sum | cut -c1-32)
  if [ "${FORCE:-0}" != 1 ] && [ "$(current_label "$REDIS_IMAGE")" = "$fp" ]; then
    echo "== $REDIS_IMAGE is up to date"
    return
  fi
  echo "== building $REDIS_IMAGE from $server ($(redis-server --version | awk '{print $3}' | sed 's/^v=//'))"
  local root="$tmp/redis-root"
  mkdir -p "$root/usr/bin" "$root/data" "$root/tmp" "$root/etc" "$root/modules"
  chmod 1777 "$root/data" "$root/tmp"
  # The file name matters: redis-server picks its mode from argv[0].
  cp "$server" "$root/usr/bin/redis-server"
  cp "$cli" "$root/usr/bin/redis-cli"
  # Every library ldd resolves (plus the loader), at the path ldd names.
  local lib
  for lib in $(ldd "$server" "$cli" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  # Smoke test the root filesystem before importing it (needs chroot, i.e. root).
  if [ "$(id -u)" -eq 0 ]; then
    chroot "$root" /usr/bin/redis-server --version >/dev/null
  fi
  local old
  old=$(docker image inspect -f '{{.Id}}' "$REDIS_IMAGE" 2>/dev/null || true)
  tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'WORKDIR /data' \
    --change 'EXPOSE 6379' \
    --change 'USER 65534:65534' \
    --change "LABEL $LABEL=$fp" \
    --change 'CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
    - "$REDIS_IMAGE" >/dev/null
  # The image must start and answer PING (an imported image has no default
  # command of its own: CMD above is ours, passed explicitly here too).
  local id ok=0
  id=$(docker run -d --rm --network none "$REDIS_IMAGE" redis-server --port 6379 --save '' --appendonly no)
  for _ in $(seq 1 50); do
    if [ "$(docker exec "$id" redis-cli -p 6379 ping 2>/dev/null)" = PONG ]; then ok=1; break; fi
    sleep 0.1
  done
  docker rm -f "$id" >/dev/null
  if [ $ok != 1 ]; then
    docker image rm "$REDIS_IMAGE" >/dev/null 2>&1 || true
    echo "build-images: $REDIS_IMAGE does not answer PING" >&2
    exit 1
  fi
  drop_superseded "$old" "$REDIS_IMAGE"
  echo "== $REDIS_IMAGE answers PING"
}

build_console() {
  local ctx="$tmp/console-ctx"
  mkdir -p "$ctx"
  echo "== go build ./cmd/freqcap (CGO_ENABLED=0, static)"
  CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$ctx/freqcap" ./cmd/freqcap
  local fp
  fp=$( { echo "recipe $RECIPE"; sha256sum "$ctx/freqcap" Dockerfile | awk '{print $1}'; } | sha256sum | cut -c1-32)
  if [ "${FORCE:-0}" != 1 ] && [ "$(current_label "$CONSOLE_IMAGE")" = "$fp" ]; then
    echo "== $CONSOLE_IMAGE is up to date"
    return
  fi
  echo "== building $CONSOLE_IMAGE"
  # The context holds only the binary, so nothing else is sent to the engine
  # and FROM scratch needs no base image.
  local old
  old=$(docker image inspect -f '{{.Id}}' "$CONSOLE_IMAGE" 2>/dev/null || true)
  # The classic builder: BuildKit needs the buildx plugin, which a plain
  # Debian docker.io lacks, and buys nothing for one COPY. Its deprecation
  # notice is shown only if the build fails.
  if ! DOCKER_BUILDKIT=0 docker build -q -f Dockerfile --label "$LABEL=$fp" -t "$CONSOLE_IMAGE" "$ctx" >"$tmp/build.log" 2>&1; then
    cat "$tmp/build.log" >&2
    exit 1
  fi
  drop_superseded "$old" "$CONSOLE_IMAGE"
  echo "== $CONSOLE_IMAGE built"
}

[ $want_redis = 1 ] && build_redis
[ $want_console = 1 ] && build_console
exit 0
