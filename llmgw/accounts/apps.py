from django.apps import AppConfig


class AccountsConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from llmgw.accounts import throttle

        # Every password check sends this (console, admin, token endpoint):
        # one place counts the failures for all three.
        user_login_failed.connect(throttle.on_login_failed, dispatch_uid="llmgw-login-throttle")
