#!/usr/bin/env bash
# Make a node's virtual machine on Proxmox VE, from a cloud-init template, with `qm`.
# Run it on the Proxmox host. It only prints the qm commands unless given --apply:
# making VMs is for whoever holds the hypervisor, and giving the VM an identity is
# deploy/onboard-node.sh's, run where the certificate authority is.
#
#   deploy/provision-node.sh --vmid 210 --name gpu-a-01 --template 9000 \
#       --cores 32 --memory 262144 --disk 200 --ip 10.0.0.21/24 --gateway 10.0.0.1 \
#       --ssh-key ~/.ssh/id_ed25519.pub [--gpu 0000:41:00.0 ...] [--bridge vmbr0] \
#       [--storage local-lvm] [--cpu host] [--apply]
set -euo pipefail

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
fail() {
  echo "provision-node.sh: $*" >&2
  exit 1
}

VMID="" NAME="" TEMPLATE="" CORES=4 MEMORY=8192 DISK="" IP="" GATEWAY="" SSH_KEY=""
BRIDGE=vmbr0 STORAGE=local-lvm APPLY=0
# The host's CPU as it is: Proxmox's default (kvm64) hides AVX2 and AVX-512, which
# llama.cpp's builds need and the agent warns about. A cluster that live-migrates
# between unlike hosts names a common model instead (--cpu x86-64-v3).
CPU=host
GPUS=()
QM=${QM:-qm}
while (($#)); do
  case "$1" in
    --vmid) VMID=${2-}; shift 2 ;;
    --name) NAME=${2-}; shift 2 ;;
    --template) TEMPLATE=${2-}; shift 2 ;;
    --cores) CORES=${2-}; shift 2 ;;
    --memory) MEMORY=${2-}; shift 2 ;;
    --disk) DISK=${2-}; shift 2 ;;
    --ip) IP=${2-}; shift 2 ;;
    --gateway) GATEWAY=${2-}; shift 2 ;;
    --ssh-key) SSH_KEY=${2-}; shift 2 ;;
    --gpu) GPUS+=("${2-}"); shift 2 ;;
    --bridge) BRIDGE=${2-}; shift 2 ;;
    --storage) STORAGE=${2-}; shift 2 ;;
    --cpu) CPU=${2-}; shift 2 ;;
    --apply) APPLY=1; shift ;;
    --dry-run) APPLY=0; shift ;;
    -h | --help) usage ;;
    *) fail "unknown argument $1 (see --help)" ;;
  esac
done

number() { # name value minimum
  if ! [[ "$2" =~ ^[0-9]+$ ]] || (($2 < $3)); then
    fail "$1: '$2' must be a whole number, at least $3"
  fi
}
number --vmid "$VMID" 100
number --template "$TEMPLATE" 100
number --cores "$CORES" 1
number --memory "$MEMORY" 512
[ -z "$DISK" ] || number --disk "$DISK" 1
# A node's name is its host name and the name its agent reports as.
[[ "$NAME" =~ ^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$ ]] ||
  fail "--name: '$NAME' must be a host name (letters, digits and '-', 63 at most)"
[[ "$IP" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] ||
  fail "--ip: '$IP' must be an IPv4 address with its prefix length, e.g. 10.0.0.21/24"
[[ "$GATEWAY" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] ||
  fail "--gateway: '$GATEWAY' must be an IPv4 address"
[ -f "$SSH_KEY" ] || fail "--ssh-key: '$SSH_KEY' is not a file (a public key)"
grep -q '^\(ssh-\|ecdsa-\|sk-\)' "$SSH_KEY" || fail "--ssh-key: $SSH_KEY does not hold a public key"
[[ "$BRIDGE" =~ ^[A-Za-z0-9._-]+$ ]] || fail "--bridge: '$BRIDGE' is not a bridge name"
[[ "$STORAGE" =~ ^[A-Za-z0-9._-]+$ ]] || fail "--storage: '$STORAGE' is not a storage name"
[[ "$CPU" =~ ^[A-Za-z0-9._-]+$ ]] || fail "--cpu: '$CPU' is not a CPU type (host, x86-64-v3)"
for gpu in "${GPUS[@]}"; do
  [[ "$gpu" =~ ^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(\.[0-7])?$ ]] ||
    fail "--gpu: '$gpu' is not a PCI address (0000:41:00.0)"
done
if ((APPLY)) && ! command -v "$QM" >/dev/null; then
  fail "$QM: not found: run this on the Proxmox host, or leave --apply off to see the commands"
fi

# shellcheck source=deploy/lib/show.sh disable=SC1091
source "$(dirname "$0")/lib/show.sh"

run() {
  show "$@"
  if ((APPLY)); then "$@"; fi
}

run "$QM" clone "$TEMPLATE" "$VMID" --name "$NAME" --full 1 --storage "$STORAGE"
run "$QM" set "$VMID" --cores "$CORES" --cpu "$CPU" --memory "$MEMORY" --net0 "virtio,bridge=$BRIDGE"
run "$QM" set "$VMID" --ipconfig0 "ip=$IP,gw=$GATEWAY" --sshkeys "$SSH_KEY" --ciuser root
[ -z "$DISK" ] || run "$QM" resize "$VMID" scsi0 "${DISK}G"
# PCI Express passthrough (pcie=1) needs the q35 machine.
((${#GPUS[@]} == 0)) || run "$QM" set "$VMID" --machine q35
i=0
for gpu in "${GPUS[@]}"; do
  # Passed through whole: the agent reads the GPU as on bare metal.
  run "$QM" set "$VMID" "--hostpci$i" "$gpu,pcie=1"
  i=$((i + 1))
done
run "$QM" start "$VMID"

if ((APPLY)); then
  echo "VM $VMID ($NAME) started at ${IP%/*}."
else
  echo "dry run: nothing was changed; --apply runs the commands above."
fi
echo "Next, where the CA is: deploy/onboard-node.sh --node $NAME --host root@${IP%/*} --server URL --release DIR"
