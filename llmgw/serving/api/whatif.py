"""/api/v1/whatif: failing a domain, sweeping every rack and PDU, placing a
model not in the catalog yet. Dry runs on a copy of the fleet: they change
nothing, so reading them is a viewer's right, as explain and headroom are."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts import roles
from llmgw.accounts.permissions import IsViewer
from llmgw.catalog.loader import CatalogError
from llmgw.locations import LEVELS
from llmgw.placement.whatif import SWEPT
from llmgw.serving import whatif

# A catalog file of one model and its profiles is a few kilobytes.
MAX_YAML = 256 * 1024


class PlaceSerializer(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    yaml = serializers.CharField(max_length=MAX_YAML, trim_whitespace=False)


class ViewerDryRun(BasePermission):  # type: ignore[misc]  # DRF ships no types
    """A viewer's, POST included: the POST carries a catalog file to place
    on a copy of the fleet and stores nothing, like explain and headroom."""

    message = IsViewer.message

    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in ("GET", "HEAD", "OPTIONS", "POST") and roles.is_viewer(
            request.user
        )


class WhatIfView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [ViewerDryRun]

    @extend_schema(
        parameters=[OpenApiParameter("fail", str, description="rack=r07, pdu=p3 or a node's name")],
        responses=serializers.DictField(),
    )
    def get(self, request: Request) -> Response:
        domain = request.query_params.get("fail", "").strip()
        if not domain:
            return Response(
                {
                    "fail": [
                        "name a domain to fail: LEVEL=VALUE (site, room, row, rack, pdu) or a node"
                    ]
                },
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            return Response(whatif.fail(domain))
        except whatif.WhatIfError as exc:
            return Response({"fail": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)

    @extend_schema(request=PlaceSerializer, responses=serializers.DictField())
    def post(self, request: Request) -> Response:
        body = PlaceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            return Response(whatif.place(body.validated_data["yaml"]))
        except CatalogError as exc:
            return Response({"yaml": exc.errors}, status=status.HTTP_400_BAD_REQUEST)


class SweepView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(
        parameters=[OpenApiParameter("levels", str, description="comma-separated; rack,pdu")],
        responses=serializers.DictField(),
    )
    def get(self, request: Request) -> Response:
        given = request.query_params.get("levels", "")
        levels = tuple(x.strip() for x in given.split(",") if x.strip()) or SWEPT
        unknown = [x for x in levels if x not in LEVELS]
        if unknown:
            return Response(
                {"levels": [f"unknown level {x!r}: expected {', '.join(LEVELS)}" for x in unknown]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response(whatif.sweep(levels))
