import logging

from celery import shared_task
from django.db import transaction

from llmgw.fabrics import sweep
from llmgw.inventory.models import AgentCommand

log = logging.getLogger("llmgw.fabrics.sweep")


@shared_task(name="llmgw.fabrics.tasks.sweep_fabric_maps")  # type: ignore[untyped-decorator]  # Celery ships no types
def sweep_fabric_maps(fabric_id: int | None = None) -> dict[str, str]:
    return sweep.sweep(fabric_id)


def sweep_soon(fabric_id: int) -> None:
    """A fabric seen for the first time is mapped now, not at the next sweep."""
    try:
        sweep_fabric_maps.delay(fabric_id)
    except Exception:  # the five-minute sweep maps it anyway
        log.warning("could not queue a sweep of fabric %s", fabric_id, exc_info=True)


@shared_task(name="llmgw.fabrics.tasks.store_fabric_map")  # type: ignore[untyped-decorator]  # Celery ships no types
def store_fabric_map(command_id: int) -> None:
    command = AgentCommand.objects.select_related("node").filter(pk=command_id).first()
    if command is not None:
        sweep.store_result(command)


def map_in_a_worker(command: AgentCommand) -> None:
    """What a node's ibnetdiscover printed is parsed by a worker (a
    commands.on_finish handler). The web process that hears the answer
    also answers heartbeats: parsing a fabric of 32,000 adapters there
    held its interpreter for seconds, while 5,000 agents came back from
    an outage. Queued once the answer is committed; where it cannot be
    queued, parsed here rather than lost until the next sweep."""

    def queue() -> None:
        try:
            store_fabric_map.delay(command.pk)
        except Exception:
            log.warning("could not queue the map of %s; parsing it here", command, exc_info=True)
            sweep.store_result(command)

    transaction.on_commit(queue)
