"""Changes to the catalog. Each is one transaction: a file is applied whole
or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmgw import events, holdings
from llmgw.catalog.loader import CatalogError, Parsed, parse
from llmgw.catalog.models import Engine, Model, Profile
from llmgw.database.atomic import atomic

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
    # Replicas are serving's rows: it answers (llmgw/holdings.py).
    return holdings.reader().profiles_in_use(models)


def set_held(model: Model, always_running: int, under_load: int) -> None:
    """Store a model's held counts (serving decides them: it checks that
    placement can meet them, under the model's row lock)."""
    model.always_running, model.under_load = always_running, under_load
    model.save(update_fields=["always_running", "under_load", "updated_at"])
    events.publish(
        "counts_changed", model=model.name, always_running=always_running, under_load=under_load
    )


def apply_text(text: str) -> dict[str, Any]:
    parsed = parse(text)
    return apply(parsed)


def apply_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CatalogError([f"{path}: {exc.strerror}"]) from None
    return apply_text(text)


@atomic
def apply(parsed: Parsed) -> dict[str, Any]:
    """Store the file; the answer counts what it names and, under "changes",
    says in words what this apply changed, one line each."""
    errors = check(parsed)
    if errors:
        raise CatalogError(errors)
    changes: list[str] = []
    for spec in parsed.engines:
        changes += _engine(spec)
    profiles = 0
    for spec in parsed.models:
        changes += _model(spec)
        profiles += len(spec["profiles"])
    return {
        "engines": len(parsed.engines),
        "models": len(parsed.models),
        "profiles": profiles,
        "changes": changes,
    }


def _engine(spec: dict[str, Any]) -> list[str]:
    if spec["default"]:
        Engine.objects.filter(name=spec["name"]).update(default=False)
    fields = {k: spec[k] for k in ("builds", "package", "mirror", "default")}
    stored = Engine.objects.filter(name=spec["name"], version=spec["version"]).first()
    Engine.objects.update_or_create(name=spec["name"], version=spec["version"], defaults=fields)
    what = f"engine {spec['name']} {spec['version']}"
    if stored is None:
        return [f"{what}: added"]
    changed = [k for k, v in fields.items() if getattr(stored, k) != v]
    return [f"{what}: {', '.join(changed)} changed"] if changed else []


def _model(spec: dict[str, Any]) -> list[str]:
    name = spec["name"]
    said = {field: spec.get(field, 0) for field in HELD}
    model = Model.objects.select_for_update().filter(name=name).first()
    if model is None:
        model = Model.objects.create(
            name=name,
            source=spec["source"],
            weights=spec.get("weights", ""),
            **said,
            **{f"file_{field}": n for field, n in said.items()},
        )
        for p in spec["profiles"]:
            Profile.objects.create(model=model, name=p["name"], **_profile_fields(p))
        counts = ", ".join(f"{field} {n}" for field, n in said.items())
        return [f"model {name}: added ({counts})"]
    changes = [
        f"model {name}: {field} changed"
        for field, value in (("source", spec["source"]), ("weights", spec.get("weights", "")))
        if getattr(model, field) != value
    ]
    held, notes = _held(model, said)
    changes += [f"model {name}: {note}" for note in notes]
    model.source, model.weights = spec["source"], spec.get("weights", "")
    for field in HELD:
        setattr(model, field, held[field])
        setattr(model, f"file_{field}", said[field])
    model.save()
    stored = {p.name: p for p in model.profiles.all()}
    for p in spec["profiles"]:
        fields = _profile_fields(p)
        row = stored.pop(p["name"], None)
        if row is None:
            Profile.objects.create(model=model, name=p["name"], **fields)
            changes.append(f"model {name}: profile {p['name']} added")
            continue
        changed = [k for k, v in fields.items() if getattr(row, k) != v]
        if changed:
            Profile.objects.filter(pk=row.pk).update(**fields)
            changes.append(f"model {name}: profile {p['name']}: {', '.join(changed)} changed")
    for gone in sorted(stored):
        changes.append(f"model {name}: profile {gone} removed")
    model.profiles.filter(name__in=list(stored)).delete()
    return changes


# The held counts, in the order they are spoken of.
HELD = ("always_running", "under_load")


def _held(model: Model, said: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    """The held counts after an apply, and what it says of them.

    The file's count is taken when the file changed it since it was last
    applied: an edited count is the operator's newest word on it, newer than
    any change at run time. A count the file did not change keeps its value
    now: `ctl model scale` and `ctl place` change counts at run time, and a
    re-apply of the same file (make demo run again, a deploy re-run) is not
    an instruction to undo them and release their replicas. Where no apply
    recorded what the file said (rows from before it was kept), the count
    now is kept too, and the line says how to take the file's."""
    held: dict[str, int] = {}
    notes: list[str] = []
    for field in HELD:
        now, new, last = getattr(model, field), said[field], getattr(model, f"file_{field}")
        if now == new:
            held[field] = new
        elif last is not None and new != last:
            held[field] = new
            notes.append(f"{field} {now} -> {new} (the file changed it from {last})")
        else:
            held[field] = now
            flag = field.replace("_", "-")
            notes.append(
                f"{field} kept at {now}, as set at run time (the file says {new}, "
                f"unchanged; to take it: llmgw ctl model scale {model.name} --{flag} {new})"
            )
    if held["under_load"] and held["under_load"] < held["always_running"]:
        # under_load is the ceiling under load, never below the floor.
        notes.append(
            f"under_load {held['under_load']} -> {held['always_running']}, "
            f"up to always_running {held['always_running']}"
        )
        held["under_load"] = held["always_running"]
    return held, notes


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


@atomic
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
