from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "llmgw.metrics"
    label = "metrics"
