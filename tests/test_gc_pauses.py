"""The collector's settling and watch (llmgw.gc_pauses)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

from llmgw import gc_pauses

# In a fresh process, so the test runner's own collector is left alone:
# a process holding a heap while "requests" allocate objects that live
# through a few others (the last five kept, as concurrent requests keep
# theirs), counted by generation before and after settle().
CHURN = textwrap.dedent(
    """
    import collections, gc, json
    from llmgw import gc_pauses

    kept = [[] for _ in range(100_000)]
    full = [0]
    gc.callbacks.append(
        lambda phase, info: full.__setitem__(0, full[0] + 1)
        if phase == "stop" and info["generation"] == 2 else None
    )

    def requests():
        recent = collections.deque(maxlen=5)
        for _ in range(200):
            recent.append([[] for _ in range(2_000)])

    requests()
    before = full[0]
    gc_pauses.settle()
    full[0] = 0
    requests()
    print(json.dumps({"before": before, "after": full[0],
                      "frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}))
    """
)


def test_settling_keeps_request_churn_out_of_full_collections() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHURN], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout)
    # On CPython's defaults the churn alone set off full collections over
    # the whole heap; settled, it is gone before a young collection.
    assert seen["before"] >= 1, seen
    assert seen["after"] == 0, seen
    assert seen["frozen"] >= 100_000
    assert seen["threshold"][0] == gc_pauses.YOUNG


def test_a_window_with_a_long_collection_is_said() -> None:
    pauses = gc_pauses.Pauses()
    heap: list[list[int]] = [[] for _ in range(300_000)]
    gc.callbacks.append(pauses)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(pauses)
    del heap
    spent = pauses.spent[2]
    assert pauses.counts[2] == 1 and spent > 0
    # As if the window had been ten times that collection.
    line = gc_pauses.report(pauses, spent * 10)
    assert line is not None
    assert "held this process 10.0% of the last" in line
    assert "generation 2: 1 in" in line
    assert line.endswith("(generation 2)")
    # Taken: the next window starts from nothing.
    assert gc_pauses.report(pauses, 60.0) is None


def test_a_quiet_window_says_nothing() -> None:
    pauses = gc_pauses.Pauses()
    gc.callbacks.append(pauses)
    try:
        gc.collect(0)
    finally:
        gc.callbacks.remove(pauses)
    assert pauses.counts[0] == 1
    assert gc_pauses.report(pauses, 60.0) is None
