from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from llmgw.serving.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "owner",
        "all_models",
        "created_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["all_models", "revoked_at"]
    search_fields = ["name", "prefix"]
    filter_horizontal = ["allowed_models"]
    readonly_fields = ["prefix", "digest", "created_at", "revoked_at", "last_used_at"]
    actions = ["revoke"]

    # A key is shown once, when it is made; the admin never sees one, so
    # keys are created with `llmgw ctl keys create` or POST /api/v1/keys.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(
            request, f"{count} key(s) revoked; the gateway refuses them within seconds"
        )
