"""Holds on facility domains, and the watts each domain may draw."""

from __future__ import annotations

from django.db import models

# How a drain's progress begins once nothing runs in the domain any more:
# written by serving.draining, read wherever the hold is shown.
DRAINED = "drained"


class Hold(models.Model):  # type: ignore[misc]  # Django ships no types
    """Nothing new is placed in a held domain; with drain, what runs there
    is moved away, one replica at a time (serving.draining)."""

    # "rack=r01", or a node's name (facility.domains).
    domain = models.CharField(max_length=300, unique=True)
    reason = models.CharField(max_length=500)
    drain = models.BooleanField(default=False)
    held_by = models.CharField(max_length=150, blank=True, default="")
    held_at = models.DateTimeField(auto_now_add=True)
    # The replica being moved out and its replacement, while one is:
    # {"model": ..., "old": id, "new": id}. Written by serving.draining only.
    moving = models.JSONField(null=True, blank=True)
    # What the drain did last or is waiting for, in words.
    progress = models.CharField(max_length=500, blank=True, default="")
    progress_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["domain"]

    def __str__(self) -> str:
        return f"{self.domain} held: {self.reason}"


class Budget(models.Model):  # type: ignore[misc]  # Django ships no types
    """A power cap from server.yaml's facility.budgets, replaced whole by
    each apply of the file."""

    domain = models.CharField(max_length=300, unique=True)
    watts = models.FloatField()

    class Meta:
        ordering = ["domain"]

    def __str__(self) -> str:
        return f"{self.domain}: {self.watts:.0f} W"
