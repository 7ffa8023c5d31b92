from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "llmgw.accounts"
    label = "accounts"
