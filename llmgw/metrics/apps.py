from django.apps import AppConfig


class MetricsConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.metrics"
    label = "metrics"
