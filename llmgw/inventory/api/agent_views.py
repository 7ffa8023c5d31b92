"""The agent API: join, register, heartbeat. Thin: decode into the
protocol's structs (llmgw_agent.protocol), then call the service."""

from __future__ import annotations

import ipaddress
from typing import Any

import msgspec
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from llmgw_agent.protocol.errors import field_errors
from llmgw_agent.protocol.messages import Answer, Heartbeat, Join, Joined, Message, Registration
from rest_framework import status
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.inventory import credentials, heartbeats, services
from llmgw.inventory.api.agent_fast import decode_heartbeat, json_schema
from llmgw.inventory.api.auth import NodeCertificateAuthentication, NodeCredentialAuthentication
from llmgw.inventory.models import Node
from llmgw.validation import Refused, loads


class IsNode(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Node)


def _errors(errors: dict[str, list[str]], code: int = status.HTTP_400_BAD_REQUEST) -> Response:
    return Response({"errors": errors}, status=code)


class AgentView(APIView):
    # The certificate first: a connection that came with one is its node.
    authentication_classes = [NodeCertificateAuthentication, NodeCredentialAuthentication]
    permission_classes = [IsNode]
    message: type[Message] = Message

    def parse(self, request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        # Read the raw body ourselves: the size limit must bite before JSON
        # parsing, and a syntax error must name the line like any other field.
        body = request._request.body
        if len(body) > settings.AGENT_MAX_PAYLOAD_BYTES:
            return None, _errors(
                {
                    "payload": [
                        f"{len(body)} bytes is over the limit of {settings.AGENT_MAX_PAYLOAD_BYTES}"
                    ]
                },
                status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        try:
            # The whole body, unknown fields too, before any field: NUL,
            # surrogates, non-finite numbers and deep nesting are refused
            # here by path, so nothing the database would refuse reaches it.
            raw = loads(body)
        except Refused as refused:
            return None, _errors(refused.errors)
        if not isinstance(raw, dict):
            return None, _errors({"payload": ["expected a JSON object"]})
        try:
            data: dict[str, Any] = msgspec.to_builtins(msgspec.convert(raw, self.message))
        except msgspec.ValidationError:
            return None, _errors(field_errors(raw, self.message))
        if data["node"] != request.auth.name:
            services.refuse_impersonation(request.auth, data["node"], request.path)
            return None, Response(
                {"errors": {"node": [f"this {_proof(request)} belongs to {request.auth.name}"]}},
                status=status.HTTP_403_FORBIDDEN,
            )
        return data, None


def _proof(request: Request) -> str:
    if isinstance(request.successful_authenticator, NodeCertificateAuthentication):
        return "certificate"
    return "credential"


def peer_address(request: Request) -> str | None:
    """The address the request came from, as the server saw the connection
    (or as a reverse proxy it trusts passed it on); None when not over IP.
    Never a field of the payload, which is the agent's word."""
    try:
        return str(ipaddress.ip_address(request.META.get("REMOTE_ADDR") or ""))
    except ValueError:
        return None


class RegisterView(AgentView):
    message = Registration

    @extend_schema(
        request={"application/json": json_schema(Registration)},
        responses={200: json_schema(Answer)},
    )
    def post(self, request: Request) -> Response:
        data, refusal = self.parse(request)
        if refusal:
            return refusal
        node = services.register(request.auth, data, peer_address(request))
        return Response({"node": node.name, "state": services.effective_state(node)})


class HeartbeatView(AgentView):
    message = Heartbeat

    @extend_schema(
        request={"application/json": json_schema(Heartbeat)},
        responses={200: json_schema(Answer)},
    )
    def post(self, request: Request) -> Response:
        data, refusal = self.parse(request)
        if refusal:
            return refusal
        return Response(heartbeats.heartbeat(request.auth, data))


_checked_view = HeartbeatView.as_view()
_encode = msgspec.json.Encoder().encode


@csrf_exempt
def heartbeat(request: HttpRequest) -> HttpResponse:
    """The heartbeat, the commonest request there is (10,000 nodes every
    10 s is 1,000 a second), served without DRF when it can be: a valid
    heartbeat with its own node's credential is decoded by msgspec and
    authenticated and stored by one UPDATE. Anything else (another method, no
    or a wrong credential, an oversized, malformed or invalid payload,
    another node's name) goes to HeartbeatView, which answers exactly as it
    always has: 401, 413, 400 naming every bad field, 403 and an audit
    record. Nothing is written before that hand-over."""
    answer = _fast_heartbeat(request) if request.method == "POST" else None
    if answer is None:
        return _checked_view(request)
    response = HttpResponse(_encode(answer), content_type="application/json")
    # What a DRF Response carries, so the two paths are indistinguishable.
    response["Vary"] = "Accept"
    response["Allow"] = "POST, OPTIONS"
    return response


# The OpenAPI schema (drf-spectacular) documents an APIView-made callback:
# the endpoint is HeartbeatView's, whichever path answers.
heartbeat.cls = HeartbeatView  # type: ignore[attr-defined]
heartbeat.initkwargs = {}  # type: ignore[attr-defined]


def _fast_heartbeat(request: HttpRequest) -> dict[str, Any] | None:
    scheme, _, credential = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme != NodeCredentialAuthentication.keyword:
        return None
    parts = credentials.split_credential(credential)
    if parts is None:
        return None
    # Read the body only when it is within the limit: reading an oversized
    # one can raise before the credential is checked, and the answer to a
    # stranger is 401 whatever it sent.
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if declared > settings.AGENT_MAX_PAYLOAD_BYTES:
        return None
    body = request.body
    if len(body) > settings.AGENT_MAX_PAYLOAD_BYTES:
        return None
    data = decode_heartbeat(body)
    if data is None or data["node"] != parts[0]:
        return None
    return heartbeats.heartbeat_with_credential(parts[0], parts[1], data)


class JoinView(AgentView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    message = Join

    @extend_schema(
        request={"application/json": json_schema(Join)},
        responses={200: json_schema(Joined)},
    )
    def post(self, request: Request) -> Response:
        body = request._request.body
        try:
            raw = loads(body)
        except Refused as refused:
            return _errors(refused.errors)
        raw = raw if isinstance(raw, dict) else {}
        try:
            join = msgspec.convert(raw, Join)
        except msgspec.ValidationError:
            return _errors(field_errors(raw, Join))
        try:
            credential = services.join(join.node, join.token)
        except services.InventoryError as exc:
            return Response({"errors": {"token": [str(exc)]}}, status=status.HTTP_403_FORBIDDEN)
        return Response(msgspec.to_builtins(Joined(node=join.node, credential=credential)))


class RecordView(APIView):
    """What the control plane recorded for the calling node, for `llmgw doctor`.

    Node-scoped: the credential says which node, so a node reads only its own record; a
    `?node=` naming another is refused and audited like a payload naming another. It
    changes nothing (no heartbeat): doctor may call it while the agent runs. Reached
    through the reverse relations, so the inventory imports no other app.
    """

    # The certificate first: a connection that came with one is its node.
    authentication_classes = [NodeCertificateAuthentication, NodeCredentialAuthentication]
    permission_classes = [IsNode]

    def get(self, request: Request) -> Response:
        node: Node = request.auth
        asked = request.query_params.get("node")
        if asked is not None and asked != node.name:
            services.refuse_impersonation(node, asked, request.path)
            return Response(
                {"errors": {"node": [f"this credential belongs to {node.name}"]}},
                status=status.HTTP_403_FORBIDDEN,
            )
        return Response(
            {
                "node": node.name,
                "state": services.effective_state(node),
                "time": timezone.now().isoformat(),
                "ports": _recorded_ports(node),
                "fabrics": _recorded_fabrics(node),
                "shards": _recorded_shards(node),
                # As the agent last reported them: doctor run beside an install in
                # progress says so instead of "no engine installed".
                "engines": [
                    {k: e.get(k) for k in ("name", "version", "status", "message")}
                    for e in node.engines or []
                    if isinstance(e, dict)
                ],
            }
        )


def _recorded_ports(node: Node) -> list[dict[str, Any]]:
    ports = node.network_ports.select_related("physical_fabric")
    return [
        {
            "device": p.device,
            "port": p.port,
            "state": p.state,
            "phys_state": p.phys_state,
            "declared_fabric": p.declared_fabric,
            "sm_guid": p.sm_guid,
            "physical_fabric": p.physical_fabric.identity if p.physical_fabric else None,
        }
        for p in ports
    ]


def _recorded_fabrics(node: Node) -> list[dict[str, Any]]:
    seen: dict[int, dict[str, Any]] = {}
    ports = node.network_ports.select_related("physical_fabric")
    for p in ports:
        fab = p.physical_fabric
        if fab is not None and fab.pk not in seen:
            seen[fab.pk] = {
                "identity": fab.identity,
                "master_guid": fab.master_guid,
                "managers": sorted(m.guid for m in fab.managers.all()),
            }
    return list(seen.values())


def _recorded_shards(node: Node) -> list[dict[str, Any]]:
    holdings = {h.model_name: h.path for h in node.holdings.all()}
    shards = node.shards.select_related("replica__model")
    return [
        {
            "replica": s.replica_id,
            "rank": s.rank,
            "model": s.replica.model.name,
            "model_path": holdings.get(s.replica.model.name),
        }
        for s in shards
    ]
