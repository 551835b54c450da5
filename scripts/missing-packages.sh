#!/usr/bin/env bash
# Prints, one per line, the Debian packages scripts/test.sh installs because
# what they provide is missing from PATH: redis-server, redis-tools,
# chromium, and docker-compose when there is no Compose at all (neither a
# docker-compose command nor the v2 plugin, `docker compose`). Debian 12's
# docker-compose is Compose 1.29, run as `docker-compose`: the spelling the
# docs use.
set -euo pipefail

command -v redis-server >/dev/null || echo redis-server
command -v redis-cli >/dev/null || echo redis-tools
command -v chromium >/dev/null || echo chromium
if ! command -v docker-compose >/dev/null &&
  ! { command -v docker >/dev/null && docker compose version >/dev/null 2>&1; }; then
  echo docker-compose
fi
