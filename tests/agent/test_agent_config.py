from __future__ import annotations

from pathlib import Path

import pytest
from llmgw_agent.config import ConfigError, load_config, parse_config

EXAMPLE = Path(__file__).parents[2] / "agent" / "agent.example.yaml"
MINIMAL = "server_url: https://cp.example\nnode: n1\ncredential_file: cred\n"


def test_shipped_example_parses() -> None:
    # A published example that has never been loaded is a guess.
    config = load_config(EXAMPLE)
    assert config.node == "gpu-a-01"
    assert config.heartbeat_interval_s == 10
    assert config.command_wrapper == ("sudo", "-n")
    assert config.fabrics[0].name == "ib-a"
    assert config.fabrics[0].adapters == ("mlx5_0", "mlx5_1")
    assert config.fabrics[0].rate_gbps == 400
    assert config.labels == {"llmgw.io/rack": "r12"}


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    config = parse_config(MINIMAL, base=tmp_path)
    assert config.credential_file == tmp_path / "cred"
    assert config.heartbeat_interval_s == 10
    assert config.proc_root == Path("/proc") and config.sys_root == Path("/sys")
    assert config.model_dirs == () and config.fabrics == ()
    assert config.enabled("weights")


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, source="agent.yaml")
    return str(exc.value)


def test_unknown_key_is_named_with_its_line() -> None:
    message = _error(MINIMAL + "modeldirs: [/data]\n")
    assert "agent.yaml:4: modeldirs: unknown key" in message


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("heartbeat_interval_s: ten\n", "heartbeat_interval_s"),
        ("heartbeat_interval_s: true\n", "heartbeat_interval_s"),
        ("heartbeat_interval_s: 0\n", "heartbeat_interval_s"),
        ("heartbeat_interval_s: 2.5\n", "heartbeat_interval_s"),
        ("heartbeat_interval_s: 7200\n", "heartbeat_interval_s"),
        ("model_dirs: /data\n", "model_dirs"),
        ("model_dirs: [data/models]\n", "model_dirs[0]"),
        ("labels: {llmgw.io/rack: 12}\n", "labels.llmgw.io/rack"),
        ("collectors: {gpuz: true}\n", "collectors.gpuz"),
        ("collectors: {cpu: 'no'}\n", "collectors.cpu"),
        ("command_wrapper: sudo -n\n", "command_wrapper"),
        ("fabrics:\n  - name: ib-a\n    speed: 400\n", "fabrics[0].speed"),
        ("fabrics:\n  - adapters: [mlx5_0]\n", "fabrics[0]"),
        ("fabrics:\n  - name: ib-a\n    rate_gbps: fast\n", "fabrics[0].rate_gbps"),
    ],
)
def test_wrong_values_name_the_key(extra: str, key: str) -> None:
    message = _error(MINIMAL + extra)
    assert f": {key}: " in message
    assert "agent.yaml:" in message


def test_missing_required_key() -> None:
    assert "server_url: required" in _error("node: n1\ncredential_file: c\n")


def test_duplicate_key_refused() -> None:
    # PyYAML would silently keep the second; the operator meant one of them.
    assert "agent.yaml:4: node: given twice" in _error(MINIMAL + "node: n2\n")


def test_not_a_mapping_and_bad_yaml() -> None:
    assert "must be a mapping" in _error("- a\n- b\n")
    assert "not valid YAML" in _error("server_url: [\n")


def test_join_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok-123\n")
    config = parse_config(MINIMAL + "join_token_file: token\n", base=tmp_path)
    assert config.read_join_token() == "tok-123"


def test_server_urls_in_order(tmp_path: Path) -> None:
    config = parse_config(
        "server_urls:\n  - https://cp-1.example:8443/\n  - https://cp-2.example:8443\n"
        "node: n1\ncredential_file: cred\n",
        base=tmp_path,
    )
    assert config.urls == ("https://cp-1.example:8443", "https://cp-2.example:8443")
    assert config.server_url == "https://cp-1.example:8443"
    # The one-URL form is unchanged.
    assert parse_config(MINIMAL, base=tmp_path).urls == ("https://cp.example",)


URLS = "node: n1\ncredential_file: cred\n"


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ("server_urls: []\n", "server_urls", "at least one"),
        ("server_urls: https://cp.example\n", "server_urls", "must be a list"),
        ("server_urls: [cp.example:8443]\n", "server_urls[0]", "https:// or http://"),
        ("server_urls: [https://a.example, 8443]\n", "server_urls[1]", "non-empty string"),
        ("server_urls: ['https://']\n", "server_urls[0]", "host"),
        ("server_urls: [https://a.example, http://b.example]\n", "server_urls[1]", "https://"),
        ("server_urls: [https://a.example, https://a.example/]\n", "server_urls[1]", "twice"),
        (
            "server_url: https://a.example\nserver_urls: [https://b.example]\n",
            "server_urls",
            "not both",
        ),
        ("server_url: ftp://a.example\n", "server_url", "https:// or http://"),
    ],
)
def test_server_urls_refused_naming_the_key(text: str, key: str, says: str) -> None:
    message = _error(text + URLS)
    assert "agent.yaml:" in message and f": {key}: " in message, message
    assert says in message, message


def test_neither_server_url_nor_server_urls() -> None:
    message = _error(URLS)
    assert "server_url: required" in message and "server_urls" in message
