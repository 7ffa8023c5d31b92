"""The agent API: join, register, heartbeat. Thin: decode into the
protocol's structs (llmgw_agent.protocol), then call the service."""

from __future__ import annotations

import ipaddress
from typing import Any

import msgspec
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from llmgw_agent.protocol.messages import Answer, Heartbeat, Join, Joined, Message, Registration
from rest_framework import status
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.inventory import heartbeats, sections, services
from llmgw.inventory.api import agent_request
from llmgw.inventory.api.auth import NodeCertificateAuthentication, NodeCredentialAuthentication
from llmgw.inventory.api.openapi import json_schema
from llmgw.inventory.models import Node


class IsNode(BasePermission):  # type: ignore[misc]  # DRF ships no types
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Node)


def _errors(errors: dict[str, list[str]], code: int = status.HTTP_400_BAD_REQUEST) -> Response:
    return Response({"errors": errors}, status=code)


class AgentView(APIView):  # type: ignore[misc]  # DRF ships no types
    # The certificate first: a connection that came with one is its node.
    authentication_classes = [NodeCertificateAuthentication, NodeCredentialAuthentication]
    permission_classes = [IsNode]
    message: type[Message] = Message

    def parse(self, request: Request) -> dict[str, Any] | Response:
        """The body as the view's message, or the response refusing it."""
        # The raw body, read by the agent reader (agent_request): the size
        # limit bites before any JSON is parsed, and a syntax error names
        # the line like any other field.
        body = request._request.body
        too_large = agent_request.over_limit(len(body))
        if too_large is not None:
            return _errors({"payload": [too_large]}, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        data, errors = agent_request.read(body, self.message)
        if data is None:
            return _errors(errors)
        # A join has no node yet: its token is checked by the service.
        if isinstance(request.auth, Node) and data["node"] != request.auth.name:
            services.refuse_impersonation(request.auth, data["node"], request.path)
            return Response(
                {"errors": {"node": [f"this {_proof(request)} belongs to {request.auth.name}"]}},
                status=status.HTTP_403_FORBIDDEN,
            )
        return data

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        response[agent_request.SERVED_BY] = "django"
        return response


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
        data = self.parse(request)
        if isinstance(data, Response):
            return data
        node = services.register(request.auth, data, peer_address(request))
        return Response({"node": node.name, "state": services.effective_state(node)})


class HeartbeatView(AgentView):
    message = Heartbeat

    @extend_schema(
        request={"application/json": json_schema(Heartbeat)},
        responses={200: json_schema(Answer)},
    )
    def post(self, request: Request) -> Response:
        data = self.parse(request)
        if isinstance(data, Response):
            return data
        return Response(heartbeats.heartbeat(request.auth, data))


class JoinView(AgentView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    message = Join

    @extend_schema(
        request={"application/json": json_schema(Join)},
        responses={200: json_schema(Joined)},
    )
    def post(self, request: Request) -> Response:
        data = self.parse(request)
        if isinstance(data, Response):
            return data
        try:
            credential = services.join(data["node"], data["token"])
        except services.InventoryError as exc:
            return Response({"errors": {"token": [str(exc)]}}, status=status.HTTP_403_FORBIDDEN)
        return Response(msgspec.to_builtins(Joined(node=data["node"], credential=credential)))


class RecordView(APIView):  # type: ignore[misc]  # DRF ships no types
    """What the control plane recorded for the calling node, for `llmgw doctor`.

    Node-scoped: the credential says which node, so a node reads only its own record; a
    `?node=` naming another is refused and audited like a payload naming another. It
    changes nothing (no heartbeat): doctor may call it while the agent runs. Each
    app answers for its own heartbeat section, so the inventory imports none.
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
                **_recorded(node),
                # As the agent last reported them: doctor run beside an install in
                # progress says so instead of "no engine installed".
                "engines": [
                    {k: e.get(k) for k in ("name", "version", "status", "message")}
                    for e in node.engines or []
                    if isinstance(e, dict)
                ],
            }
        )


def _recorded(node: Node) -> dict[str, Any]:
    """What each app keeps of the node's heartbeat sections (its ports and
    fabrics, its shards), asked of the app through its section: inventory
    reads no other app's rows. A shard's model path is inventory's own."""
    out: dict[str, Any] = {}
    for section in sections.registered():
        if section.recorded is not None:
            out.update(section.recorded(node))
    paths = {h.model_name: h.path for h in node.holdings.all()}
    for shard in out.get("shards", []):
        shard["model_path"] = paths.get(shard["model"])
    return out
