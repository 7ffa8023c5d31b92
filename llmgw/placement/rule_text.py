"""The words of the placement rules' refusals (llmgw/placement/rules.py):
made only when explain asks, each naming what bit with both numbers."""

from __future__ import annotations

from functools import lru_cache

from llmgw.units import format_bytes_pair

from .node_state import NodeState

DRY_RUN = "by the replicas this dry run placed before this one"

# Explaining a refusal formats a few figures per node, and a fleet repeats
# the same few totals and claims: formatting was the largest single cost.
sizes = lru_cache(maxsize=4096)(format_bytes_pair)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def memory_message(n: NodeState, free: int, want: int) -> str:
    v = n.view
    return memory_text(v.memory_total_bytes or 0, free, v.claimed_memory_bytes, want)


def cores_message(n: NodeState, free: int, want: int) -> str:
    v = n.view
    cpus = v.cpus or 0
    reserved = cpus - free
    if not reserved:
        return f"has {plural(cpus, 'CPU core')}, none reserved, needs {want}"
    real, planned = v.claimed_cores, reserved - v.claimed_cores
    return (
        f"has {plural(max(free, 0), 'CPU core')} unreserved "
        f"({cpus} less {reserved} reserved{split(str(real), str(planned), real, planned)}), "
        f"needs {want}"
    )


def engine_list(n: NodeState) -> str:
    """Each engine once: "llama.cpp@b11434", not also the bare name the
    snapshot adds beside it; a bare name only when no version is known."""
    names: list[str] = []
    for name, versions in sorted(n.engine_versions.items()):
        known = sorted(v for v in versions if v is not None)
        if known:
            names.extend(f"{name}@{v}" for v in known)
        else:
            names.append(name)
    return ", ".join(names)


def split(real: str, planned: str, real_n: int, planned_n: int) -> str:
    """What of a node's claims its shards hold and what a dry run's earlier
    decisions took; "" when the dry run took nothing here."""
    if not planned_n:
        return ""
    if not real_n:
        return f" {DRY_RUN}"
    return f": {real} already, {planned} {DRY_RUN}"


@lru_cache(maxsize=4096)
def memory_text(total: int, free_mem: int, real: int, want: int) -> str:
    claimed = total - free_mem
    free, needs = sizes(max(free_mem, 0), want)
    if not claimed:
        return f"has {free} of memory, none of it claimed, needs {needs}"
    planned = claimed - real
    of, less = sizes(total, claimed)
    return (
        f"has {free} of memory unclaimed ({of} less {less} claimed"
        f"{split(*sizes(real, planned), real, planned)}), needs {needs}"
    )
