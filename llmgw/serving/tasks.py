from celery import shared_task

from llmgw.serving import reconciler


@shared_task(name="llmgw.serving.tasks.reconcile")
def reconcile() -> dict[str, object]:
    return reconciler.reconcile_all()
