"""The `llmgw` command.

`llmgw ctl ...` talks to the REST API only (a URL and a token), so it works
from an operator's laptop. The other commands run beside the control plane
and use its database directly.

Every command is one entry of COMMANDS: its help, its arguments, and the
handler that imports what it needs only once it is chosen, so `llmgw ctl`
on a laptop never loads Django.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    import django

    django.setup()


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    # Given the parsed arguments; with `django`, after Django is set up.
    run: Callable[[argparse.Namespace], int] | None = None
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    django: bool = False
    # A command with a parser of its own gets the words after its name and
    # `prefix` unparsed, `--help` included.
    forward: Callable[[list[str]], int] | None = None
    prefix: tuple[str, ...] = ()


def _ctl(rest: list[str]) -> int:
    from llmgw.cli import ctl

    return ctl.main(rest)


def _engine_pack(rest: list[str]) -> int:
    from llmgw.cli.engine_pack import main as pack_main

    return pack_main(rest)


def _fabric(rest: list[str]) -> int:
    from llmgw.fabrics.cli import main as fabric_main

    return fabric_main(rest)


def _node_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="create a node and print its one-time join token")
    add.add_argument("name")
    add.add_argument(
        "--cert",
        action="store_true",
        help="instead of a join token, write a key and a short-lived certificate for "
        "the agent (mTLS; run where the CA is, after `llmgw ca init`)",
    )
    add.add_argument("--out", help="with --cert: the folder to write to (default: NAME-cert)")
    sub.add_parser(
        "revoke", help="revoke a node's credential and every certificate it holds"
    ).add_argument("name")


def _node(args: argparse.Namespace) -> int:
    if args.action == "add" and args.cert:
        from llmgw.cli.ca import node_cert_command

        return node_cert_command(args.name, args.out)
    from llmgw.cli.server import node_command

    return node_command(args.action, args.name)


def _ca_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("init", help="create the node CA's key and certificate (LLMGW_CA_DIR)")
    server = sub.add_parser(
        "server-cert", help="a key and certificate for the control plane's HTTPS, from the CA"
    )
    server.add_argument("names", nargs="+", help="host names and addresses agents connect to")
    server.add_argument("--out", default=".", help="the folder for server.pem and server.key")
    server.add_argument("--days", type=int, default=365)


def _ca(args: argparse.Namespace) -> int:
    from llmgw.cli import ca

    if args.action == "init":
        return ca.init_command()
    return ca.server_cert_command(args.names, args.out, args.days)


def _catalog_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("apply", help="apply server.yaml whole, or refuse it whole").add_argument("file")


def _catalog(args: argparse.Namespace) -> int:
    from llmgw.cli.server import catalog_command

    return catalog_command(args.file)


def _simulate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--server", default=os.environ.get("LLMGW_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--interval", type=float, default=10.0, help="heartbeat interval in seconds"
    )
    parser.add_argument("--prefix", default="sim")
    parser.add_argument(
        "--nvl72-trays", type=int, default=18, help="GB200 trays of one NVLink domain (0: none)"
    )
    parser.add_argument(
        "--once", action="store_true", help="register and send one heartbeat each, then exit"
    )
    parser.add_argument(
        "--serve-shards",
        action="store_true",
        help="take the nodes' shards to ready and answer them (saying they are simulated) "
        "from one endpoint on --serve-host:--serve-port; without it they stay pending",
    )
    parser.add_argument("--serve-host", default="127.0.0.1", help="where that endpoint listens")
    parser.add_argument("--serve-port", type=int, default=0, help="its port (0: any free one)")


def _simulate(args: argparse.Namespace) -> int:
    from llmgw.cli.simulate import run
    from llmgw.simulator.engine import Endpoint

    if args.serve_port and not 1024 <= args.serve_port <= 65535:
        # The control plane refuses a shard URL with a privileged port.
        raise SystemExit(f"--serve-port: {args.serve_port}, expected 1024-65535 or 0 (any)")
    serve = Endpoint(args.serve_host, args.serve_port) if args.serve_shards else None
    return run(
        args.server,
        args.nodes,
        args.interval,
        args.prefix,
        args.once,
        args.nvl72_trays,
        serve,
        own_process=True,
    )


def _event_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["cable-down", "cable-short", "cable-up", "tray-out", "tray-in", "reset"]
    )
    parser.add_argument("node", nargs="?", default="")
    parser.add_argument("devices", nargs="*")


def _event(args: argparse.Namespace) -> int:
    from llmgw.cli.simulate import event

    return event(args.action, args.node, args.devices)


def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="the agent's agent.yaml: its roots, command wrapper, fabrics, model_dirs, "
        "engines and the control plane to ask (without it, that check says unknown)",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def _doctor(args: argparse.Namespace) -> int:
    # Runs the agent's own checks on this machine; the control plane only answers them.
    from llmgw_agent.doctor import print_report
    from llmgw_agent.payload import roots_for

    if args.config:
        from llmgw_agent.config import ConfigError, load_config

        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(f"llmgw doctor: {exc}", file=sys.stderr)
            return 2
        return print_report(roots_for(config), config, as_json=args.json)
    from llmgw_agent.collectors import Roots

    return print_report(Roots(), as_json=args.json)


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", type=int, default=1)


def _worker(args: argparse.Namespace) -> int:
    from llmgw.cli.server import worker_command

    return worker_command(args.concurrency)


# In the order `llmgw --help` lists them.
COMMANDS = (
    Command("ctl", "talk to the REST API (see `llmgw ctl --help`)", forward=_ctl),
    Command(
        "node",
        "add or revoke a node's identity",
        _node,
        _node_arguments,
        django=True,
    ),
    Command(
        "ca",
        "the node certificate authority: init, server-cert",
        _ca,
        _ca_arguments,
        django=True,
    ),
    Command(
        "catalog",
        "load models, profiles and engines",
        _catalog,
        _catalog_arguments,
        django=True,
    ),
    Command(
        "engine",
        "engine pack BUILD_DIR --version V --out DIR: a release-shaped archive; "
        "engine pack --wheelhouse SERVER_YAML --out DIR: the engines' packages as wheels",
        forward=_engine_pack,
        prefix=("pack",),
    ),
    Command("fabric", "InfiniBand fabric tools", forward=_fabric),
    Command(
        "simulate",
        "run simulated agents against the control plane",
        _simulate,
        _simulate_arguments,
        django=True,
    ),
    Command(
        "simulate-event",
        "change the simulated fleet live: cable-down|cable-short|cable-up NODE DEVICE|all, "
        "tray-out|tray-in NODE, reset",
        _event,
        _event_arguments,
        django=True,
    ),
    Command(
        "doctor",
        "on a node: check IB ports, subnet managers, fabrics, NVLink, IMEX, engines, "
        "room for weights, clock and credential",
        _doctor,
        _doctor_arguments,
    ),
    Command(
        "worker",
        "run the background worker and its schedule",
        _worker,
        _worker_arguments,
        django=True,
    ),
)


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        # Flushed here, not at exit, where a failure is only a traceback.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`llmgw ctl nodes | head -1`): not an error worth a
        # traceback. Point stdout at /dev/null so the interpreter's last
        # flush of what is still buffered does not raise again, and exit as
        # a command killed by SIGPIPE does (128 + 13).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for command in COMMANDS:
        words = [command.name, *command.prefix]
        if command.forward is not None and argv[: len(words)] == words:
            return command.forward(argv[len(words) :])
    parser = argparse.ArgumentParser(prog="llmgw", description="llmgw control plane")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        # A forwarded command's --help is its own parser's.
        each = sub.add_parser(command.name, help=command.help, add_help=command.forward is None)
        if command.arguments is not None:
            command.arguments(each)
    args = parser.parse_args(argv)
    chosen = next(c for c in COMMANDS if c.name == args.command)
    if chosen.run is None:
        # `llmgw engine` without `pack`: nothing to run.
        parser.error(f"unknown command {args.command}")
    if chosen.django:
        _django()
    return chosen.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
