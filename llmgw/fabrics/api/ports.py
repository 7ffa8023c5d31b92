"""/api/v1/fabrics/ports?node=NAME: a node's InfiniBand and RoCE ports as
the fabrics app keeps them (state, rate, the fabric declared for each
and the physical fabric it was found on). What `ctl node` prints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsViewer
from llmgw.fabrics.models import Port
from llmgw.inventory.models import Node


class BlankIsUnknown(serializers.CharField):  # type: ignore[misc]  # DRF ships no types
    """Text the agent did not send is stored as ""; it is unknown (null),
    not empty."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_null=True, read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str | None:
        return str(value) or None


class PortSerializer(serializers.ModelSerializer):  # type: ignore[misc]  # DRF ships no types
    link_layer = BlankIsUnknown()
    state = BlankIsUnknown()
    phys_state = BlankIsUnknown()
    rate_text = BlankIsUnknown()
    declared_fabric = BlankIsUnknown(help_text="the fabric agent.yaml names for its adapter")
    physical_fabric = serializers.CharField(
        source="physical_fabric.identity",
        default=None,
        allow_null=True,
        help_text="the physical fabric it was found on; null when none is known",
    )

    class Meta:
        model = Port
        fields = [
            "device",
            "port",
            "link_layer",
            "state",
            "phys_state",
            "rate_gbps",
            "rate_text",
            "declared_fabric",
            "physical_fabric",
            "updated_at",
        ]


class PortListView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(
        parameters=[
            OpenApiParameter("node", OpenApiTypes.STR, required=True, description="the node's name")
        ],
        responses=PortSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        name = request.query_params.get("node")
        if not name:
            return Response({"detail": "node: required"}, status=status.HTTP_400_BAD_REQUEST)
        node = Node.objects.filter(name=name).only("pk").first()
        if node is None:
            return Response({"detail": f"no node named {name!r}"}, status=status.HTTP_404_NOT_FOUND)
        ports = Port.objects.filter(node=node).select_related("physical_fabric")
        return Response(PortSerializer(ports.order_by("device", "port"), many=True).data)
