"""/api/v1/facility: every domain with its nodes, hold, cap and draw; and
holding and releasing a domain (operators)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsOperator, IsViewer
from llmgw.facility import services


class FacilityView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(responses=serializers.DictField())
    def get(self, request: Request) -> Response:
        return Response(services.overview())


class HoldRequest(serializers.Serializer):  # type: ignore[misc]  # DRF ships no types
    domain = serializers.CharField(max_length=300)
    reason = serializers.CharField(max_length=500)
    drain = serializers.BooleanField(default=False)


class HoldView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsOperator]

    @extend_schema(request=HoldRequest, responses=serializers.DictField())
    def post(self, request: Request) -> Response:
        body = HoldRequest(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            held = services.hold(
                data["domain"], data["reason"], data["drain"], request.user.get_username()
            )
        except services.FacilityError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(services.hold_data(held), status=status.HTTP_201_CREATED)


class ReleaseView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsOperator]

    @extend_schema(request=None, responses=serializers.DictField())
    def delete(self, request: Request, domain: str) -> Response:
        try:
            key = services.release(domain)
        except services.FacilityError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)
        return Response({"released": key})
