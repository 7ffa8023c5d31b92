"""What can be run: models, the profiles they can run as, and the engines."""

from __future__ import annotations

from django.db import models


class Model(models.Model):  # type: ignore[misc]  # Django ships no types
    name = models.CharField(max_length=255, unique=True)
    # Where the weights come from (hf://org/repo, s3://..., a path); what
    # nodes report holding is matched by name.
    source = models.CharField(max_length=1024)
    # Which weights exactly: a file name, revision or digest.
    weights = models.CharField(max_length=1024, blank=True, default="")
    # Held counts: kept running always, and allowed up to while loaded.
    always_running = models.PositiveIntegerField(default=0)
    under_load = models.PositiveIntegerField(default=0)
    # The held counts the catalog file said when last applied; null when no
    # file has said (a row from before they were kept). A re-apply compares
    # the file with these, not with the counts above, which the operator
    # changes at run time (ctl model scale, ctl place): a count the file did
    # not change keeps its run-time value (catalog.services.apply).
    file_always_running = models.PositiveIntegerField(null=True, blank=True)
    file_under_load = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        name: str = self.name
        return name


class Profile(models.Model):  # type: ignore[misc]  # Django ships no types
    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="profiles")
    name = models.CharField(max_length=100)
    priority = models.IntegerField(default=0)
    # Empty: a CPU profile.
    gpu_class = models.CharField(max_length=64, blank=True, default="")
    gpus_per_shard = models.PositiveIntegerField(default=0)
    tensor_parallel = models.PositiveIntegerField(default=1)
    nodes_per_replica = models.PositiveIntegerField(default=1)
    # Both memory figures are GiB (2**30 bytes): memory is sold in binary
    # gigabytes, and every surface prints sizes in binary units (llmgw.units).
    min_memory_gb = models.FloatField(default=0)
    # Declared claim on the node's memory; 0 is "nobody said" and claims nothing.
    memory_gb = models.FloatField(default=0)
    cpu_cores = models.PositiveIntegerField(default=0)
    engine = models.CharField(max_length=64, default="llama.cpp")
    engine_version = models.CharField(max_length=64, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    node_selector = models.JSONField(default=dict, blank=True)
    fabric = models.CharField(max_length=64, blank=True, default="")
    # Watts one shard draws, for facility power caps; null is "not said", never 0.
    power_w = models.FloatField(null=True, blank=True)
    # rack, row or room: a multi-node replica's nodes all inside one; "" anywhere.
    keep_within = models.CharField(max_length=8, blank=True, default="")

    class Meta:
        ordering = ["model", "-priority", "name"]
        constraints = [
            models.UniqueConstraint(fields=["model", "name"], name="one_profile_name_per_model")
        ]

    def __str__(self) -> str:
        return f"{self.model.name}/{self.name}"

    @property
    def is_cpu(self) -> bool:
        return not self.gpu_class


class Engine(models.Model):  # type: ignore[misc]  # Django ships no types
    """An engine build the control plane asks nodes to converge on."""

    name = models.CharField(max_length=64)
    version = models.CharField(max_length=64)
    # Platform ("ubuntu-x64", "ubuntu-x64-cuda-12.4", ...) -> {url, sha256}.
    builds = models.JSONField(default=dict, blank=True)
    # {requirements: ["name==version --hash=sha256:..."], index_url, needs}: installed with
    # pip --require-hashes into a virtualenv of its own where no archive fits the node.
    package = models.JSONField(default=dict, blank=True)
    # Serves the same archives by file name, and the package's wheels under wheels/.
    mirror = models.CharField(max_length=1024, blank=True, default="")
    default = models.BooleanField(default=False)

    class Meta:
        ordering = ["name", "version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="one_engine_version")
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.version}"
