"""Holds are placed and released with `llmgw ctl facility` (which checks the
domain and says why); budgets come from server.yaml. Both read-only here,
so nothing bypasses those checks."""

from django.contrib import admin

from llmgw.facility.models import Budget, Hold
from llmgw.inventory.admin import ReadOnlyAdmin


@admin.register(Hold)
class HoldAdmin(ReadOnlyAdmin):
    list_display = ("domain", "reason", "drain", "held_by", "held_at", "progress")
    search_fields = ("domain", "reason")


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ("domain", "watts")
    search_fields = ("domain",)
