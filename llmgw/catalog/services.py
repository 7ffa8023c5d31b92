"""Changes to the catalog. Each is one transaction: a file is applied whole
or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import transaction

from llmgw.catalog.loader import CatalogError, Parsed, parse
from llmgw.catalog.models import Engine, Model, Profile

# The engine every profile gets when it names none.
DEFAULT_ENGINE = "llama.cpp"


def check(parsed: Parsed) -> list[str]:
    """Rules that need the database: which models are new, which engines exist."""
    errors: list[str] = []
    stored = set(
        Model.objects.filter(name__in=[m["name"] for m in parsed.models]).values_list(
            "name", flat=True
        )
    )
    engines = {e["name"] for e in parsed.engines} | set(
        Engine.objects.values_list("name", flat=True)
    )
    engines |= {DEFAULT_ENGINE, "vllm", "sglang"}
    in_use = _profiles_in_use([m["name"] for m in parsed.models])
    for model in parsed.models:
        kept = {p["name"] for p in model["profiles"]}
        for profile, replicas in sorted(in_use.get(model["name"], {}).items()):
            if profile not in kept:
                line = parsed.lines.get(f"models[{parsed.models.index(model)}]", 0)
                errors.append(
                    f"line {line}: models[{parsed.models.index(model)}].profiles: profile {profile!r} is gone "
                    f"from the file but {replicas} replica(s) run with it; scale them down first"
                )
        for p in model["profiles"]:
            where = f"line {p['_line']}: {p['_path']}"
            if model["name"] not in stored and not p.get("gpu_class") and not p.get("memory_gb"):
                # Seed 990d82d801: a CPU model with no memory figure claims
                # nothing, and placement would stack them until the OOM killer.
                errors.append(
                    f"{where}.memory_gb: a new CPU model must declare the memory it needs"
                )
            if p.get("engine", DEFAULT_ENGINE) not in engines:
                errors.append(
                    f"{where}.engine: unknown engine {p['engine']!r}; declare it under engines:"
                )
    return errors


def _profiles_in_use(models: list[str]) -> dict[str, dict[str, int]]:
    from django.db.models import Count

    used: dict[str, dict[str, int]] = {}
    rows = (
        Profile.objects.filter(model__name__in=models).annotate(n=Count("replicas")).filter(n__gt=0)
    )
    for row in rows.select_related("model"):
        used.setdefault(row.model.name, {})[row.name] = row.n
    return used


def apply_text(text: str) -> dict[str, int]:
    parsed = parse(text)
    return apply(parsed)


def apply_file(path: Path) -> dict[str, int]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CatalogError([f"{path}: {exc.strerror}"]) from None
    return apply_text(text)


@transaction.atomic
def apply(parsed: Parsed) -> dict[str, int]:
    errors = check(parsed)
    if errors:
        raise CatalogError(errors)
    for spec in parsed.engines:
        if spec["default"]:
            Engine.objects.filter(name=spec["name"]).update(default=False)
        Engine.objects.update_or_create(
            name=spec["name"],
            version=spec["version"],
            defaults={
                "builds": spec["builds"],
                "package": spec["package"],
                "mirror": spec["mirror"],
                "default": spec["default"],
            },
        )
    profiles = 0
    for spec in parsed.models:
        model, _ = Model.objects.update_or_create(
            name=spec["name"],
            defaults={
                "source": spec["source"],
                "weights": spec.get("weights", ""),
                "always_running": spec.get("always_running", 0),
                "under_load": spec.get("under_load", 0),
            },
        )
        names = []
        for p in spec["profiles"]:
            names.append(p["name"])
            Profile.objects.update_or_create(
                model=model, name=p["name"], defaults=_profile_fields(p)
            )
            profiles += 1
        model.profiles.exclude(name__in=names).delete()
    return {"engines": len(parsed.engines), "models": len(parsed.models), "profiles": profiles}


def _profile_fields(p: dict[str, Any]) -> dict[str, Any]:
    gpus = p.get("gpus_per_shard", 0)
    return {
        "priority": p.get("priority", 0),
        "gpu_class": p.get("gpu_class", ""),
        "gpus_per_shard": gpus,
        "tensor_parallel": p.get("tensor_parallel", max(1, gpus)),
        "nodes_per_replica": p.get("nodes_per_replica", 1),
        "min_memory_gb": p.get("min_memory_gb", 0),
        "memory_gb": p.get("memory_gb", 0),
        "cpu_cores": p.get("cpu_cores", 0),
        "engine": p.get("engine", DEFAULT_ENGINE),
        "engine_version": p.get("engine_version", ""),
        "args": p.get("args", []),
        "node_selector": p.get("node_selector", {}),
        "fabric": p.get("fabric", ""),
        "power_w": p.get("power_w"),
        "keep_within": p.get("keep_within", ""),
    }


@transaction.atomic
def set_resources(
    model_name: str, memory_gb: float | None, cpu_cores: int | None, profile: str | None = None
) -> list[Profile]:
    """`llmgw ctl model resources`: set a stored model's declared memory and
    cores (all its profiles, or one)."""
    profiles = list(Profile.objects.select_for_update().filter(model__name=model_name))
    if profile:
        profiles = [p for p in profiles if p.name == profile]
    if not profiles:
        raise CatalogError(
            [f"no model {model_name!r}" + (f" with profile {profile!r}" if profile else "")]
        )
    for p in profiles:
        if memory_gb is not None:
            p.memory_gb = memory_gb
        if cpu_cores is not None:
            p.cpu_cores = cpu_cores
        p.save(update_fields=["memory_gb", "cpu_cores"])
    return profiles
