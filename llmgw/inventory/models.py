"""Nodes and what they report: hardware, filesystems, GPUs, weights.

Agents own most of these columns; operators own cordons and their labels.
The split matters: a re-registering agent rewrites what it owns and never
touches what an operator set.
"""

from __future__ import annotations

from django.db import models

from llmgw.inventory.choices import NodeState

# The columns a registration sets from the agent's word, named once: the
# registration service writes them, the admin shows them read-only (the next
# registration would overwrite an edit), and the API says null for the text
# ones left blank. Top-level fields of the registration, then its `system`.
REGISTERED_FIELDS = ("agent_version", "probed", "simulated", "heartbeat_interval_s")
SYSTEM_TEXT_FIELDS = ("os", "kernel", "arch", "cpu_model", "nvidia_driver")
SYSTEM_FIELDS = (*SYSTEM_TEXT_FIELDS, "cpu_flags", "cpus", "memory_total_bytes")
AGENT_OWNED_FIELDS = (
    *REGISTERED_FIELDS,
    *SYSTEM_FIELDS,
    "agent_labels",
    "features",
    "fabrics",
    "registered_at",
)


class Node(models.Model):  # type: ignore[misc]  # Django ships no types
    name = models.CharField(max_length=253, unique=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.NOT_READY)
    simulated = models.BooleanField(default=False)

    # Identity. Only hashes are stored; see llmgw.inventory.credentials.
    credential_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    join_token_hash = models.CharField(max_length=64, blank=True, default="")
    join_token_expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    # Operator-owned.
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=500, blank=True, default="")
    cordoned_by = models.CharField(max_length=150, blank=True, default="")
    cordoned_at = models.DateTimeField(null=True, blank=True)
    operator_labels = models.JSONField(default=dict, blank=True)

    # Agent-owned, sent at registration. Null is "the agent did not say".
    agent_labels = models.JSONField(default=dict, blank=True)
    agent_version = models.CharField(max_length=64, blank=True, default="")
    features = models.JSONField(default=list, blank=True)
    probed = models.BooleanField(default=False)
    os = models.CharField(max_length=200, blank=True, default="")
    kernel = models.CharField(max_length=200, blank=True, default="")
    arch = models.CharField(max_length=64, blank=True, default="")
    cpu_model = models.CharField(max_length=200, blank=True, default="")
    cpu_flags = models.JSONField(default=list, blank=True)
    cpus = models.PositiveIntegerField(null=True, blank=True)
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    nvidia_driver = models.CharField(max_length=64, blank=True, default="")
    fabrics = models.JSONField(default=list, blank=True)
    heartbeat_interval_s = models.PositiveIntegerField(default=10)
    registered_at = models.DateTimeField(null=True, blank=True)
    # Where the agent's registration came from, as the control plane saw the
    # connection: the only host a shard's URL may name (llmgw.serving.reports).
    # Not the agent's word: a URL of its choosing would have the gateway send
    # users' prompts anywhere. None until it registers.
    address = models.GenericIPAddressField(null=True, blank=True)

    # Latest measurements, from heartbeats. measured_at says how old they are.
    # Not indexed on purpose: an indexed column written by every heartbeat
    # stops PostgreSQL updating the row in place (HOT), so each heartbeat
    # would also write every index of the table.
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    measured_at = models.DateTimeField(null=True, blank=True)
    cpu_utilization_percent = models.FloatField(null=True, blank=True)
    load1 = models.FloatField(null=True, blank=True)
    load5 = models.FloatField(null=True, blank=True)
    load15 = models.FloatField(null=True, blank=True)
    memory_used_bytes = models.BigIntegerField(null=True, blank=True)
    memory_available_bytes = models.BigIntegerField(null=True, blank=True)
    collectors = models.JSONField(default=list, blank=True)
    # None: the agent never said whether it looks for weights (too old, or
    # not told where); the placement preference treats it like "holds none".
    weights_probed = models.BooleanField(null=True, blank=True)
    # Digests of the last filesystem and weights reports, so a heartbeat that
    # changes neither costs no writes to those tables.
    filesystems_reported_at = models.DateTimeField(null=True, blank=True)
    # GPUs and host sensors. gpu_telemetry is the latest per-heartbeat
    # sample list as the agent sent it, replaced by each heartbeat (one
    # UPDATE); what gates placement lives on the Gpu rows, written only when
    # it changes (the two digests below).
    gpu_telemetry = models.JSONField(null=True, blank=True)
    sensors = models.JSONField(null=True, blank=True)
    telemetry_at = models.DateTimeField(null=True, blank=True)
    gpu_topology = models.JSONField(null=True, blank=True)
    imex = models.JSONField(null=True, blank=True)
    sxids = models.JSONField(null=True, blank=True)
    xids_unattributed = models.JSONField(null=True, blank=True)
    gpu_state_digest = models.CharField(max_length=64, blank=True, default="")
    gpu_health_digest = models.CharField(max_length=64, blank=True, default="")
    # Wear is a state: a fault reported unchanged every minute must stay
    # current. The Gpu rows are written only when the wear changes (then
    # wear_changed_at, and health_reported_at on each card the report
    # had). Every heartbeat carrying wear sets wear_reported_at, and moves
    # its old value to wear_previously_reported_at, in the one UPDATE of
    # the hot path. See gpus.store_health and gpus.wear_reported_at.
    wear_reported_at = models.DateTimeField(null=True, blank=True)
    wear_previously_reported_at = models.DateTimeField(null=True, blank=True)
    wear_changed_at = models.DateTimeField(null=True, blank=True)
    # Engines as the agent reports them; engines_probed None = too old to say.
    engines = models.JSONField(default=list, blank=True)
    engines_probed = models.BooleanField(null=True, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    # InfiniBand and RoCE ports as last sent, counters included (one UPDATE
    # per heartbeat); fabrics.Port rows hold what placement reads, rewritten
    # only when a port's state or subnet manager changes.
    port_samples = models.JSONField(null=True, blank=True)
    ports_at = models.DateTimeField(null=True, blank=True)
    ports_digest = models.CharField(max_length=64, blank=True, default="")
    managers_digest = models.CharField(max_length=64, blank=True, default="")
    # Declared fabrics the node can carry traffic on now; None until a
    # heartbeat said (then the registration's declared fabrics are used).
    active_fabrics = models.JSONField(null=True, blank=True)
    notices = models.JSONField(default=list, blank=True)
    # What this node should run: rebuilt by llmgw.serving.desired when its
    # shards or the wanted engines change, and sent back with a heartbeat's
    # answer from the same UPDATE ... RETURNING (no extra query).
    desired = models.JSONField(default=dict, blank=True)
    # Its digest, written with it: a heartbeat that sends back the digest it
    # holds is answered without the desired state when the two match, which
    # the heartbeat's statement compares without reading the JSON.
    desired_digest = models.CharField(max_length=64, blank=True, default="")
    # Shard reports: the latest as sent (cores and memory change every
    # heartbeat), and a digest of their states for the durable path.
    shard_samples = models.JSONField(null=True, blank=True)
    shards_digest = models.CharField(max_length=64, blank=True, default="")
    filesystems_digest = models.CharField(max_length=64, blank=True, default="")
    weights_digest = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return str(self.name)

    @property
    def labels(self) -> dict[str, str]:
        # Operators win: a label set by hand is a decision, the agent's is a default.
        return {**(self.agent_labels or {}), **(self.operator_labels or {})}

    @property
    def vector_extensions(self) -> list[str]:
        return list(self.cpu_flags or [])


class Filesystem(models.Model):  # type: ignore[misc]  # Django ships no types
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="filesystems")
    mount = models.CharField(max_length=1024)
    device = models.CharField(max_length=1024, blank=True, default="")
    fstype = models.CharField(max_length=64, blank=True, default="")
    shared = models.BooleanField(default=False)
    free_bytes = models.BigIntegerField()
    total_bytes = models.BigIntegerField()
    dirs = models.JSONField(default=list, blank=True)
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ["node", "mount"]
        constraints = [models.UniqueConstraint(fields=["node", "mount"], name="one_row_per_mount")]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.mount}"


