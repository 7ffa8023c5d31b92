#!/usr/bin/env bash
# Give a machine its llmgw identity and its agent. Run it where the certificate
# authority is (beside the control plane, after `llmgw ca init`): the node's first
# certificate is issued here, and the CA's key never leaves this machine.
#
#   deploy/onboard-node.sh --node gpu-a-01 --host root@10.0.0.21 \
#       --server https://llmgw.example.internal:8443 --release /srv/llmgw-agent/0.1.0 [--dry-run]
#
# --release is a folder or an https:// URL holding SHA256SUMS and the wheels it lists
# (the agent's and its dependencies'): every file is checked against SHA256SUMS before
# anything reaches the node, and the node installs from those files alone (pip
# --no-index), so what runs there is exactly what was checked.
#
# Then, over ssh: the agent into /opt/llmgw-agent (a virtualenv), its key, certificate
# and the CA's certificate into /var/lib/llmgw-agent and /etc/llmgw-agent, agent.yaml,
# and the systemd unit (deploy/systemd/llmgw-agent.service), enabled and started.
#
# --dry-run checks the release the same way, then prints every command that would
# change the CA's records or the node instead of running it.
set -euo pipefail
umask 077

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
fail() {
  echo "onboard-node.sh: $*" >&2
  exit 1
}

HERE=$(cd "$(dirname "$0")" && pwd)
UNIT="$HERE/systemd/llmgw-agent.service"
NODE="" HOST="" SERVER="" RELEASE="" DRY_RUN=0
LLMGW=${LLMGW:-llmgw}
SSH=${SSH:-ssh}
SCP=${SCP:-scp}
while (($#)); do
  case "$1" in
    --node) NODE=${2-}; shift 2 ;;
    --host) HOST=${2-}; shift 2 ;;
    --server) SERVER=${2-}; shift 2 ;;
    --release) RELEASE=${2-}; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h | --help) usage ;;
    *) fail "unknown argument $1 (see --help)" ;;
  esac
done
[ -n "$NODE" ] || fail "--node: required (the node's name, as the agent reports it)"
[ -n "$HOST" ] || fail "--host: required (where to ssh to, e.g. root@10.0.0.21)"
[ -n "$SERVER" ] || fail "--server: required (the control plane's https:// URL)"
[ -n "$RELEASE" ] || fail "--release: required (a folder or URL with SHA256SUMS and wheels)"
# The names an agent can report as (llmgw_agent.protocol.bounds.NAME).
[[ "$NODE" =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$ ]] ||
  fail "--node: '$NODE' is not a node name (letters, digits, '.', '_', '-')"
[[ "$SERVER" =~ ^https://[^/]+ ]] ||
  fail "--server: '$SERVER' must be an https:// URL: the node authenticates with its certificate over TLS"
[ -f "$UNIT" ] || fail "$UNIT: missing"

# shellcheck source=deploy/lib/show.sh disable=SC1091
source "$(dirname "$0")/lib/show.sh"

# What changes anything goes through run(): printed under --dry-run.
run() {
  if ((DRY_RUN)); then show "$@"; else "$@"; fi
}

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/release" "$STAGE/etc"

# --- the release, checked --------------------------------------------------
if [[ "$RELEASE" =~ ^https:// ]]; then
  curl -fsSL --proto '=https' -o "$STAGE/release/SHA256SUMS" "$RELEASE/SHA256SUMS" ||
    fail "--release: cannot fetch $RELEASE/SHA256SUMS"
elif [ -d "$RELEASE" ]; then
  [ -f "$RELEASE/SHA256SUMS" ] || fail "--release: no SHA256SUMS in $RELEASE"
  cp "$RELEASE/SHA256SUMS" "$STAGE/release/"
else
  fail "--release: '$RELEASE' is neither a folder nor an https:// URL"
fi
mapfile -t FILES < <(awk 'NF == 2 { sub(/^\*/, "", $2); print $2 }' "$STAGE/release/SHA256SUMS")
((${#FILES[@]})) || fail "--release: SHA256SUMS lists no files"
for f in "${FILES[@]}"; do
  # A name with a slash could write outside the staging folder.
  [[ "$f" =~ ^[A-Za-z0-9._+-]+$ ]] || fail "--release: SHA256SUMS names '$f', not a plain file name"
  if [[ "$RELEASE" =~ ^https:// ]]; then
    curl -fsSL --proto '=https' -o "$STAGE/release/$f" "$RELEASE/$f" ||
      fail "--release: cannot fetch $RELEASE/$f"
  else
    [ -f "$RELEASE/$f" ] || fail "--release: SHA256SUMS lists $f, which is not in $RELEASE"
    cp "$RELEASE/$f" "$STAGE/release/"
  fi
done
(cd "$STAGE/release" && sha256sum --check --strict --quiet SHA256SUMS) ||
  fail "--release: checksums do not match SHA256SUMS; nothing was installed"
compgen -G "$STAGE/release/llmgw_agent-*.whl" >/dev/null ||
  fail "--release: SHA256SUMS lists no llmgw_agent wheel"
echo "release checked: ${#FILES[@]} files match SHA256SUMS"

# --- the node's identity -----------------------------------------------------
run "$LLMGW" node add "$NODE" --cert --out "$STAGE/cert"

cat >"$STAGE/etc/agent.yaml" <<EOF
# Written by deploy/onboard-node.sh; every key is described in agent.example.yaml.
server_url: $SERVER
node: $NODE
# The node's certificate and key: the agent renews both here before they expire.
cert_file: /var/lib/llmgw-agent/node.pem
key_file: /var/lib/llmgw-agent/node.key
# The CA of the control plane's certificate (llmgw ca server-cert).
ca_file: /etc/llmgw-agent/ca.pem
model_dirs:
  - /var/lib/llmgw/models
heartbeat_interval_s: 10
EOF
echo "agent.yaml for $NODE:"
sed 's/^/  /' "$STAGE/etc/agent.yaml"

# --- the node ------------------------------------------------------------------
REMOTE=/var/tmp/llmgw-onboard
run "$SSH" "$HOST" "rm -rf $REMOTE && mkdir -m 0700 $REMOTE"
run "$SCP" -q "$STAGE"/release/* "$STAGE/etc/agent.yaml" "$UNIT" "$HOST:$REMOTE/"
run "$SCP" -q "$STAGE/cert/node.pem" "$STAGE/cert/node.key" "$STAGE/cert/ca.pem" "$HOST:$REMOTE/"
run "$SSH" "$HOST" "set -e
python3 -m venv /opt/llmgw-agent
/opt/llmgw-agent/bin/pip install --quiet --no-index --find-links $REMOTE llmgw-agent
install -d -m 0700 /etc/llmgw-agent /var/lib/llmgw-agent
install -m 0600 $REMOTE/agent.yaml $REMOTE/ca.pem /etc/llmgw-agent/
install -m 0600 $REMOTE/node.pem $REMOTE/node.key /var/lib/llmgw-agent/
install -m 0644 $REMOTE/llmgw-agent.service /etc/systemd/system/llmgw-agent.service
rm -rf $REMOTE
systemctl daemon-reload
systemctl enable --now llmgw-agent.service
systemctl is-active llmgw-agent.service"

if ((DRY_RUN)); then
  echo "dry run: nothing was issued, copied or started"
else
  echo "node $NODE onboarded: its agent runs on $HOST; \`llmgw ctl nodes\` lists it once it reports"
fi
