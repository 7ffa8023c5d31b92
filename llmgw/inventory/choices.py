"""One choice set per status, with the label every surface uses.

Models, services and the gateway all read these, so "NotReady" is spelled
one way everywhere.
"""

from llmgw.choices import TextChoices


class NodeState(TextChoices):
    READY = "Ready", "Ready"
    NOT_READY = "NotReady", "NotReady"