class Gpu(models.Model):  # type: ignore[misc]  # Django ships no types
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64)
    name = models.CharField(max_length=128, blank=True, default="")
    gpu_class = models.CharField(max_length=64, blank=True, default="")
    memory_total_bytes = models.BigIntegerField(null=True, blank=True)
    ecc_uncorrected = models.PositiveIntegerField(null=True, blank=True)
    foreign_processes = models.PositiveIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(max_length=32, blank=True, default="")
    numa_node = models.IntegerField(null=True, blank=True)
    nearest_adapter = models.CharField(max_length=64, blank=True, default="")
    nearest_adapter_level = models.CharField(max_length=16, blank=True, default="")
    # Registered at start but no longer listed by the driver (fallen off the bus).
    missing = models.BooleanField(default=False)
    # Wear, read once a minute; null until first reported.
    xids = models.JSONField(null=True, blank=True)
    remapped_rows = models.JSONField(null=True, blank=True)
    pcie_replays = models.BigIntegerField(null=True, blank=True)
    nvlink_errors = models.JSONField(null=True, blank=True)
    # The GPU fabric (multi-node NVLink): state, status, ClusterUUID, clique.
    fabric = models.JSONField(null=True, blank=True)
    health_reported_at = models.DateTimeField(null=True, blank=True)
    # The card's state, worked out from the columns above whenever one of
    # them is written (llmgw.inventory.gpus, by gpu_health.card_state), so
    # that no reader works it out again. Why the card is not free, in
    # words ("" when it is); the multi-node NVLink domain its fabric names
    # (None for none), why it is not joined to it, and whether its NVLink
    # bandwidth is cut.
    unhealthy_reason = models.TextField(blank=True, default="")
    nvlink_domain = models.TextField(null=True, blank=True)
    nvlink_problem = models.TextField(blank=True, default="")
    nvlink_degraded = models.BooleanField(default=False)

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_gpu_per_index")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    @property
    def healthy(self) -> bool:
        return not self.unhealthy_reason


