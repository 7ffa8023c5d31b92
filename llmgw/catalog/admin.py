"""Admin for the catalog. The catalog file is authoritative: `llmgw catalog
apply` writes every column of these rows (held counts changed at run time
aside, unless the file changed them) and deletes the profiles the file no
longer names, so an edit made here would be lost at the next apply, or
would run replicas nobody can find in the file. Shown, never edited."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from llmgw.catalog.models import Engine, Model, Profile
from llmgw.inventory.admin import ReadOnlyAdmin, ReadOnlyInline

FROM_THE_FILE = (
    "Applied from the catalog file by `llmgw catalog apply`, which is authoritative: "
    "change the file and apply it. "
    "Read-only here, since the next apply would overwrite an edit."
)


class ProfileInline(ReadOnlyInline):
    model = Profile
    fields = [
        "name",
        "priority",
        "gpu_class",
        "gpus_per_shard",
        "tensor_parallel",
        "nodes_per_replica",
        "memory_gb",
        "cpu_cores",
        "engine",
        "engine_version",
        "fabric",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Profile]:
        # Each row's title names its model.
        return super().get_queryset(request).select_related("model")


@admin.register(Model)
class ModelAdmin(ReadOnlyAdmin):
    description = FROM_THE_FILE
    list_display = ["name", "source", "weights", "always_running", "under_load", "updated_at"]
    search_fields = ["name", "source", "weights"]
    inlines = [ProfileInline]


@admin.register(Profile)
class ProfileAdmin(ReadOnlyAdmin):
    description = FROM_THE_FILE
    list_display = [
        "__str__",
        "priority",
        "gpu_class",
        "gpus_per_shard",
        "tensor_parallel",
        "nodes_per_replica",
        "memory_gb",
        "cpu_cores",
        "engine",
        "fabric",
    ]
    list_filter = ["engine", "gpu_class", "nodes_per_replica", "model"]
    search_fields = ["name", "model__name", "gpu_class", "engine"]
    list_select_related = ["model"]


@admin.register(Engine)
class EngineAdmin(ReadOnlyAdmin):
    description = FROM_THE_FILE
    list_display = ["name", "version", "default"]
    list_filter = ["name", "default"]
    search_fields = ["name", "version"]
