"""The `llmgw` command.

`llmgw ctl ...` talks to the REST API only (a URL and a token), so it works
from an operator's laptop. The other commands run beside the control plane
and use its database directly.
"""

from __future__ import annotations

import argparse
import os
import sys


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
    import django

    django.setup()


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
    parser = argparse.ArgumentParser(prog="llmgw", description="llmgw control plane")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ctl", help="talk to the REST API (see `llmgw ctl --help`)", add_help=False)
    node = sub.add_parser("node", help="add or revoke a node's identity")
    node_sub = node.add_subparsers(dest="action", required=True)
    node_sub.add_parser("add", help="create a node and print its one-time join token").add_argument(
        "name"
    )
    node_sub.add_parser("revoke", help="revoke a node's credential").add_argument("name")
    catalog = sub.add_parser("catalog", help="load models, profiles and engines")
    catalog_sub = catalog.add_subparsers(dest="action", required=True)
    catalog_sub.add_parser(
        "apply", help="apply server.yaml whole, or refuse it whole"
    ).add_argument("file")
    sub.add_parser(
        "engine",
        help="engine pack BUILD_DIR --version V --out DIR: a release-shaped archive",
        add_help=False,
    )
    fabric = sub.add_parser("fabric", help="InfiniBand fabric tools", add_help=False)
    fabric.add_argument("rest", nargs=argparse.REMAINDER)
    sim = sub.add_parser("simulate", help="run simulated agents against the control plane")
    sim.add_argument("--nodes", type=int, default=12)
    sim.add_argument("--server", default=os.environ.get("LLMGW_URL", "http://127.0.0.1:8000"))
    sim.add_argument("--interval", type=float, default=10.0, help="heartbeat interval in seconds")
    sim.add_argument("--prefix", default="sim")
    sim.add_argument(
        "--nvl72-trays", type=int, default=18, help="GB200 trays of one NVLink domain (0: none)"
    )
    sim.add_argument(
        "--once", action="store_true", help="register and send one heartbeat each, then exit"
    )
    event = sub.add_parser(
        "simulate-event",
        help="change the simulated fleet live: cable-down|cable-short|cable-up NODE DEVICE|all, "
        "tray-out|tray-in NODE, reset",
    )
    event.add_argument(
        "action", choices=["cable-down", "cable-short", "cable-up", "tray-out", "tray-in", "reset"]
    )
    event.add_argument("node", nargs="?", default="")
    event.add_argument("devices", nargs="*")
    doctor = sub.add_parser(
        "doctor", help="on a node: check GPU fabric joining, bandwidth and IMEX"
    )
    doctor.add_argument(
        "--config", help="the agent's agent.yaml, for its /proc, /sys and command wrapper"
    )
    worker = sub.add_parser("worker", help="run the background worker and its schedule")
    worker.add_argument("--concurrency", type=int, default=1)

    if argv[:1] == ["ctl"]:
        from llmgw.cli import ctl

        return ctl.main(argv[1:])
    if argv[:2] == ["engine", "pack"]:
        from llmgw.cli.engine_pack import main as pack_main

        return pack_main(argv[2:])
    if argv[:1] == ["fabric"]:
        from llmgw.fabrics.cli import main as fabric_main

        return fabric_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "catalog":
        _django()
        from llmgw.cli.server import catalog_command

        return catalog_command(args.file)
    if args.command == "node":
        _django()
        from llmgw.cli.server import node_command

        return node_command(args.action, args.name)
    if args.command == "simulate":
        _django()
        from llmgw.cli.simulate import run

        return run(args.server, args.nodes, args.interval, args.prefix, args.once, args.nvl72_trays)
    if args.command == "simulate-event":
        _django()
        from llmgw.cli.simulate import event

        return event(args.action, args.node, args.devices)
    if args.command == "doctor":
        # Runs the agent's own checks on this machine; no control plane needed.
        from llmgw_agent.doctor import print_report
        from llmgw_agent.payload import roots_for

        if args.config:
            from llmgw_agent.config import load_config

            return print_report(roots_for(load_config(args.config)))
        from llmgw_agent.collectors import Roots

        return print_report(Roots())
    if args.command == "worker":
        _django()
        from llmgw.cli.server import worker_command

        return worker_command(args.concurrency)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
