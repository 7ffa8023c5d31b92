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

import msgspec

from . import __version__
from .certificate import CertificateError
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
from .protocol.messages import Answer, Desired, Heartbeat, Registration
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


class Agent:
    """One agent's life: register, then heartbeat and converge on each answer."""

    def __init__(
        self,
        config: AgentConfig,
        client: AgentClient,
        roots: Roots,
        stop: threading.Event,
        engines: EngineManager,
        shards: ShardSupervisor,
        desired_engines: Sequence[Mapping[str, Any]],
        once: bool,
    ) -> None:
        self.config, self.client, self.roots, self.stop = config, client, roots, stop
        self.engines, self.shards, self.once = engines, shards, once
        # The last answer's wishes; kept through an outage, so shards keep running meanwhile.
        # Shards: None until an answer says: the engines an earlier agent left run on until
        # then.
        self.desired_engines: list[Any] = list(desired_engines)
        self.desired_shards: list[Any] | None = None
        # The digest the answer gave with the desired state taken last, sent back with each
        # heartbeat so the answer carries `desired` only when it changed. None until one is
        # taken (a restarted agent gets it in full).
        self.desired_digest: str | None = None
        # Never longer than RETRY_CAP_S, whatever the interval: after an outage the agent is
        # back within 15 s of the control plane, and only sends its state as it is then.
        self.backoff = Backoff(cap=min(RETRY_CAP_S, max(config.heartbeat_interval_s * 6, 1.0)))

    def reload_credential(self) -> None:
        # An operator who re-joins the node rewrites the file; pick it up without a restart.
        self.client.credential = (
            read_credential(self.config.credential_file) or self.client.credential
        )

    def send(
        self,
        fn: Callable[[Any], dict[str, Any]],
        build: Callable[[], msgspec.Struct],
        what: str,
    ) -> Answer | None:
        def checked() -> msgspec.Struct:
            try:
                return build()
            except msgspec.ValidationError as exc:
                # What the control plane would refuse with a 400: say so, send nothing.
                raise RejectedError(0, f"not sent: {exc}") from None

        answer = send_latest(
            fn,
            checked,
            backoff=self.backoff,
            stop=self.stop,
            on_auth_error=self.reload_credential,
            max_attempts=1 if self.once else None,
            what=what,
        )
        if answer is None:
            return None
        try:
            return msgspec.convert(answer, Answer)
        except msgspec.ValidationError as exc:
            log.warning("ignoring the %s answer: %s", what, exc)
            return Answer(node=self.config.node, state="")

    def converge(self) -> dict[str, Any]:
        # A shard waits for its engine in the installer's own words, so both see one report.
        report = self.engines.heartbeat(self.desired_engines)
        self.shards.converge(self.desired_shards, report["engines"])
        return report

    def heartbeat(self) -> Heartbeat:
        # The manager's report is read under its lock; an install never delays a heartbeat.
        report = self.converge()
        return collect_heartbeat(
            self.config, self.roots, report, self.shards.report(), self.desired_digest
        )

    def registration(self) -> Registration:
        # Only a running stream answers commands.
        extra = () if self.once else stream_features()
        return collect_registration(self.config, self.roots, extra)

    def take_desired(self, desired: Desired) -> None:
        if desired.engines is not None:
            good = []
            for raw in desired.engines:
                try:
                    good.append(EngineSpec.parse(raw))
                except (SpecError, AttributeError) as exc:
                    log.warning("ignoring a desired engine: %s", exc)
            self.desired_engines = good
        if desired.shards is not None:
            self.desired_shards = list(desired.shards)
        self.converge()

    def live(self) -> int:
        """Register, then heartbeat until stopped (or once); the exit status."""
        if not self.once:
            # Opened, and reopened, to whichever URL the heartbeats last reached.
            client = self.client
            commands = Stream(
                lambda: client.server_url,
                lambda: client.credential,
                self.roots,
                self.stop,
                identity=client.stream_identity,
            )
            threading.Thread(target=commands.run_forever, name="stream", daemon=True).start()
        registered = self.send(self.client.register, self.registration, "register")
        while not self.stop.is_set():
            started = time.monotonic()
            answer = self.send(self.client.heartbeat, self.heartbeat, "heartbeat")
            # No desired: unchanged since our digest, or an older control plane that sends
            # none. Either way, keep converging on what we had.
            if answer is not None and answer.desired is not None and not self.once:
                self.take_desired(answer.desired)
                self.desired_digest = answer.desired_digest
            if answer is not None and answer.register:
                log.info("control plane asked for registration again")
                registered = self.send(self.client.register, self.registration, "register")
            if self.once:
                return 0 if registered is not None and answer is not None else 1
            elapsed = time.monotonic() - started
            self.stop.wait(max(0.0, self.config.heartbeat_interval_s - elapsed))
        return 0


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
    own_client = client is None
    try:
        client = client or AgentClient(
            config.urls,
            ca_file=config.ca_file,
            cert_file=config.cert_file,
            key_file=config.key_file,
        )
    except CertificateError as exc:
        log.error("%s", exc)
        return 2
    agent = Agent(config, client, roots, stop, engines, shards, desired_engines, once)
    try:
        # A node with a certificate is that certificate; a credential is joined for.
        if config.cert_file is None and not ensure_credential(config, client, stop, once):
            return 2
        return agent.live()
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
    json.dump(msgspec.to_builtins(out), sys.stdout, indent=2)
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

        return print_report(roots_for(config), config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: _stop_soon(stop))
    return run(config, once=args.once, stop=stop)


def _stop_soon(stop: threading.Event) -> None:
    # A signal handler runs on the main thread between two bytecodes, possibly while that
    # thread holds the event's own lock (inside stop.wait()); Event.set() there would wait
    # on that lock forever, and the agent would never reach the engines it must stop. A
    # thread of its own sets it once the main thread lets go.
    threading.Thread(target=stop.set, name="stop", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
