"""Replicas and their shards: what placement handed out.

A replica's shards hold its claims on nodes: GPU indices (one row each,
unique per node, so the database itself refuses a GPU handed out twice),
and the cores and memory its profile declared. Replicas are released whole
because they fail whole.
"""

from __future__ import annotations

from django.db import models

from llmgw.serving.choices import ReplicaState


class Replica(models.Model):  # type: ignore[misc]  # Django ships no types
    model = models.ForeignKey("catalog.Model", on_delete=models.CASCADE, related_name="replicas")
    profile = models.ForeignKey(
        "catalog.Profile", on_delete=models.PROTECT, related_name="replicas"
    )
    state = models.CharField(
        max_length=16, choices=ReplicaState.choices, default=ReplicaState.PENDING
    )
    # "ib-a", "nvlink:<domain>", or "" for a single node.
    fabric = models.CharField(max_length=128, blank=True, default="")
    env = models.JSONField(default=dict, blank=True)
    # The scheduler's explanation of this placement, kept with the replica:
    # a placement that succeeded still says what it refused.
    explanation = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    state_changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "created_at"]

    def __str__(self) -> str:
        return f"{self.model.name}#{self.pk}"


class Shard(models.Model):  # type: ignore[misc]  # Django ships no types
    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, related_name="shards")
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="shards")
    rank = models.PositiveSmallIntegerField(default=0)
    gpu_indices = models.JSONField(default=list, blank=True)
    adapters = models.JSONField(default=list, blank=True)
    # As the node's agent last reported it (docs/agent-protocol.md, Shards).
    state = models.CharField(
        max_length=16, choices=ReplicaState.choices, default=ReplicaState.PENDING
    )
    url = models.CharField(max_length=512, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True, default="")
    generation = models.PositiveIntegerField(default=1)
    reported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["replica", "rank"]

    @property
    def shard_id(self) -> str:
        return f"r{self.replica_id}-{self.rank}"

    def __str__(self) -> str:
        return f"{self.replica}/{self.rank}@{self.node.name}"


class GpuClaim(models.Model):  # type: ignore[misc]  # Django ships no types
    shard = models.ForeignKey(Shard, on_delete=models.CASCADE, related_name="gpu_claims")
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="gpu_claims")
    index = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_claim_per_gpu")]


class HeldState(models.Model):  # type: ignore[misc]  # Django ships no types
    """The reconciler's memory of a model's load, for under_load's
    hysteresis: scale up once loaded for a while, back once idle for longer."""

    model = models.OneToOneField(
        "catalog.Model", on_delete=models.CASCADE, related_name="held_state"
    )
    loaded_since = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    target = models.PositiveIntegerField(default=0)
    queue_depth = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)


class PlacementRecord(models.Model):  # type: ignore[misc]  # Django ships no types
    """The last placement attempt per model, placed or refused, for explain."""

    model = models.OneToOneField(
        "catalog.Model", on_delete=models.CASCADE, related_name="last_placement"
    )
    at = models.DateTimeField(auto_now=True)
    placed = models.BooleanField()
    # The replica this attempt placed, by number rather than by key: release
    # deletes the replica, and the record must still say which one it
    # described, so explain can tell "released" from "never placed".
    placed_replica = models.PositiveIntegerField(null=True, blank=True)
    explanation = models.JSONField(default=dict)


LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


class ApiKey(models.Model):  # type: ignore[misc]  # Django ships no types
    """A key for the OpenAI-compatible gateway (/v1/).

    Only the SHA-256 of the key is stored: the key itself is shown once, at
    creation. A key is scoped to `allowed_models`, or to every model
    when `all_models` is set; an empty list does not mean "all", so deleting the
    last model a key was scoped to leaves the key able to use nothing rather
    than everything. Revoked keys stay, for the record; the gateway refuses
    them once its key cache refreshes (llmgw.serving.gateway.snapshot).
    """

    name = models.CharField(max_length=100)
    # The key's first characters, to tell keys apart in lists; not a secret.
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    owner = models.ForeignKey(
        "auth.User", on_delete=models.CASCADE, related_name="api_keys", null=True, blank=True
    )
    all_models = models.BooleanField(default=False)
    allowed_models = models.ManyToManyField("catalog.Model", blank=True, related_name="api_keys")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Written by the gateway at most once a minute per key.
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Limits the gateway enforces across all its processes (Redis); null is
    # no limit. Tokens are charged from the engines' reported usage.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(revoked_at__isnull=True),
                name="one_active_key_per_name",
            ),
            # Zero would be a key that can do nothing: revoke it instead.
            *(
                models.CheckConstraint(
                    condition=models.Q(**{f"{field}__isnull": True})
                    | models.Q(**{f"{field}__gte": 1}),
                    name=f"apikey_{field}_positive",
                )
                for field in LIMIT_FIELDS
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class KeyUsage(models.Model):  # type: ignore[misc]  # Django ships no types
    """Tokens a key used on a model since the key was made, from the
    engines' `usage`. Added to by the gateway processes in batches, a few
    seconds apart (llmgw.serving.gateway.usage), never row by request. The
    model is the name the client asked for, kept if the model is deleted."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage")
    model = models.CharField(max_length=255)
    requests = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["api_key", "model"]
        constraints = [
            models.UniqueConstraint(fields=["api_key", "model"], name="one_usage_row_per_key_model")
        ]

    def __str__(self) -> str:
        return f"{self.api_key_id} {self.model}"
