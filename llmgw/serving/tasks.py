from celery import shared_task


@shared_task(name="llmgw.serving.tasks.reconcile")
def reconcile() -> dict[str, object]:
    from llmgw.serving import reconciler

    return reconciler.reconcile_all()
