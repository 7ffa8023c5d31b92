"""Registration and heartbeat payloads from this machine's collectors
(docs/agent-protocol.md); the builders themselves are the protocol's
(llmgw_agent.protocol.build), shared with the simulator.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from . import __version__
from .collectors import Roots, make_runner, run_collectors
from .config import AgentConfig
from .protocol.build import build_heartbeat, build_registration, features_for
from .protocol.messages import Heartbeat, Registration

log = logging.getLogger("llmgw_agent.payload")


def roots_for(config: AgentConfig) -> Roots:
    return Roots(
        proc=config.proc_root,
        sys=config.sys_root,
        rootfs=config.rootfs,
        run=make_runner(config.command_wrapper),
        model_dirs=config.model_dirs,
        fabrics={f.name: f.adapters for f in config.fabrics},
    )


def collect_registration(
    config: AgentConfig, roots: Roots, extra_features: Sequence[str] = ()
) -> Registration:
    data, results = run_collectors(roots, part="register", enabled=config.collectors)
    for result in results:
        # Registration has no collectors list; the failure would otherwise go unseen.
        if not result["ok"]:
            log.warning("collector %s failed: %s", result["name"], result["error"])
    return build_registration(
        config.node,
        system=data.get("system"),
        gpus=data.get("gpus"),
        labels=config.labels,
        features=[*features_for(config.collectors), *extra_features],
        heartbeat_interval_s=max(1, round(config.heartbeat_interval_s)),
        fabrics=[f.as_dict() for f in config.fabrics],
        parts=data,
        agent_version=__version__,
    )


def collect_heartbeat(
    config: AgentConfig,
    roots: Roots,
    engines: Mapping[str, Any] | None = None,
    shards: Sequence[Mapping[str, Any]] | None = None,
    desired_digest: str | None = None,
) -> Heartbeat:
    data, results = run_collectors(roots, part="heartbeat", enabled=config.collectors)
    return build_heartbeat(
        config.node,
        data=data,
        collectors=results,
        engines=engines,
        shards=shards,
        desired_digest=desired_digest,
    )
