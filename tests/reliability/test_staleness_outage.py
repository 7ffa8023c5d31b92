"""A control plane that was out itself does not take the fleet's silence
for dead nodes: after PostgreSQL comes back, every node gets its full
grace to be heard again before it is marked NotReady."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from llmgw.inventory import heartbeats, services
from llmgw.inventory.models import Node
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db


def test_nodes_are_not_marked_not_ready_for_the_control_planes_own_outage(
    make_node, agent_client
) -> None:
    for name in ("back-soon", "gone"):
        _, credential = make_node(name)
        agent = agent_client(credential)
        agent.post("register", registration(name))
    t0 = timezone.now()
    for name in ("back-soon", "gone"):
        heartbeats.heartbeat(Node.objects.get(name=name), heartbeat(name), now=t0)
    for s in range(0, 10, 5):  # the staleness check runs every 5 s
        assert services.mark_missed_heartbeats(t0 + timedelta(seconds=s)) == []

    # The database is down for a minute: heartbeats are refused and the
    # staleness check cannot run. It comes back at t0 + 70 s.
    back = t0 + timedelta(seconds=70)
    assert services.mark_missed_heartbeats(back) == [], "marked for the outage"
    heartbeats.heartbeat(
        Node.objects.get(name="back-soon"), heartbeat("back-soon"), now=back + timedelta(seconds=12)
    )
    for s in range(5, 30, 5):
        assert services.mark_missed_heartbeats(back + timedelta(seconds=s)) == []
    # A node still silent a full grace after the return is NotReady.
    assert services.mark_missed_heartbeats(back + timedelta(seconds=31)) == ["gone"]
    assert Node.objects.get(name="back-soon").state == "Ready"
