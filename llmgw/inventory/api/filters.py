"""The node list's query: which nodes, which page, which fields.

Filtered and paged in the database, so a fleet of 5,000 nodes answers a
page of them as fast as a fleet of 50. Every parameter is checked and a
bad one is refused by name (400), never ignored: `stat=Ready`, a typo,
would otherwise list every node and look like an answer.

Domains are written LEVEL=VALUE, LEVEL one of llmgw.locations.LEVELS, read from
the node's labels `llmgw.io/<level>` (an operator's label wins over the
agent's, as everywhere), or a bare node name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from llmgw.inventory import readiness
from llmgw.inventory.models import Gpu, Node
from llmgw.locations import LABEL_PREFIX, split_domain
from llmgw.validation import text_problem

STATES = {"ready": "Ready", "notready": "NotReady", "cordoned": "Cordoned"}
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
# Also accepted: DRF's own `format`, which picks the renderer.
FILTERS = ("state", "class", "domain", "search", "format")
PAGING = ("limit", "offset", "fields")
MAX_TEXT = 253


class BadParameter(ValueError):
    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name, self.problem = name, problem


@dataclass
class NodeQuery:
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    states: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    domains: list[tuple[str, str]] = field(default_factory=list)
    search: str = ""
    fields: list[str] | None = None


def whole_number(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadParameter(name, f"a whole number, not {text!r}") from None
    if not low <= value <= high:
        raise BadParameter(name, f"from {low} to {high}, not {value}")
    return value


def _text(name: str, text: str) -> str:
    problem = text_problem(text)
    if problem:
        raise BadParameter(name, problem)
    if len(text) > MAX_TEXT:
        raise BadParameter(name, f"at most {MAX_TEXT} characters")
    return text


def _words(name: str, values: list[str]) -> list[str]:
    """Repeated (?state=a&state=b) or comma-separated (?state=a,b): either."""
    return [w.strip() for v in values for w in _text(name, v).split(",") if w.strip()]


def parse_domain(text: str) -> tuple[str, str]:
    """LEVEL=VALUE as (label key, value); a bare name as ("name", it)."""
    try:
        level, value = split_domain(text)
    except ValueError as exc:
        raise BadParameter("domain", str(exc)) from None
    return ("name", value) if level is None else (LABEL_PREFIX + level, value)


def parse(params: Any, known_fields: list[str], paged: bool = True) -> NodeQuery:
    """The query from a request's GET parameters (a QueryDict)."""
    # `format` is DRF's own (it picks the renderer); not worth naming.
    known = (*FILTERS, *PAGING) if paged else FILTERS
    unknown = sorted(set(params) - set(known))
    if unknown:
        names = ", ".join(k for k in known if k != "format")
        raise BadParameter(unknown[0], f"unknown parameter; known: {names}")
    query = NodeQuery()
    if "limit" in params:
        query.limit = whole_number("limit", params["limit"], 1, MAX_LIMIT)
    if "offset" in params:
        query.offset = whole_number("offset", params["offset"], 0, 2**31 - 1)
    for word in _words("state", params.getlist("state")):
        if word.lower() not in STATES:
            raise BadParameter("state", f"{word!r}: one of " + ", ".join(STATES.values()))
        query.states.append(STATES[word.lower()])
    query.classes = _words("class", params.getlist("class"))
    query.domains = [parse_domain(d) for d in _words("domain", params.getlist("domain"))]
    query.search = _text("search", params.get("search", "")).strip()
    if "fields" in params:
        query.fields = _words("fields", params.getlist("fields"))
        wrong = [f for f in query.fields if f not in known_fields]
        if wrong or not query.fields:
            raise BadParameter(
                "fields", f"{wrong[0] if wrong else '(none)'} is not a field of a node"
            )
    return query


def ready_q(now: datetime) -> Q:
    """Ready as llmgw.inventory.services.is_ready says it, in SQL."""
    return readiness.ready_q(now, readiness.at(now))


def label_value(key: str) -> Coalesce:
    """A label's value as the node shows it: the operator's, else the agent's."""
    return Coalesce(KT(f"operator_labels__{key}"), KT(f"agent_labels__{key}"))


def filtered(nodes: QuerySet[Node], query: NodeQuery, now: datetime) -> QuerySet[Node]:
    if query.states:
        ready, wanted = ready_q(now), Q(pk__in=[])
        for state in query.states:
            if state == "Ready":
                wanted |= ready
            elif state == "NotReady":
                wanted |= ~ready
            else:
                wanted |= Q(cordoned=True)
        nodes = nodes.filter(wanted)
    if query.classes:
        cards = Gpu.objects.filter(node=OuterRef("pk"), gpu_class__in=query.classes)
        nodes = nodes.filter(Exists(cards))
    # One level's values are alternatives (rack=r1 or rack=r2); levels narrow.
    by_key: dict[str, list[str]] = {}
    for key, value in query.domains:
        by_key.setdefault(key, []).append(value)
    for i, (key, values) in enumerate(sorted(by_key.items())):
        if key == "name":
            nodes = nodes.filter(name__in=values)
        else:
            alias = f"domain_{i}"
            nodes = nodes.alias(**{alias: label_value(key)}).filter(**{f"{alias}__in": values})
    if query.search:
        nodes = nodes.filter(name__icontains=query.search)
    return nodes
