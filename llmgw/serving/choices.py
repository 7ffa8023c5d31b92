from llmgw.choices import TextChoices


class ReplicaState(TextChoices):
    PENDING = "pending", "pending"
    STARTING = "starting", "starting"
    LOADING = "loading", "loading"
    READY = "ready", "ready"
    FAILED = "failed", "failed"
    STOPPING = "stopping", "stopping"
    # Its node stopped reporting (NotReady): nothing says the engine still
    # runs, so nothing routes to it and the reconciler replaces it.
    LOST = "lost", "lost"
