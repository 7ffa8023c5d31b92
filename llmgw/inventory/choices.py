"""One choice set per status, with the label and colour every surface uses.

Models, serializers, the CLI and the drawings' legends all read these, so
"NotReady" is spelled and coloured one way everywhere.
"""

from django.db import models


class NodeState(models.TextChoices):
    READY = "Ready", "Ready"
    NOT_READY = "NotReady", "NotReady"

    @classmethod
    def colour(cls, value: str) -> str:
        return {"Ready": "#2e9e5b", "NotReady": "#d64541"}.get(value, "#8a8f98")
