"""Which tests start a server or a subprocess: the `server` marker.

`make check` runs `pytest -m "not server"`, the tier a developer runs in a
few minutes; `make test` runs everything. A test is marked `server` when
its own code, the functions of its file it calls, the tests.* helpers it
imports (and so on), or any fixture it uses (pytest's closure of them,
conftest ones included) name one of the ways this suite starts a process
or a listening socket (STARTS); when EXPLICIT names it; or when it carries
the `server`, `ofed` or `llama_server` marker. HEAVY tests start nothing
but are marked too: each takes tens of seconds, which the fast tier has not.

So that a test which starts one without being marked is not silently run
in the fast tier, `make check` sets LLMGW_NO_SERVERS=1 and `guard()` makes
every new process and every listening socket in it an error naming the
test and where to mark it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The ways a test here starts a process or a server, by name. Fixtures that
# start one (asgi_server, tls_server, ...) are found through their own code.
STARTS = re.compile(
    r"\bsubprocess\b|\bPopen\b|create_subprocess|\bos\.fork\b|multiprocessing"
    r"|uvicorn|LiveServer|HTTPServer|serve_forever|start_server|\.listen\("
    r"|chromium|playwright|ibsim"
    # The agent's GPU collector runs the node's IMEX command unless handed a runner.
    r"|collect_inventory"
)
# Tests that start one in code the scan does not read (the agent's engine
# manager, doctor and collectors run the node's commands; the simulator's
# engine listens on a port): a file, or a test and its parameters.
EXPLICIT = (
    "tests/agent/test_agent_host.py::test_heartbeat_part_runs_on_the_recorded_host",
    "tests/agent/test_engine_pin.py",
    "tests/agent/test_engines_manager.py::test_configured_engines_are_checked_by_running_them",
    "tests/agent/test_sm.py::test_install_goes_through_the_command_wrapper",
    "tests/simulator/test_engine.py::test_a_bad_request_is_refused_naming_what_is_wrong",
    "tests/simulator/test_engine.py::test_a_port_already_taken_is_refused_naming_the_option",
    "tests/simulator/test_engine.py::test_every_answer_says_it_is_simulated_and_no_model_ran",
    "tests/simulator/test_engine.py::test_the_endpoint_answers_what_the_agent_and_the_gateway_ask",
)
# Tests that start nothing but take tens of seconds each: hypothesis runs of
# hundreds to thousands of examples, through the database or the whole agent
# API. Together they were a third of the fast tier's time on two cores, so
# `make test` runs them and `make check` leaves them out, as it does servers.
HEAVY = (
    # 150 hostile payloads through the real agent API, each page read after.
    "tests/security/test_fuzz.py::test_hostile_agent_payloads_never_answer_5xx_nor_store_what_is_refused",
    # 1,500 bodies, each decoded both ways.
    "tests/inventory/test_agent_fast.py::test_the_fast_path_agrees_with_the_checked_path",
    # 400 fleets, each placed and checked against a full scan.
    "tests/placement/test_properties.py::test_multi_node_replicas_keep_the_hard_constraints",
)
# Markers that say a test runs a real tool, and plugins' fixtures that start
# a server (pytest-django's autouse helpers name live_server without
# starting it, so plugins go by name).
MARKERS = ("server", "ofed", "llama_server")
PLUGIN_FIXTURES = {"live_server"}


@functools.cache
def _parsed(path: Path) -> tuple[str, dict[str, str], dict[str, tuple[str, str | None]]]:
    """A file's text, its top-level definitions' source, and what it imports from tests."""
    text = path.read_text() if path.is_file() else ""
    tree = ast.parse(text) if text else ast.Module(body=[], type_ignores=[])
    defs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = ast.get_source_segment(text, node) or ""
    imports: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module or "", alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tests."):
                    imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
    return text, defs, imports


def _file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for file in (base.with_suffix(".py"), base / "__init__.py"):
        if file.is_file():
            return file
    return None


def _starts(path: Path, name: str, seen: set[tuple[Path, str]]) -> bool:
    """Whether `name` in `path` (a function or class) names a way to start
    one, itself or through the definitions and tests.* imports it uses."""
    if (path, name) in seen:
        return False
    seen.add((path, name))
    text, defs, imports = _parsed(path)
    if name in imports:
        module, attr = imports[name]
        submodule = _file(f"{module}.{attr}") if attr else _file(module)
        if submodule == Path(__file__).resolve():  # this guard names them all
            return False
        if submodule is not None:  # a whole module: any use of it counts
            return bool(STARTS.search(submodule.read_text()))
        file = _file(module)
        return file is not None and attr is not None and _starts(file, attr, seen)
    source = defs.get(name)
    if source is None:
        return False
    if STARTS.search(source):
        return True
    used = set(re.findall(r"\b\w+\b", source)) - {name}
    return any(_starts(path, other, seen) for other in used if other in defs or other in imports)


@functools.cache
def _fixture_starts(name: str, func: Any) -> bool:
    try:
        file = Path(inspect.getfile(func)).resolve()
    except (OSError, TypeError):
        return False
    if not file.is_relative_to(ROOT / "tests"):
        return name in PLUGIN_FIXTURES
    return _starts(file, func.__name__, set())


def starts_server(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(m) for m in MARKERS):
        return True
    test_id = item.nodeid.split("[")[0]
    if any(test_id == e or test_id.startswith(e + "::") for e in (*EXPLICIT, *HEAVY)):
        return True
    cls = getattr(item, "cls", None)
    test = cls.__name__ if cls else getattr(item, "originalname", item.name)
    if _starts(Path(str(item.path)), test, set()):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in info.name2fixturedefs.get(name, ()) if info else ():
            if _fixture_starts(name, fixturedef.func):
                return True
    return False


def shared_server(item: pytest.Item) -> str | None:
    """The server `item` shares with other tests, if any: a fixture scoped
    wider than one test that starts one, named with where it is defined
    (a module-scoped one's module, a session one's conftest)."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        fixturedefs = info.name2fixturedefs.get(name, ()) if info else ()
        if not fixturedefs:
            continue
        used = fixturedefs[-1]  # the closest definition, which the test gets
        if used.scope == "function" or name in PLUGIN_FIXTURES:
            continue  # live_server is a thread of this process: cheap to start on each worker
        if not _fixture_starts(name, used.func):
            continue
        where = item.nodeid.split("::")[0] if used.scope in ("module", "class") else used.baseid
        return f"{name}:{where}"
    return None


