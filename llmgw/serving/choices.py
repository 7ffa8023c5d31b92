from django.db import models


class ReplicaState(models.TextChoices):
    PENDING = "pending", "pending"
    STARTING = "starting", "starting"
    LOADING = "loading", "loading"
    READY = "ready", "ready"
    FAILED = "failed", "failed"
    STOPPING = "stopping", "stopping"
    # Its node stopped reporting (NotReady): nothing says the engine still
    # runs, so nothing routes to it and the reconciler replaces it.
    LOST = "lost", "lost"

    @classmethod
    def colour(cls, value: str) -> str:
        return {
            "pending": "#8a8f98",
            "starting": "#4c8dff",
            "loading": "#4c8dff",
            "ready": "#2e9e5b",
            "failed": "#d64541",
            "stopping": "#e0a526",
            "lost": "#d64541",
        }.get(value, "#8a8f98")
