"""A node view's power readings read again, and nothing else of it.

Measured power and the cards' power limits change with every heartbeat,
so no trigger logs them (snapshot.FOLLOWED_OTHERWISE): the warm fleet
reads them again on a timer for the nodes in a capped domain. Their
whole views read again and re-indexed cost each process 2.3 s of CPU in
every 10 s beside 5,000 nodes in one capped hall; these columns alone,
and only the nodes whose figures moved given to Inventory.rewatt, a
tenth of that.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from django.db import connection

from llmgw.facility import power as figures
from llmgw.placement.types import NodeView

READINGS = """
SELECT id, gpu_telemetry, sensors FROM inventory_node WHERE id = ANY(%s)
"""


def with_readings(view: NodeView, telemetry: Any, sensors: Any) -> NodeView:
    """The view with the figures a node's readings give (its cards'
    telemetry, its sensors) as snapshot.node_views reads them: the cards'
    power limits, their sum and the measured draw; the same view where
    none moved."""
    limits = figures.gpu_limits(telemetry)
    derived, measured = figures.derived(telemetry), figures.measured(telemetry, sensors)
    gpus = view.gpus
    if any(g.power_limit_w != limits.get(g.index) for g in gpus):
        gpus = tuple(replace(g, power_limit_w=limits.get(g.index)) for g in gpus)
    if gpus is view.gpus and (derived, measured) == (view.derived_w, view.measured_w):
        return view
    return replace(view, gpus=gpus, derived_w=derived, measured_w=measured)


def moved(pks: Collection[int], views: Mapping[int, NodeView]) -> dict[int, NodeView]:
    """These nodes' views (by pk) whose readings moved, as they now read."""
    with connection.cursor() as cursor:
        cursor.execute(READINGS, [list(pks)])
        rows = cursor.fetchall()
    out = {}
    for pk, telemetry, sensors in rows:
        view = views.get(pk)
        if view is not None:
            new = with_readings(view, _json(telemetry), _json(sensors))
            if new is not view:
                out[pk] = new
    return out


def _json(value: Any) -> Any:
    # JSON columns may come back as text from a raw cursor.
    return json.loads(value) if isinstance(value, str) else value