def mark(items: list[pytest.Item]) -> None:
    """The `server` marker; and under pytest-xdist's --dist loadgroup, one
    group (so one worker) for the tests that share a server: spread over
    the workers, each would start it again (the reliability layout takes
    minutes to settle)."""
    for item in items:
        if starts_server(item) and not item.get_closest_marker("server"):
            item.add_marker(pytest.mark.server)
        if (group := shared_server(item)) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
            if item.config.getoption("loadgroup", False):
                _name_the_group(item, group)


def _name_the_group(item: pytest.Item, group: str) -> None:
    """What pytest-xdist 3.8 does for --dist loadgroup after this hook: the
    scheduler reads a test's group from its node id, `id@group`. xdist sets
    `_nodeid`, which pytest 9 no longer reads (the id is `_id`), so every
    group would silently be spread over the workers; done here for both."""
    grouped = f"{item.nodeid}@{group}"
    item._nodeid = grouped  # type: ignore[attr-defined]  # pytest 8
    if hasattr(item, "_id"):  # pytest 9
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(grouped)


class StartedInFastTier(AssertionError):
    pass


def guard(item: pytest.Item, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the fast tier, a new process or a listening socket fails the test."""

    def refuse(what: str) -> None:
        raise StartedInFastTier(
            f"{item.nodeid} {what} but is not marked server: add its way of starting it "
            "to tests/tiers.py STARTS, or `pytestmark = pytest.mark.server` to its file"
        )

    def execute_child(*args: Any, **kwargs: Any) -> None:
        refuse("starts a subprocess")

    def listen(*args: Any, **kwargs: Any) -> None:
        refuse("listens on a socket")

    def fork(*args: Any, **kwargs: Any) -> int:
        refuse("forks")
        return -1

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
    monkeypatch.setattr(socket.socket, "listen", listen)
    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(os, "posix_spawn", fork)
    monkeypatch.setattr(os, "posix_spawnp", fork)
