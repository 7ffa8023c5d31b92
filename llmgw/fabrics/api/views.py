from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsOperator, IsViewer
from llmgw.fabrics import fabric_test, overview
from llmgw.fabrics.models import FabricMap, PhysicalFabric


class FabricListView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(responses=serializers.DictField())
    def get(self, request: Request) -> Response:
        return Response(overview.build())


class TopologyView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(responses=serializers.DictField())
    def get(self, request: Request, pk: int) -> Response:
        fabric = get_object_or_404(PhysicalFabric, pk=pk)
        fabric_map = FabricMap.objects.filter(fabric=fabric).first()
        if fabric_map is None or fabric_map.analysis is None:
            return Response(
                {
                    "fabric": fabric.identity,
                    "map": None,
                    "error": fabric_map.error if fabric_map else "not mapped yet",
                },
                status=404,
            )
        return Response(
            {
                "fabric": fabric.identity,
                "taken_at": fabric_map.taken_at,
                "source_node": fabric_map.source_node,
                "error": fabric_map.error or None,
                "error_line": fabric_map.error_line,
                "map": fabric_map.analysis,
            }
        )


class FabricTestRequest(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    a = serializers.CharField(max_length=253)
    b = serializers.CharField(max_length=253)
    duration_s = serializers.IntegerField(min_value=1, max_value=20, default=5)
    size = serializers.IntegerField(min_value=1, max_value=1 << 30, default=65536)


class FabricTestView(APIView):  # type: ignore[misc]  # DRF ships no types
    """Run ib_write_bw between two nodes rail by rail, through their agents.
    It answers when the last rail is done (seconds a rail), so the caller
    waits; an operator's action, as it loads the links it measures."""

    permission_classes = [IsOperator]

    @extend_schema(request=FabricTestRequest, responses=serializers.DictField())
    def post(self, request: Request) -> Response:
        given = FabricTestRequest(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        try:
            result = fabric_test.run(
                data["a"],
                data["b"],
                duration_s=data["duration_s"],
                size=data["size"],
                actor=request.user.get_username(),
            )
        except fabric_test.Refused as exc:
            return Response({"detail": f"fabric test refused: {exc}"}, status=409)
        return Response(result)
