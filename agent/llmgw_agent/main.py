"""llmgw-agent: join once, register, then heartbeat until stopped."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from . import __version__
from .client import (
    RETRY_CAP_S,
    AgentClient,
    AuthError,
    Backoff,
    RejectedError,
    TransientError,
    read_credential,
    send_latest,
)
from .collectors import Roots
from .config import AgentConfig, ConfigError, load_config
from .engines import EngineManager
from .engines.spec import EngineSpec, SpecError
from .payload import collect_heartbeat, collect_registration, roots_for
from .shards import ShardSupervisor
from .stream import Stream
from .stream import features as stream_features

log = logging.getLogger("llmgw_agent")


def ensure_credential(
    config: AgentConfig, client: AgentClient, stop: threading.Event, once: bool
) -> bool:
    credential = read_credential(config.credential_file)
    if credential is not None:
        client.credential = credential
        return True
    try:
        token = config.read_join_token()
    except OSError as exc:
        log.error("cannot read join_token_file %s: %s", config.join_token_file, exc.strerror)
        return False
    if token is None:
        log.error(
            "no credential in %s and no join_token to get one: run `llmgw node add %s` "
            "on the control plane and put the token in join_token_file",
            config.credential_file,
            config.node,
        )
        return False
    backoff = Backoff()
    while not stop.is_set():
        try:
            client.join(config.node, token, config.credential_file)
            log.info("joined as %s; credential stored in %s", config.node, config.credential_file)
            return True
        except TransientError as exc:
            if once:
                log.error("join failed: %s", exc)
                return False
            delay = backoff.next()
            log.warning("join failed (%s); retrying in %.1f s", exc, delay)
            stop.wait(delay)
        except (AuthError, RejectedError) as exc:
            # A token works once and expires after a day; retrying it cannot help.
            log.error("join refused (%s): the token is used, expired or wrong", exc)
            return False
    return False


def run(
    config: AgentConfig,
    *,
    once: bool = False,
    client: AgentClient | None = None,
    roots: Roots | None = None,
    stop: threading.Event | None = None,
    desired_engines: Sequence[Mapping[str, Any]] = (),
    engines: EngineManager | None = None,
    shards: ShardSupervisor | None = None,
) -> int:
    """The agent's life. Returns the exit status; transient failures never end it.

    `desired_engines` ({name, version, builds}) is what to install until a heartbeat answer
    says otherwise: the answer's `desired` (engines and shards, in full) replaces it, and
    the engine manager and the shard supervisor converge on it in the background.
    """
    stop = stop if stop is not None else threading.Event()
    roots = roots if roots is not None else roots_for(config)
    engines = engines if engines is not None else EngineManager.from_config(config, roots)
    # Start scanning now, so the first heartbeat can already say what is installed.
    engines.converge(desired_engines)
    shards = shards if shards is not None else ShardSupervisor.from_config(config)
    # The last answer's wishes; kept through an outage, so shards keep running meanwhile.
    # Shards: None until an answer says: the engines an earlier agent left run on until then.
    desired: dict[str, list[Any] | None] = {"engines": list(desired_engines), "shards": None}
    own_client = client is None
    client = client or AgentClient(config.urls, ca_file=config.ca_file)
    # Never longer than RETRY_CAP_S, whatever the interval: after an outage the agent is
    # back within 15 s of the control plane, and only sends its state as it is then.
    backoff = Backoff(cap=min(RETRY_CAP_S, max(config.heartbeat_interval_s * 6, 1.0)))

    def reload_credential() -> None:
        # An operator who re-joins the node rewrites the file; pick it up without a restart.
        client.credential = read_credential(config.credential_file) or client.credential

    def send(
        fn: Callable[[dict[str, Any]], dict[str, Any]],
        build: Callable[[], dict[str, Any]],
        what: str,
    ) -> dict[str, Any] | None:
        return send_latest(
            fn,
            build,
            backoff=backoff,
            stop=stop,
            on_auth_error=reload_credential,
            max_attempts=1 if once else None,
            what=what,
        )

    def converge() -> dict[str, Any]:
        # A shard waits for its engine in the installer's own words, so both see one report.
        report = engines.heartbeat(desired["engines"] or [])
        shards.converge(desired["shards"], report["engines"])
        return report

    def heartbeat() -> dict[str, Any]:
        # The manager's report is read under its lock; an install never delays a heartbeat.
        engine_report = converge()
        return {**collect_heartbeat(config, roots), **engine_report, "shards": shards.report()}

    def take_desired(answer: dict[str, Any]) -> None:
        wanted = answer.get("desired")
        if not isinstance(wanted, dict):
            return  # an older control plane: keep converging on what we had
        if isinstance(wanted.get("engines"), list):
            good = []
            for raw in wanted["engines"]:
                try:
                    good.append(EngineSpec.parse(raw))
                except (SpecError, AttributeError) as exc:
                    log.warning("ignoring a desired engine: %s", exc)
            desired["engines"] = good
        if isinstance(wanted.get("shards"), list):
            desired["shards"] = list(wanted["shards"])
        converge()

    try:
        if not ensure_credential(config, client, stop, once):
            return 2
        if not once:
            # Opened, and reopened, to whichever URL the heartbeats last reached.
            commands = Stream(lambda: client.server_url, lambda: client.credential, roots, stop)
            threading.Thread(target=commands.run_forever, name="stream", daemon=True).start()

        def registration() -> dict[str, Any]:
            payload = collect_registration(config, roots)
            if not once:  # only a running stream answers commands
                payload["features"] = [*payload["features"], *stream_features()]
            return payload

        registered = send(client.register, registration, "register")
        while not stop.is_set():
            started = time.monotonic()
            answer = send(client.heartbeat, heartbeat, "heartbeat")
            if answer is not None and not once:
                take_desired(answer)
            if answer is not None and answer.get("register"):
                log.info("control plane asked for registration again")
                registered = send(client.register, registration, "register")
            if once:
                return 0 if registered is not None and answer is not None else 1
            stop.wait(max(0.0, config.heartbeat_interval_s - (time.monotonic() - started)))
        return 0
    finally:
        # Engines outlive the agent (its restart or upgrade must not take models down):
        # the next agent takes them over. Stopped only when agent.yaml asks.
        shards.close(stop_engines=config.stop_engines_on_exit)
        engines.close()
        if own_client:
            client.close()


def print_payloads(config: AgentConfig) -> int:
    roots = roots_for(config)
    out = {
        "register": collect_registration(config, roots),
        "heartbeat": collect_heartbeat(config, roots),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmgw-agent", description=__doc__)
    parser.add_argument("--config", default="/etc/llmgw-agent/agent.yaml")
    parser.add_argument("--once", action="store_true", help="register, heartbeat once, exit")
    parser.add_argument(
        "--print", action="store_true", help="print the payloads; contact no server"
    )
    parser.add_argument(
        "--doctor", action="store_true", help="check GPU fabric and IMEX; say what to do"
    )
    parser.add_argument(
        "--stop-engines",
        action="store_true",
        help="stop the shards' engines when the agent stops (agent.yaml stop_engines_on_exit)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--version", action="version", version=__version__)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO; a heartbeat every 10 s would drown the journal.
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"llmgw-agent: {exc}", file=sys.stderr)
        return 2
    if args.stop_engines:
        config = replace(config, stop_engines_on_exit=True)
    if args.print:
        return print_payloads(config)
    if args.doctor:
        from .doctor import print_report

        return print_report(roots_for(config))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run(config, once=args.once, stop=stop)


if __name__ == "__main__":
    sys.exit(main())
