"""agent.yaml: loaded strictly, so a misspelt key is an error naming it, not a silent default."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from .collectors import REGISTRY


class ConfigError(Exception):
    """A bad agent.yaml; the message names the file, the line and the key."""


@dataclass(frozen=True)
class Fabric:
    name: str
    adapters: tuple[str, ...]
    rate_gbps: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "adapters": list(self.adapters), "rate_gbps": self.rate_gbps}


@dataclass(frozen=True)
class ConfiguredEngine:
    """An engine the operator installed and names on purpose (vLLM, SGLang): checked, not installed."""

    name: str
    path: Path


@dataclass(frozen=True)
class AgentConfig:
    server_url: str
    node: str
    credential_file: Path
    join_token: str | None = None
    join_token_file: Path | None = None
    ca_file: Path | None = None
    # mTLS: the node's certificate and key (`llmgw node add NAME --cert`), used
    # instead of a credential and renewed by the agent before they expire.
    cert_file: Path | None = None
    key_file: Path | None = None
    model_dirs: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    # A float only so tests can run the loop faster than agent.yaml allows.
    heartbeat_interval_s: float = 10
    collectors: dict[str, bool] = field(default_factory=dict)
    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    rootfs: Path = Path("/")
    command_wrapper: tuple[str, ...] = ()
    fabrics: tuple[Fabric, ...] = ()
    # Where the agent installs engines (llama.cpp builds), one folder per build.
    engines_dir: Path = Path("/var/lib/llmgw-agent/engines")
    engines: tuple[ConfiguredEngine, ...] = ()
    # The most an engine's archive may unpack to (and be downloaded as): a few kilobytes
    # of gzip can unpack to terabytes. A llama.cpp release is well under 1 GiB.
    engines_max_unpacked_gib: float = 4
    # Engines outlive the agent (an upgrade or restart must not take models down); true
    # stops them when the agent stops.
    stop_engines_on_exit: bool = False
    # Where shards' engines listen, and the address put in their URLs for the gateway
    # (None: serve_host, or the node's primary address when serve_host is a wildcard).
    serve_host: str = "127.0.0.1"
    advertise_host: str | None = None
    # The web processes to try in order, when agent.yaml lists them (server_urls);
    # server_url is then the first. Read `urls`, which covers both forms.
    server_urls: tuple[str, ...] = ()

    @property
    def urls(self) -> tuple[str, ...]:
        return self.server_urls or (self.server_url,)

    def enabled(self, name: str) -> bool:
        return self.collectors.get(name, True)

    def read_join_token(self) -> str | None:
        if self.join_token is not None:
            return self.join_token
        if self.join_token_file is not None:
            return self.join_token_file.read_text(encoding="utf-8").strip() or None
        return None


TOP_KEYS = {
    "server_url", "node", "credential_file", "join_token", "join_token_file", "ca_file",
    "model_dirs", "labels", "heartbeat_interval_s", "collectors", "proc_root", "sys_root",
    "rootfs", "command_wrapper", "fabrics", "engines_dir", "engines", "serve_host",
    "stop_engines_on_exit",
    "advertise_host", "engines_max_unpacked_gib", "server_urls", "cert_file", "key_file",
}  # fmt: skip
DEFAULT_CREDENTIAL_FILE = "/var/lib/llmgw-agent/credential"
FABRIC_KEYS = {"name", "adapters", "rate_gbps"}
ENGINE_KEYS = {"path"}


class _Checker:
    """Type checks that report `file:line: key: message` using the YAML node marks."""

    def __init__(self, source: str, lines: dict[str, int]) -> None:
        self.source, self.lines = source, lines

    def fail(self, key: str, message: str) -> ConfigError:
        line = self.lines.get(key)
        where = f"{self.source}:{line}" if line else self.source
        return ConfigError(f"{where}: {key}: {message}")

    def string(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        return value

    def number(self, key: str, value: object) -> float:
        # bool is an int to Python; `true` as an interval is a mistake, not 1 second.
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.fail(key, f"must be a positive number, got {value!r}")
        return value  # kept as written: 10 stays 10 on the wire

    def interval(self, value: object) -> int:
        # Whole seconds, 1 to 3600: the range the control plane accepts at registration.
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3600:
            raise self.fail("heartbeat_interval_s", f"must be whole seconds, 1-3600, got {value!r}")
        return value

    def strings(self, key: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list of strings, got {value!r}")
        return tuple(self.string(f"{key}[{i}]", v) for i, v in enumerate(value))

    def url(self, key: str, value: object) -> str:
        raw = self.string(key, value)
        if not raw.startswith(("https://", "http://")):
            raise self.fail(key, f"must start with https:// or http://, got {raw!r}")
        try:
            parts = urlsplit(raw)
            parts.port  # noqa: B018 - reading it checks it: "host:abc" has no port
        except ValueError as exc:
            raise self.fail(key, f"not a URL ({exc}): {raw!r}") from None
        if not parts.hostname:
            raise self.fail(key, f"must name a host, got {raw!r}")
        return raw.rstrip("/")

    def mapping(self, key: str, value: object) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, got {value!r}")
        return value

    def path(self, key: str, value: object, base: Path) -> Path:
        # Relative paths are taken from the config file's directory, not the unit's cwd.
        return base / self.string(key, value)


def _mark_lines(node: yaml.Node, prefix: str, out: dict[str, int], source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                # PyYAML quietly keeps the last of two equal keys; the first is then a lie.
                raise ConfigError(f"{source}:{line}: {key}: given twice")
            seen.add(key)
            out[key] = line
            _mark_lines(value_node, key, out, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = f"{prefix}[{i}]"
            out[key] = item.start_mark.line + 1
            _mark_lines(item, key, out, source)


def _fabric(c: _Checker, key: str, raw: object) -> Fabric:
    item = c.mapping(key, raw)
    for k in item:
        if k not in FABRIC_KEYS:
            raise c.fail(f"{key}.{k}", "unknown key")
    if "name" not in item:
        raise c.fail(key, "name is required")
    rate = item.get("rate_gbps")
    return Fabric(
        name=c.string(f"{key}.name", item["name"]),
        adapters=c.strings(f"{key}.adapters", item.get("adapters", [])),
        rate_gbps=None if rate is None else c.number(f"{key}.rate_gbps", rate),
    )


def _engines(c: _Checker, raw: object) -> tuple[ConfiguredEngine, ...]:
    out = []
    for name, item in c.mapping("engines", raw).items():
        spec = c.mapping(f"engines.{name}", item)
        for k in spec:
            if k not in ENGINE_KEYS:
                raise c.fail(f"engines.{name}.{k}", "unknown key")
        if "path" not in spec:
            raise c.fail(f"engines.{name}", "path is required")
        path = c.string(f"engines.{name}.path", spec["path"])
        if not path.startswith("/"):
            raise c.fail(f"engines.{name}.path", f"must be an absolute path, got {path!r}")
        out.append(ConfiguredEngine(str(name), Path(path)))
    return tuple(out)


def _server_urls(c: _Checker, data: dict[str, object]) -> tuple[str, ...]:
    if "server_urls" not in data:
        if "server_url" not in data:
            raise ConfigError(f"{c.source}: server_url: required (or server_urls, a list)")
        return (c.url("server_url", data["server_url"]),)
    if "server_url" in data:
        raise c.fail("server_urls", "give server_url or server_urls, not both")
    raw = data["server_urls"]
    if not isinstance(raw, list):
        raise c.fail("server_urls", f"must be a list of URLs, got {raw!r}")
    if not raw:
        raise c.fail("server_urls", "must list at least one URL")
    urls: list[str] = []
    for i, value in enumerate(raw):
        key = f"server_urls[{i}]"
        url = c.url(key, value)
        # One scheme for all: the credential goes to every one of them, and a plain
        # http:// among https:// URLs would send it in the clear during a failover.
        scheme = urlsplit(urls[0] if urls else url).scheme
        if urlsplit(url).scheme != scheme:
            raise c.fail(key, f"must use {scheme}:// like server_urls[0], got {url!r}")
        if url in urls:
            raise c.fail(key, f"{url!r} given twice")
        urls.append(url)
    return tuple(urls)


def _check_certificate(c: _Checker, data: dict[str, object], urls: tuple[str, ...]) -> None:
    """A node proves itself with a credential (credential_file) or a certificate
    (cert_file and key_file, over https); one of the two is required."""
    if ("cert_file" in data) != ("key_file" in data):
        given, missing = (
            ("cert_file", "key_file") if "cert_file" in data else ("key_file", "cert_file")
        )
        raise c.fail(given, f"needs {missing} too: a certificate is used with its key")
    if "cert_file" not in data:
        if "credential_file" not in data:
            raise ConfigError(f"{c.source}: credential_file: required (or cert_file and key_file)")
        return
    if urlsplit(urls[0]).scheme != "https":
        raise c.fail("cert_file", f"a client certificate needs an https:// server, got {urls[0]!r}")


def parse_config(text: str, source: str = "agent.yaml", base: Path | None = None) -> AgentConfig:
    base = base if base is not None else Path.cwd()
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _mark_lines(root, "", lines, source)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    c = _Checker(source, lines)
    data = c.mapping("(top level)", raw if raw is not None else {})
    for key in data:
        if key not in TOP_KEYS:
            raise c.fail(str(key), "unknown key")
    server_urls = _server_urls(c, data)
    _check_certificate(c, data, server_urls)

    labels = {
        str(k): c.string(f"labels.{k}", v)
        for k, v in c.mapping("labels", data.get("labels", {})).items()
    }
    collectors: dict[str, bool] = {}
    for name, on in c.mapping("collectors", data.get("collectors", {})).items():
        if name not in REGISTRY:
            raise c.fail(f"collectors.{name}", f"unknown collector; known: {sorted(REGISTRY)}")
        if not isinstance(on, bool):
            raise c.fail(f"collectors.{name}", f"must be true or false, got {on!r}")
        collectors[str(name)] = on
    model_dirs = c.strings("model_dirs", data.get("model_dirs", []))
    for i, d in enumerate(model_dirs):
        if not d.startswith("/"):
            raise c.fail(f"model_dirs[{i}]", f"must be an absolute path, got {d!r}")
    fabrics_raw = data.get("fabrics", [])
    if not isinstance(fabrics_raw, list):
        raise c.fail("fabrics", "must be a list")
    stop_engines = data.get("stop_engines_on_exit", False)
    if not isinstance(stop_engines, bool):
        raise c.fail("stop_engines_on_exit", f"must be true or false, got {stop_engines!r}")

    def opt_path(key: str) -> Path | None:
        return c.path(key, data[key], base) if data.get(key) is not None else None

    return AgentConfig(
        server_url=server_urls[0],
        server_urls=server_urls if "server_urls" in data else (),
        node=c.string("node", data["node"])
        if "node" in data
        else socket.gethostname().split(".")[0],
        credential_file=c.path(
            "credential_file", data.get("credential_file", DEFAULT_CREDENTIAL_FILE), base
        ),
        join_token=c.string("join_token", data["join_token"]) if "join_token" in data else None,
        join_token_file=opt_path("join_token_file"),
        ca_file=opt_path("ca_file"),
        cert_file=opt_path("cert_file"),
        key_file=opt_path("key_file"),
        model_dirs=model_dirs,
        labels=labels,
        heartbeat_interval_s=c.interval(data.get("heartbeat_interval_s", 10)),
        collectors=collectors,
        proc_root=c.path("proc_root", data.get("proc_root", "/proc"), base),
        sys_root=c.path("sys_root", data.get("sys_root", "/sys"), base),
        rootfs=c.path("rootfs", data.get("rootfs", "/"), base),
        command_wrapper=c.strings("command_wrapper", data.get("command_wrapper", [])),
        fabrics=tuple(_fabric(c, f"fabrics[{i}]", f) for i, f in enumerate(fabrics_raw)),
        engines_dir=c.path(
            "engines_dir", data.get("engines_dir", "/var/lib/llmgw-agent/engines"), base
        ),
        engines=_engines(c, data.get("engines", {})),
        engines_max_unpacked_gib=c.number(
            "engines_max_unpacked_gib", data.get("engines_max_unpacked_gib", 4)
        ),
        serve_host=c.string("serve_host", data.get("serve_host", "127.0.0.1")),
        advertise_host=c.string("advertise_host", data["advertise_host"])
        if data.get("advertise_host") is not None
        else None,
        stop_engines_on_exit=stop_engines,
    )


def load_config(path: str | Path) -> AgentConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_config(text, source=str(path), base=path.resolve().parent)
