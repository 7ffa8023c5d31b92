import logging

from celery import shared_task

from llmgw.fabrics import sweep

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
