"""Physical fabrics, the ports on them, their subnet managers and maps.

A fabric is what the hardware says, not what agent.yaml calls it: ports
sharing a subnet manager are one InfiniBand fabric, and its identity is
the lowest GUID among the managers seen together, so it survives a
failover. A RoCE fabric is the IP network of its ports' RoCE v2 address.
"""

from __future__ import annotations

from django.db import models

from llmgw.fabrics.choices import FabricKind, link_up


class PhysicalFabric(models.Model):  # type: ignore[misc]  # Django ships no types
    identity = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=FabricKind.choices)
    master_guid = models.CharField(max_length=18, blank=True, default="")
    master_priority = models.IntegerField(null=True, blank=True)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["identity"]

    def __str__(self) -> str:
        identity: str = self.identity
        return identity


class SubnetManager(models.Model):  # type: ignore[misc]  # Django ships no types
    fabric = models.ForeignKey(PhysicalFabric, on_delete=models.CASCADE, related_name="managers")
    guid = models.CharField(max_length=18, unique=True)
    lid = models.IntegerField(null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, blank=True, default="")
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["fabric", "-priority", "guid"]

    def __str__(self) -> str:
        return f"{self.guid} ({self.state})"


class ManagerObservation(models.Model):  # type: ignore[misc]  # Django ships no types
    """A subnet manager as one node last reported it. A node writes only its
    own rows; SubnetManager and the fabric's master are worked out from every
    node's (llmgw.fabrics.managers), so no node can rewrite what the others
    see, nor the fabric's records on its word alone."""

    node = models.ForeignKey(
        "inventory.Node", on_delete=models.CASCADE, related_name="manager_observations"
    )
    fabric = models.ForeignKey(
        PhysicalFabric, on_delete=models.CASCADE, related_name="observations"
    )
    guid = models.CharField(max_length=18, db_index=True)
    lid = models.IntegerField(null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, blank=True, default="")
    # The node's ports (or, failing them, its listing) name this the master.
    master = models.BooleanField(default=False)
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["fabric", "guid", "node"]
        constraints = [
            models.UniqueConstraint(fields=["node", "guid"], name="one_observation_per_manager")
        ]

    def __str__(self) -> str:
        return f"{self.guid} ({self.state}) seen by node {self.node_id}"


class MasterChange(models.Model):  # type: ignore[misc]  # Django ships no types
    """Every change of master a port reported; kept, and a fabric's last day listed."""

    fabric = models.ForeignKey(
        PhysicalFabric, on_delete=models.CASCADE, related_name="master_changes"
    )
    at = models.DateTimeField(db_index=True)
    previous_guid = models.CharField(max_length=18, blank=True, default="")
    master_guid = models.CharField(max_length=18)
    reported_by = models.CharField(max_length=253, blank=True, default="")

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.fabric}: {self.previous_guid or '-'} -> {self.master_guid}"


class Port(models.Model):  # type: ignore[misc]  # Django ships no types
    node = models.ForeignKey(
        "inventory.Node", on_delete=models.CASCADE, related_name="network_ports"
    )
    device = models.CharField(max_length=64)
    port = models.PositiveSmallIntegerField()
    link_layer = models.CharField(max_length=32, blank=True, default="")
    state = models.CharField(max_length=32, blank=True, default="")
    phys_state = models.CharField(max_length=32, blank=True, default="")
    rate_gbps = models.FloatField(null=True, blank=True)
    rate_text = models.CharField(max_length=32, blank=True, default="")
    node_guid = models.CharField(max_length=18, blank=True, default="")
    port_guid = models.CharField(max_length=18, blank=True, default="")
    # The agent.yaml fabric name that claims this adapter; "" when none.
    declared_fabric = models.CharField(max_length=64, blank=True, default="")
    sm_guid = models.CharField(max_length=18, blank=True, default="")
    roce_network = models.CharField(max_length=64, blank=True, default="")
    physical_fabric = models.ForeignKey(
        PhysicalFabric, on_delete=models.SET_NULL, null=True, blank=True, related_name="ports"
    )
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["node", "device", "port"]
        constraints = [
            models.UniqueConstraint(fields=["node", "device", "port"], name="one_row_per_port")
        ]

    def __str__(self) -> str:
        return f"{self.node.name}:{self.device}/{self.port}"

    @property
    def active(self) -> bool:
        return link_up(self.state, self.phys_state)


class FabricMap(models.Model):  # type: ignore[misc]  # Django ships no types
    """The last ibnetdiscover of a fabric, parsed and analysed by the control
    plane. A dump that fails to parse keeps the previous map; the error and
    its line are recorded beside it."""

    fabric = models.OneToOneField(PhysicalFabric, on_delete=models.CASCADE, related_name="map")
    taken_at = models.DateTimeField(null=True, blank=True)
    source_node = models.CharField(max_length=253, blank=True, default="")
    analysis = models.JSONField(null=True, blank=True)
    # The analysis's summary, stored beside it when the map is stored
    # (sweep.store_map): /metrics and the fabric list read it on every
    # scrape and page, and a big fabric's whole map is megabytes to load
    # and parse for a dozen numbers.
    summary = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    error_line = models.PositiveIntegerField(null=True, blank=True)
    error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"map of {self.fabric}"
