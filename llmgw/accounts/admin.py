from django.contrib import admin
from django.http import HttpRequest

from llmgw.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    list_display = ["name", "prefix", "user", "created_at", "expires_at"]
    list_filter = ["expires_at"]
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user"]
    readonly_fields = ["user", "name", "prefix", "created_at"]
    exclude = ["digest"]

    # A token is shown once, when it is made; the admin never sees one, so
    # tokens are made with POST /api/v1/token or `manage.py create_token`.
    # Deleting one here refuses it at its next request.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
