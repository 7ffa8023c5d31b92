"""Operator REST API over the inventory."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from llmgw.accounts.permissions import ActionRoles, IsOperator
from llmgw.inventory import services
from llmgw.inventory.api.serializers import CordonSerializer, LabelsSerializer, NodeSerializer
from llmgw.inventory.models import Node


class NodeViewSet(ActionRoles, viewsets.ReadOnlyModelViewSet):
    serializer_class = NodeSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    action_roles = {"cordon": IsOperator, "uncordon": IsOperator, "labels": IsOperator}

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.prefetch_related("filesystems", "gpus", "holdings")

    def get_serializer_context(self) -> dict[str, object]:
        return {**super().get_serializer_context(), "now": timezone.now()}

    def _changed(self, request: Request, name: str, change: object) -> Response:
        self.get_object()  # 404 for a node that does not exist, before any change
        try:
            change()  # type: ignore[operator]
        except services.InventoryError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        node = self.get_queryset().get(name=name)
        return Response(self.get_serializer(node).data)

    @extend_schema(request=CordonSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, name: str) -> Response:
        body = CordonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.cordon(name, body.validated_data["reason"], actor)
        )

    @extend_schema(request=CordonSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, name: str) -> Response:
        body = CordonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.uncordon(name, actor, body.validated_data["reason"])
        )

    @extend_schema(request=LabelsSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def labels(self, request: Request, name: str) -> Response:
        body = LabelsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request.user.get_username()
        return self._changed(
            request, name, lambda: services.set_labels(name, body.validated_data["labels"], actor)
        )
