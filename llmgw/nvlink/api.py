"""/api/v1/nvlink: each multi-node NVLink domain, its trays and cards, and
what keeps each tray out of placement."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsViewer
from llmgw.nvlink import services


class NvlinkView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(responses=serializers.DictField())
    def get(self, request: Request) -> Response:
        return Response(services.overview())
