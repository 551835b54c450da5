#!/usr/bin/env bash
# Builds the Java sender, examples/java/Sender.java, into OUT/sender.jar
# (OUT: the first argument, default /tmp/freqcap-java) from Debian's
# packages alone, no Maven: protoc and grpc-java's plugin generate the
# stubs from proto/freqcap/v1 into OUT/src, javac compiles them with the
# sender, and the jar's manifest names the jars it runs with. Run it with
#   FREQCAP_ADDR=127.0.0.1:8081 FREQCAP_TOKEN=… java -jar OUT/sender.jar
# `build.sh --missing` prints the Debian packages the build lacks.
set -euo pipefail
jars=/usr/share/java
# What the sender runs with: grpc-java and its Netty transport, protobuf,
# Guava and PerfMark.
runtime="grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf guava perfmark-api netty-buffer netty-codec netty-codec-http netty-codec-http2
  netty-common netty-handler netty-resolver netty-transport"
# javax.annotation.Generated, on the plugin's stubs, only to compile them.
compile=geronimo-annotation-1.3-spec

if [ "${1:-}" = --missing ]; then
  { command -v javac >/dev/null && command -v jar >/dev/null && command -v java >/dev/null || echo default-jdk-headless
    command -v protoc >/dev/null || echo protobuf-compiler
    [ -f /usr/include/google/protobuf/duration.proto ] || echo libprotobuf-dev
    [ -x /usr/bin/grpc_java_plugin ] || echo protobuf-compiler-grpc-java-plugin
    for j in $runtime $compile; do
      [ -f "$jars/$j.jar" ] && continue
      case $j in
        grpc-*) echo libgrpc-java ;;
        protobuf) echo libprotobuf-java ;;
        netty-*) echo libnetty-java ;;
        perfmark-*) echo libperfmark-java ;;
        guava) echo libguava-java ;;
        geronimo-annotation-1.3-spec) echo libgeronimo-annotation-1.3-spec-java ;;
      esac
    done; } | sort -u
  exit 0
fi

out=${1:-/tmp/freqcap-java}
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out/src" "$out/classes"
mkdir -p "$out/src" "$out/classes"
protoc -I "$repo/proto" -I /usr/include \
  --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin \
  --java_out="$out/src" --grpc-java_out="$out/src" freqcap/v1/freqcap.proto
cp=$(for j in $runtime $compile; do printf '%s:' "$jars/$j.jar"; done)
find "$out/src" "$repo/examples/java" -name '*.java' >"$out/sources"
# C1 and the serial collector: javac runs once, briefly (twice as fast).
javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -d "$out/classes" -cp "$cp" @"$out/sources"
sep="Class-Path:" # one jar a line: a manifest's lines are at most 72 bytes
for j in $runtime; do echo "$sep $jars/$j.jar"; sep=" "; done >"$out/manifest"
jar --create --file "$out/sender.jar" --main-class Sender --manifest "$out/manifest" -C "$out/classes" .
