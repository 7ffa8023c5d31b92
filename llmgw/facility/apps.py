from django.apps import AppConfig


class FacilityConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """Where nodes sit (site > room > row > rack, and PDUs beside that tree),
    which of those domains are held, and the watts each may draw."""

    name = "llmgw.facility"
    label = "facility"
    verbose_name = "Facility"
