from celery import shared_task

from llmgw.inventory import commands, services


@shared_task(name="llmgw.inventory.tasks.mark_missed_heartbeats")  # type: ignore[untyped-decorator]  # Celery ships no types
def mark_missed_heartbeats() -> list[str]:
    return services.mark_missed_heartbeats()


@shared_task(name="llmgw.inventory.tasks.expire_commands")  # type: ignore[untyped-decorator]  # Celery ships no types
def expire_commands() -> int:
    return commands.expire()
