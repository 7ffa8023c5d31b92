"""`llmgw ctl`: the REST API from a terminal, anywhere.

The URL and token come from LLMGW_URL and LLMGW_TOKEN, else from the
config file (LLMGW_CONFIG, default ~/.config/llmgw/cli.yaml) with `url:`
and `token:`. No Django here: this runs on an operator's laptop. The
commands live by family (ctl_nodes, ctl_models, ctl_fabrics, ctl_keys, ctl_whatif,
ctl_facility), each declaring its own subcommands.
"""

from __future__ import annotations

import argparse
import sys

from llmgw.cli import ctl_fabrics, ctl_facility, ctl_keys, ctl_models, ctl_nodes, ctl_whatif
from llmgw.cli.ctl_client import Api, CtlError, Outcome, config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw ctl", description="llmgw REST API client")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in (ctl_nodes, ctl_models, ctl_fabrics, ctl_keys, ctl_whatif, ctl_facility):
        family.add_parsers(sub)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        url, token = config()
        out = args.func(Api(url, token), args)
        print(out)
    except CtlError as exc:
        print(f"llmgw ctl: {exc}", file=sys.stderr)
        return 1
    return out.status if isinstance(out, Outcome) else 0
