#!/usr/bin/env bash
# Upgrade the control plane (docker-compose.yml) with the fleet unaware: no node
# marked NotReady, no replica released or moved, heartbeats answered throughout.
#
#   deploy/rolling-upgrade.sh            after `git pull` (or a new image tag) in this checkout
#
# 1. BUILD: the new image (docker compose build; use `docker compose pull` for a registry's).
# 2. MIGRATE: the migrations, once, while the old code still runs. They must be additive:
#    new tables, new nullable or defaulted columns, new indexes. A column the old code
#    still reads is dropped or renamed one release later, once no process runs that code.
# 3. Each web process in turn (WEBS): RESTART it on the new image, then wait until its
#    READY URL (GET /healthz) answers 200, so agents always have a web process to fail
#    over to. Then each worker in turn (WORKERS): RESTART it (SIGTERM: Celery finishes the
#    task in hand, the periodic schedule's lease is given back and the other worker takes
#    it over) and wait until it answers WORKER_READY.
#
# Each step is a command taken from the environment, so the same procedure drives
# another layout (tests/reliability/test_rolling_upgrade.py runs it on the test cluster):
#   BUILD           default: docker compose build
#   MIGRATE         default: docker compose run --rm migrate
#   RESTART         run as `$RESTART NAME` for each web and worker; returns once the old
#                   process has stopped and the new one has started.
#                   default: docker compose up -d --no-deps --force-recreate
#   WEBS            NAME=READY_URL pairs, in order.
#                   default: web1=http://127.0.0.1:8000/healthz web2=http://127.0.0.1:8001/healthz
#   WORKERS         NAMEs, in order. default: worker1 worker2
#   WORKER_READY    run as `$WORKER_READY NAME`; succeeds once NAME takes tasks.
#                   default: a Celery ping of that container's worker
#   READY_TIMEOUT_S how long each process may take to be ready (default 120)
set -euo pipefail

BUILD=${BUILD:-docker compose build}
MIGRATE=${MIGRATE:-docker compose run --rm migrate}
RESTART=${RESTART:-docker compose up -d --no-deps --force-recreate}
WEBS=${WEBS:-web1=http://127.0.0.1:8000/healthz web2=http://127.0.0.1:8001/healthz}
WORKERS=${WORKERS:-worker1 worker2}
WORKER_READY=${WORKER_READY:-}
READY_TIMEOUT_S=${READY_TIMEOUT_S:-120}

say() { echo "rolling-upgrade: $(date -u +%H:%M:%S) $*"; }
fail() {
  echo "rolling-upgrade: $*" >&2
  exit 1
}

# Word splitting is how each command carries its arguments.
run() {
  local cmd=$1
  shift
  # shellcheck disable=SC2086
  $cmd "$@"
}

# Until `check` succeeds, at most READY_TIMEOUT_S.
wait_until() {
  local what=$1 deadline=$((SECONDS + READY_TIMEOUT_S))
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      "$@" >&2 || true # what the last try said
      fail "$what: not ready after ${READY_TIMEOUT_S} s; stopping here (the ones not yet restarted still run)"
    fi
    sleep 1
  done
}

web_ready() { curl -fsS --max-time 5 "$1"; }

worker_ready() {
  if [ -n "$WORKER_READY" ]; then
    run "$WORKER_READY" "$1"
  else
    # Each container's worker is named celery@ its container's hostname.
    docker compose exec -T "$1" sh -c \
      'celery -A llmgw.celery inspect ping --timeout 5 --destination "celery@$(hostname)"'
  fi
}

for pair in $WEBS; do
  [[ "$pair" == *=http* ]] || fail "WEBS: '$pair' is not NAME=READY_URL"
done

say "building the new image: $BUILD"
run "$BUILD"
say "migrating, old code still running: $MIGRATE"
run "$MIGRATE"

for pair in $WEBS; do
  name=${pair%%=*} url=${pair#*=}
  say "restarting $name"
  run "$RESTART" "$name"
  wait_until "$name ($url)" web_ready "$url"
  say "$name answers $url"
done
for name in $WORKERS; do
  say "restarting $name"
  run "$RESTART" "$name"
  wait_until "$name" worker_ready "$name"
  say "$name takes tasks"
done
say "done: every web process and worker runs the new code"
