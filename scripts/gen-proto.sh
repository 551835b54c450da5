#!/usr/bin/env bash
# Generates the Go code of proto/freqcap/v1/freqcap.proto and proto/envoy
# (the part of Envoy's rate-limit service serve speaks) into gen/ with
# Debian's protoc and the two plugins at the versions go.mod pins. The
# generated code is committed; scripts/test.sh checks that running this
# leaves no diff. Needs protoc (apt-get install protobuf-compiler
# libprotobuf-dev: the latter has the well-known types).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="$(go env GOPATH)/bin"
want_go=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
want_connect=$(go list -m -f '{{.Version}}' connectrpc.com/connect)
# Install a plugin unless the one in $bin was built from the pinned version.
plugin() { # name module-path version
  if ! go version -m "$bin/$1" 2>/dev/null | grep -q "mod[[:space:]]*$2[[:space:]]*$3[[:space:]]"; then
    GOFLAGS= go install "$2/cmd/$1@$3"
  fi
}
plugin protoc-gen-go google.golang.org/protobuf "$want_go"
plugin protoc-gen-connect-go connectrpc.com/connect "$want_connect"

rm -rf gen/freqcap gen/envoy
mkdir -p gen
# freqcap's own schema, and the part of Envoy's rate-limit service API
# serve speaks (proto/envoy: Envoy's packages, names and field numbers).
PATH="$bin:$PATH" protoc -I proto -I /usr/include \
  --go_out=gen --go_opt=paths=source_relative \
  --connect-go_out=gen --connect-go_opt=paths=source_relative \
  freqcap/v1/freqcap.proto \
  envoy/service/ratelimit/v3/rls.proto \
  envoy/extensions/common/ratelimit/v3/ratelimit.proto \
  envoy/config/core/v3/base.proto \
  envoy/type/v3/ratelimit_unit.proto
