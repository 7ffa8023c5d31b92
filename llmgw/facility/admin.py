from django.contrib import admin

from llmgw.facility.models import Budget, Hold


@admin.register(Hold)
class HoldAdmin(admin.ModelAdmin):
    list_display = ("domain", "reason", "drain", "held_by", "held_at", "progress")
    search_fields = ("domain", "reason")
    readonly_fields = ("held_at", "moving", "progress", "progress_at")


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ("domain", "watts")
    search_fields = ("domain",)
