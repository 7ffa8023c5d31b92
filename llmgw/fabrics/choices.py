from llmgw.choices import TextChoices


class FabricKind(TextChoices):
    INFINIBAND = "infiniband", "InfiniBand"
    ROCE = "roce", "RoCE"


class Problem(TextChoices):
    """What a fabric's subnet managers say it cannot survive, or already
    shows."""

    NO_STANDBY = "no_standby", "no standby subnet manager"
    MASTER_DISAGREEMENT = "master_disagreement", "ports disagree on the master"
    NO_SUBNET_MANAGER = "no_subnet_manager", "ports up with no subnet manager (INIT)"
    RECENT_FAILOVER = "recent_failover", "the master changed in the last hour"


def link_up(state: object, phys_state: object) -> bool:
    """Whether a port is up: its logical state ACTIVE (ibstat's "ACTIVE",
    sysfs's "4: ACTIVE") and its link trained. The one rule for a stored
    port, a reported one and every row read of either."""
    return str(state or "").startswith("ACTIVE") and phys_state == "LinkUp"
