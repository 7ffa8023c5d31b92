"""Operator REST API over the inventory."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from llmgw.accounts.permissions import ActionRoles, IsOperator
from llmgw.inventory import services
from llmgw.inventory.api import filters
from llmgw.inventory.api.node_list import node_rows
from llmgw.inventory.api.serializers import (
    CordonSerializer,
    LabelsSerializer,
    NodePageSerializer,
    NodeSerializer,
    SummarySerializer,
)
from llmgw.inventory.api.summary import summary
from llmgw.inventory.models import Node

FILTERS = [
    OpenApiParameter(
        "state", OpenApiTypes.STR, many=True, description="Ready, NotReady or Cordoned"
    ),
    OpenApiParameter("class", OpenApiTypes.STR, many=True, description="GPU class: H100-80GB"),
    OpenApiParameter(
        "domain",
        OpenApiTypes.STR,
        many=True,
        description="LEVEL=VALUE on the labels llmgw.io/<level> (site, room, row, rack, pdu), "
        "or a node name; values of one level are alternatives, levels narrow",
    ),
    OpenApiParameter("search", OpenApiTypes.STR, description="part of the node's name"),
]
PAGING = [
    OpenApiParameter("limit", OpenApiTypes.INT, description=f"at most {filters.MAX_LIMIT}"),
    OpenApiParameter("offset", OpenApiTypes.INT),
    OpenApiParameter(
        "fields", OpenApiTypes.STR, many=True, description="only these fields of each node"
    ),
]


def _refused(exc: filters.BadParameter) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)


def _link(request: Request, offset: int | None) -> str | None:
    if offset is None:
        return None
    url = request.build_absolute_uri()
    link: str = (
        remove_query_param(url, "offset")
        if offset == 0
        else replace_query_param(url, "offset", offset)
    )
    return link


class NodeViewSet(ActionRoles, viewsets.ReadOnlyModelViewSet):  # type: ignore[misc]  # DRF ships no types
    serializer_class = NodeSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    action_roles = {"cordon": IsOperator, "uncordon": IsOperator, "labels": IsOperator}

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.prefetch_related("filesystems", "gpus", "holdings")

    def get_serializer_context(self) -> dict[str, object]:
        return {**super().get_serializer_context(), "now": timezone.now()}

    @extend_schema(parameters=[*FILTERS, *PAGING], responses=NodePageSerializer)
    def list(self, request: Request) -> Response:
        """One page of nodes by name, filtered and counted by the database."""
        now = timezone.now()
        try:
            query = filters.parse(request.query_params, list(NodeSerializer.Meta.fields))
        except filters.BadParameter as exc:
            return _refused(exc)
        nodes = filters.filtered(Node.objects.all(), query, now)
        count = nodes.count()
        end = query.offset + query.limit
        rows = node_rows(nodes, query.fields, query.offset, end, now)
        previous = max(0, query.offset - query.limit) if query.offset > 0 else None
        return Response(
            {
                "count": count,
                "next": _link(request, end if end < count else None),
                "previous": _link(request, previous),
                "results": rows,
            }
        )

    @extend_schema(parameters=FILTERS, responses=SummarySerializer)
    @action(detail=False, methods=["get"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def summary(self, request: Request) -> Response:
        """The fleet (or the nodes the filters pick) in a few numbers."""
        now = timezone.now()
        try:
            query = filters.parse(request.query_params, [], paged=False)
        except filters.BadParameter as exc:
            return _refused(exc)
        data: dict[str, Any] = summary(filters.filtered(Node.objects.all(), query, now), now)
        return Response(data)

    def _changed(self, request: Request, name: str, change: object) -> Response:
        self.get_object()  # 404 for a node that does not exist, before any change
        try:
            change()  # type: ignore[operator]
        except services.InventoryError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        node = self.get_queryset().get(name=name)
        return Response(self.get_serializer(node).data)

    @extend_schema(request=CordonSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def cordon(self, request: Request, name: str) -> Response:
        body = CordonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.cordon(name, body.validated_data["reason"], actor)
        )

    @extend_schema(request=CordonSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def uncordon(self, request: Request, name: str) -> Response:
        body = CordonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.uncordon(name, actor, body.validated_data["reason"])
        )

    @extend_schema(request=LabelsSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def labels(self, request: Request, name: str) -> Response:
        body = LabelsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.set_labels(name, body.validated_data["labels"], actor)
        )
