from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsViewer
from llmgw.fabrics import overview
from llmgw.fabrics.models import FabricMap, PhysicalFabric


class FabricListView(APIView):
    permission_classes = [IsViewer]

    @extend_schema(responses=serializers.DictField())
    def get(self, request: Request) -> Response:
        return Response(overview.build())


class TopologyView(APIView):
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
