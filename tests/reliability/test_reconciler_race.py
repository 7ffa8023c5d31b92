"""Two workers reconciling one model at the same moment place what is
missing once, not once each."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from llmgw.catalog import services as catalog
from llmgw.catalog.models import Model
from llmgw.serving import placing, reconciler
from llmgw.serving.models import Replica
from tests.payloads import heartbeat, registration

pytestmark = pytest.mark.django_db(transaction=True)

CATALOG = """
models:
  - name: pair
    source: hf://x/pair
    always_running: 2
    profiles:
      - name: cpu
        memory_gb: 1
        cpu_cores: 1
"""


def test_two_reconcilers_at_once_never_place_a_duplicate(make_node, agent_client) -> None:
    for name in ("cpu-1", "cpu-2", "cpu-3"):
        _, credential = make_node(name)
        agent = agent_client(credential)
        agent.post("register", registration(name))
        agent.post("heartbeat", heartbeat(name))
    catalog.apply_text(CATALOG)
    model = Model.objects.get(name="pair")
    for _ in range(4):
        for replica in Replica.objects.filter(model=model):
            placing.release_replica(replica.pk)
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def work(start: threading.Barrier, errors: list[BaseException]) -> None:
            try:
                start.wait()
                reconciler.reconcile_model(Model.objects.get(pk=model.pk))
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=work, args=(start, errors)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert Replica.objects.filter(model=model).count() == 2
