"""The rule table's shape: a rule added to it is honoured by the fast fit
and explained by explain, and the index keeps apart the profiles it tells
apart, with no other file changed; and the placement package imports no
circle of its own modules."""

from __future__ import annotations

import grimp

from llmgw.placement.node_state import NodeState, Refusal
from llmgw.placement.rules import RULES, Gpus, Rule
from llmgw.placement.scheduler import Inventory, headroom, place
from llmgw.placement.types import Code, NodeView, Profile
from llmgw.placement.verdicts import registered, static_key

from .helpers import gpu_node

ODD = Code("odd_node", "an odd-numbered node")
PICKY = Code("picky", "not labelled for picky profiles")


class OddNodes(Rule):
    """A rule applying decisions could change: judged node by node."""

    code = ODD
    static = False
    node_fields = ("name",)

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        if int(n.view.name.removeprefix("n")) % 2:
            return self.code, f"{n.view.name} has an odd number"
        return None


class Picky(Rule):
    """A static rule reading a profile field no other rule reads."""

    code = PICKY
    profile_fields = ("name",)
    node_fields = ("labels",)

    def refusal(self, n: NodeState, p: Profile, gpus: Gpus | None) -> Refusal | None:
        if p.name == "picky" and n.view.labels.get("toy") != "yes":
            return self.code, f"{n.view.name} is not labelled toy=yes"
        return None


def fleet() -> list[NodeView]:
    # n1 has the fewest free GPUs: best fit takes it unless a rule says no.
    return [
        gpu_node("n0", 8),
        gpu_node("n1", 8, allocated=(0, 1, 2, 3, 4, 5)),
        gpu_node("n2", 8, labels={"toy": "yes"}),
    ]


def gpu(name: str = "p", gpus: int = 2) -> Profile:
    return Profile(name=name, gpu_class="H100", gpus_per_shard=gpus)


def test_a_dynamic_rule_added_to_the_table_refuses_in_the_fast_fit_and_in_explain() -> None:
    assert place("m", [gpu()], fleet()).decision.nodes == ("n1",)
    with registered(OddNodes()):
        result = place("m", [gpu()], fleet())
        assert result.decision is not None
        assert result.decision.nodes == ("n0",)
        refused = {r.node: r for r in result.explanation.rejections}
        assert refused["n1"].reason_code == "odd_node"
        assert refused["n1"].message == "n1 has an odd number"
        assert f"{ODD.summary} (1 node, odd_node):" in result.explanation.render()
        # The dry run honours it too: four shards of two on n0, four on n2.
        assert headroom("m", [gpu()], fleet()) == {"p": 8}
    assert RULES[-1].code != ODD
    assert headroom("m", [gpu()], fleet()) == {"p": 9}


def test_a_static_rule_keys_the_index_by_the_profile_fields_it_reads() -> None:
    picky, easy = gpu("picky"), gpu("easy")
    assert static_key(picky) == static_key(easy)
    with registered(Picky()):
        assert static_key(picky) != static_key(easy)
        inv = Inventory(fleet())
        placed = inv.place("m", [picky])
        assert placed.decision is not None and placed.decision.nodes == ("n2",)
        reasons = {r.node: r.reason_code for r in placed.explanation.rejections}
        assert reasons == {"n0": "picky", "n1": "picky"}
        # The same inventory, the other kind: its own index, n1 best fit.
        other = inv.place("m", [easy]).decision
        assert other is not None and other.nodes == ("n1",)


def test_the_placement_package_imports_no_circle_of_its_own_modules() -> None:
    graph = grimp.build_graph("llmgw")
    modules = sorted(m for m in graph.modules if m.startswith("llmgw.placement."))
    circles = []
    for a in modules:
        for b in graph.find_modules_directly_imported_by(a):
            if b.startswith("llmgw.placement.") and a in graph.find_upstream_modules(b):
                circles.append((a, b))
    assert circles == []
