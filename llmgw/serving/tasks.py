import logging

from celery import shared_task

from llmgw.serving import reconciler
from llmgw.shared_cache import shared

log = logging.getLogger("llmgw.reconciler")

# One reconcile asked for at a time. Every shard that changes state asked
# for its own: a hundred replicas starting at 5,000 nodes queued some 150
# reconciles a minute, each reading every replica, and the workers' CPU
# they took starved the heartbeats until hundreds of nodes lapsed.
SOON_KEY = "llmgw:reconcile:soon"
# Changes within this long of the first ride on its reconcile.
SOON_DELAY_S = 1.0
# A request whose task was lost (a worker killed with it) stops holding
# back others after this long; the ten-second tick covers the gap.
SOON_TTL_S = 30


@shared_task(name="llmgw.serving.tasks.reconcile")  # type: ignore[untyped-decorator]  # Celery ships no types
def reconcile() -> dict[str, object]:
    # Cleared before anything is read: a change that commits from here on
    # asks for a reconcile of its own, one that committed before is read.
    try:
        shared().delete(SOON_KEY)
    except Exception:  # Redis away: the tick still reconciles
        log.warning("could not clear the reconcile request; the next tick covers it")
    return reconciler.reconcile_all()


def reconcile_soon() -> None:
    """Reconcile within a second, unless one already asked for has not yet
    started: it will read this change too."""
    try:
        first = shared().add(SOON_KEY, 1, timeout=SOON_TTL_S)
    except Exception:  # Redis away: ask as if no one had
        first = True
    if first:
        reconcile.apply_async(countdown=SOON_DELAY_S)
