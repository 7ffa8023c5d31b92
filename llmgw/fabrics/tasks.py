from celery import shared_task


@shared_task(name="llmgw.fabrics.tasks.sweep_fabric_maps")
def sweep_fabric_maps(fabric_id: int | None = None) -> dict[str, str]:
    from llmgw.fabrics import sweep

    return sweep.sweep(fabric_id)
