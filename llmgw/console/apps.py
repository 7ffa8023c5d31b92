from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "llmgw.console"
    label = "console"
