"""Replicas and their shards: what placement handed out.

A replica's shards hold its claims on nodes: GPU indices (one row each,
unique per node, so the database itself refuses a GPU handed out twice),
and the cores and memory its profile declared. Replicas are released whole
because they fail whole.
"""

from __future__ import annotations

from django.db import models

from llmgw.serving.choices import ReplicaState


class Replica(models.Model):
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


class Shard(models.Model):
    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, related_name="shards")
    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT, related_name="shards")
    rank = models.PositiveSmallIntegerField(default=0)
    gpu_indices = models.JSONField(default=list, blank=True)
    adapters = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["replica", "rank"]

    def __str__(self) -> str:
        return f"{self.replica}/{self.rank}@{self.node.name}"


class GpuClaim(models.Model):
    shard = models.ForeignKey(Shard, on_delete=models.CASCADE, related_name="gpu_claims")
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="gpu_claims")
    index = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_claim_per_gpu")]


class PlacementRecord(models.Model):
    """The last placement attempt per model, placed or refused, for explain."""

    model = models.OneToOneField(
        "catalog.Model", on_delete=models.CASCADE, related_name="last_placement"
    )
    at = models.DateTimeField(auto_now=True)
    placed = models.BooleanField()
    explanation = models.JSONField(default=dict)
