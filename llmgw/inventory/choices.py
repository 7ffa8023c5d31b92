"""One choice set per status, with the label every surface uses.

Models, services and the gateway all read these, so "NotReady" is spelled
one way everywhere.
"""

from django.db import models


class NodeState(models.TextChoices):
    READY = "Ready", "Ready"
    NOT_READY = "NotReady", "NotReady"
