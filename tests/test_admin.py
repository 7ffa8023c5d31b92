"""Django admin: every llmgw model has one, each list costs the same few
queries however many rows it shows, no page shows a secret, and what an
agent or the control plane owns cannot be added, edited or deleted there."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from llmgw.inventory import services
from llmgw.inventory.admin import ReadOnlyAdmin
from llmgw.inventory.models import AGENT_OWNED_FIELDS, AuditEvent, Node

# The models an operator edits in the admin; every other one is read-only.
OPERATOR_EDITABLE = {"inventory.Node", "serving.ApiKey", "accounts.ApiToken"}
# A changelist: session, user, counts, the page, one per related or
# distinct-value filter. What matters as much is that it does not grow.
MAX_LIST_QUERIES = 12


def llmgw_models() -> list[Any]:
    return [m for m in apps.get_models() if m._meta.app_config.name.startswith("llmgw.")]


def test_every_llmgw_model_has_an_admin():
    missing = [m._meta.label for m in llmgw_models() if not admin.site.is_registered(m)]
    assert not missing, f"models with no admin: {missing}"


def test_what_agents_and_the_control_plane_own_is_read_only():
    for model in llmgw_models():
        model_admin = admin.site._registry[model]
        if model._meta.label in OPERATOR_EDITABLE:
            continue
        assert isinstance(model_admin, ReadOnlyAdmin), model._meta.label
        for inline in model_admin.inlines:
            assert not inline.can_delete and inline.extra == 0, inline


def _world(make_node: Any, user: Any, n: int) -> list[str]:
    """One of every llmgw model (suffix n), returning the secrets made on the way."""
    from llmgw.accounts.models import ApiToken, NodeCertificate
    from llmgw.catalog.models import Engine, Model, Profile
    from llmgw.fabrics import models as fab
    from llmgw.fabrics.choices import FabricKind
    from llmgw.facility.models import Budget, Hold
    from llmgw.inventory.models import (
        AgentCommand,
        Filesystem,
        Gpu,
        Hearing,
        ModelHolding,
        StalenessPass,
    )
    from llmgw.serving import keys
    from llmgw.serving.models import (
        GpuClaim,
        HeldState,
        KeyUsage,
        PlacementRecord,
        Replica,
        Shard,
    )
    from tests.tokens import make_token

    now = timezone.now()
    node, credential = make_node(f"node-{n}")
    join_token = services.add_node(f"pending-{n}", "test")
    pending = Node.objects.get(name=f"pending-{n}")
    Gpu.objects.create(node=node, index=0, uuid=f"GPU-{n}", gpu_class="h100")
    Filesystem.objects.create(node=node, mount="/", free_bytes=1, total_bytes=2, reported_at=now)
    ModelHolding.objects.create(node=node, model_name=f"tiny-{n}", path="/w")
    AgentCommand.objects.create(node=node, kind="ibnetdiscover", output="x" * 100)
    StalenessPass.objects.create(last_pass_at=now)
    Hearing.objects.create(since=now, heard_at=now)
    NodeCertificate.objects.create(
        serial=f"{n:x}", node_name=node.name, not_before=now, not_after=now, issued_by="test"
    )

    model = Model.objects.create(name=f"tiny-{n}", source="hf://org/tiny")
    profile = Profile.objects.create(model=model, name="gpu", gpu_class="h100", gpus_per_shard=1)
    Engine.objects.create(name="llama.cpp", version=f"b{n}")
    replica = Replica.objects.create(model=model, profile=profile, state="ready")
    shard = Shard.objects.create(replica=replica, node=node, gpu_indices=[0])
    GpuClaim.objects.create(shard=shard, node=node, index=0)
    HeldState.objects.create(model=model, target=1)
    PlacementRecord.objects.create(model=model, placed=True, placed_replica=replica.pk)
    Hold.objects.create(domain=f"rack=r{n}", reason="test", held_by="test")
    Budget.objects.create(domain=f"rack=r{n}", watts=1000)

    fabric = fab.PhysicalFabric.objects.create(
        identity=f"0x{n:016x}", kind=FabricKind.INFINIBAND, last_seen=now
    )
    guid = f"0x{n + 100:016x}"
    fab.SubnetManager.objects.create(fabric=fabric, guid=guid, state="MASTER", last_seen=now)
    fab.ManagerObservation.objects.create(node=node, fabric=fabric, guid=guid, seen_at=now)
    fab.MasterChange.objects.create(fabric=fabric, at=now, master_guid=guid)
    fab.Port.objects.create(
        node=node, device="mlx5_0", port=1, updated_at=now, physical_fabric=fabric
    )
    fab.FabricMap.objects.create(fabric=fabric, analysis={"nodes": []}, summary={"switches": 1})

    key = keys.create_key(f"key-{n}", user, [model.name])
    KeyUsage.objects.create(
        api_key=key.api_key, model=model.name, requests=1, prompt_tokens=2, completion_tokens=3
    )
    token = make_token(user)
    return [
        credential,
        Node.objects.get(pk=node.pk).credential_hash,
        join_token,
        pending.join_token_hash,
        key.key,
        key.api_key.digest,
        token,
        *ApiToken.objects.filter(user=user).values_list("digest", flat=True),
    ]


@pytest.fixture
def superuser(db: Any) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.org", "a-long-test-password")


def _get(client: Any, url: str, secrets: list[str]) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    body = response.content.decode()
    for secret in secrets:
        assert secret not in body, f"{url} shows a secret"
    return body


def test_every_page_answers_without_a_secret_in_bounded_queries(
    client, superuser, make_node, django_assert_max_num_queries
):
    secrets = _world(make_node, superuser, 1)
    client.force_login(superuser)
    _get(client, reverse("admin:index"), secrets)
    first: dict[str, int] = {}
    for model in llmgw_models():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        with django_assert_max_num_queries(MAX_LIST_QUERIES):
            with CaptureQueriesContext(connection) as queries:
                _get(client, url, secrets)
        first[url] = len(queries)
        pk = model.objects.order_by("pk").values_list("pk", flat=True)[0]
        change = reverse(
            f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[pk]
        )
        _get(client, change, secrets)
    # More rows on every list must not mean more queries.
    secrets += _world(make_node, superuser, 2)
    for url, count in first.items():
        with CaptureQueriesContext(connection) as queries:
            _get(client, url, secrets)
        assert len(queries) == count, (
            f"{url}: {count} queries with one row, {len(queries)} with two"
        )


def test_read_only_models_refuse_adding_editing_and_deleting(client, superuser, make_node):
    _world(make_node, superuser, 1)
    client.force_login(superuser)
    for model in llmgw_models():
        if model._meta.label in OPERATOR_EDITABLE:
            continue
        name = f"{model._meta.app_label}_{model._meta.model_name}"
        pk = model.objects.order_by("pk").values_list("pk", flat=True)[0]
        assert client.get(reverse(f"admin:{name}_add")).status_code == 403, name
        assert client.post(reverse(f"admin:{name}_change", args=[pk]), {}).status_code == 403
        assert (
            client.post(reverse(f"admin:{name}_delete", args=[pk]), {"post": "yes"}).status_code
            == 403
        )
        assert model.objects.filter(pk=pk).exists(), name


def test_nodes_keys_and_tokens_are_never_added_here(rf, superuser):
    request = rf.get("/admin/")
    request.user = superuser
    for label in OPERATOR_EDITABLE:
        assert not admin.site._registry[apps.get_model(label)].has_add_permission(request), label


def test_an_operator_edits_only_cordons_and_labels_and_the_edit_is_audited(
    client, superuser, make_node
):
    node, _ = make_node("node-a")
    node_admin = admin.site._registry[Node]
    request = client.get("/").wsgi_request
    request.user = superuser
    form_fields = set(node_admin.get_form(request, node).base_fields)
    assert form_fields == {"cordoned", "cordon_reason", "operator_labels"}
    assert set(AGENT_OWNED_FIELDS) <= set(node_admin.get_readonly_fields(request, node))

    client.force_login(superuser)
    url = reverse("admin:inventory_node_change", args=[node.pk])
    form = {"cordoned": "on", "cordon_reason": "", "operator_labels": "{}", "agent_version": "9"}
    inlines = {
        f"{prefix}-{field}": value
        for prefix in ("gpus", "filesystems")
        for field, value in (("TOTAL_FORMS", "0"), ("INITIAL_FORMS", "0"))
    }
    refused = client.post(url, {**form, **inlines})
    assert refused.status_code == 200 and "a cordon needs a reason" in refused.content.decode()
    assert not Node.objects.get(pk=node.pk).cordoned

    done = client.post(
        url,
        {**form, **inlines, "cordon_reason": "bad fan", "operator_labels": '{"rack": "r1"}'},
    )
    assert done.status_code == 302
    node.refresh_from_db()
    assert node.cordoned and node.cordon_reason == "bad fan" and node.cordoned_by == "root"
    assert node.operator_labels == {"rack": "r1"} and node.agent_version != "9"
    actions = set(AuditEvent.objects.filter(node_name="node-a").values_list("action", flat=True))
    assert {"cordon", "label"} <= actions


def test_the_catalog_lists_say_the_file_is_authoritative(client, superuser):
    client.force_login(superuser)
    for name in ("model", "profile", "engine"):
        body = client.get(reverse(f"admin:catalog_{name}_changelist")).content.decode()
        assert "llmgw catalog apply" in body and "authoritative" in body, name