class ModelHolding(models.Model):  # type: ignore[misc]  # Django ships no types
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="holdings")
    model_name = models.CharField(max_length=255)
    path = models.CharField(max_length=1024)
    shared = models.BooleanField(default=False)

    class Meta:
        ordering = ["node", "model_name"]

    def __str__(self) -> str:
        return f"{self.model_name}@{self.node.name}"


class AuditEvent(models.Model):  # type: ignore[misc]  # Django ships no types
    """Who did what to a node, and refused agent requests worth a look."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    node_name = models.CharField(max_length=253, blank=True, default="")
    actor = models.CharField(max_length=253, blank=True, default="")
    action = models.CharField(max_length=64)
    detail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.node_name}"


class CommandState(models.TextChoices):  # type: ignore[misc]  # Django ships no types
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class AgentCommand(models.Model):  # type: ignore[misc]  # Django ships no types
    """A request for an agent to run something and send back what it saw,
    carried over the agent's own stream: the control plane never opens a
    connection into a node, and nobody needs SSH to one."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="commands")
    kind = models.CharField(max_length=64)
    args = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=CommandState.choices, default=CommandState.PENDING
    )
    requested_by = models.CharField(max_length=150, blank=True, default="")
    timeout_s = models.PositiveIntegerField(default=120)
    output = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["node", "state"], name="command_node_state")]

    def __str__(self) -> str:
        return f"{self.kind}@{self.node.name}#{self.pk}"


class StalenessPass(models.Model):  # type: ignore[misc]  # Django ships no types
    """When the staleness check last ran (one row): the periodic schedule
    is alive. Whether a node is stale is llmgw.inventory.readiness's to
    say, from Hearing."""

    last_pass_at = models.DateTimeField()


class Hearing(models.Model):  # type: ignore[misc]  # Django ships no types
    """When the control plane could hear its fleet (one row): each web
    process, which is where heartbeats come in, writes `heard_at` every
    few seconds while its database answers; a write after a gap (the
    database or every web process down) starts a new stretch, `since`.
    A node's silence counts only from `since` (llmgw.inventory.readiness):
    a control plane that could not hear anyone must not take the silence
    for the fleet's."""

    since = models.DateTimeField()
    heard_at = models.DateTimeField()
