"""The model API: a model as it serves (its catalog entry, replicas and
headroom), held counts, placing by hand, placement's explanations, and
the declared resources (the catalog's own change, made here because the
answer is the model as it serves)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from llmgw.accounts.permissions import ActionRoles, IsAdmin, IsOperator
from llmgw.catalog import services as catalog
from llmgw.catalog.api.serializers import CountsSerializer, ResourcesSerializer
from llmgw.catalog.loader import CatalogError
from llmgw.catalog.models import Model
from llmgw.inventory.api import filters
from llmgw.inventory.api.views import FILTERS as NODE_FILTERS
from llmgw.inventory.models import Node
from llmgw.placement import services as placement
from llmgw.placement.explaining import grouped, shortened
from llmgw.serving import placing, weights
from llmgw.serving import services as serving
from llmgw.serving.api.serializers import ModelSerializer


class ModelViewSet(ActionRoles, viewsets.GenericViewSet):  # type: ignore[misc]  # DRF ships no types
    serializer_class = ModelSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    # Held counts and placing are day-to-day operations; a model's declared
    # resources are the catalog's, which only an admin changes.
    action_roles = {"partial_update": IsOperator, "place": IsOperator, "resources": IsAdmin}

    def get_queryset(self) -> QuerySet[Model]:
        if self.action in ("explain", "headroom", "place"):
            # Only to answer 404: the services read what they need.
            return Model.objects.all()
        return (
            Model.objects.prefetch_related(
                "profiles", "replicas__profile", "replicas__shards__node"
            )
            # Each model's held summary reads these; a record's explanation is explain's.
            .select_related("held_state", "last_placement")
            .defer("last_placement__explanation")
        )

    @extend_schema(parameters=NODE_FILTERS)
    def list(self, request: Request) -> Response:
        """Every model. With node filters (`ctl status --domain rack=r01`),
        weights_by_fabric counts only the nodes they pick: the fleet's
        holders under a rack's status read as that rack's."""
        context = self.get_serializer_context()
        if any(name in request.query_params for name in filters.FILTERS):
            try:
                query = filters.parse(request.query_params, [], paged=False)
            except filters.BadParameter as exc:
                return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
            nodes = filters.filtered(Node.objects.all(), query, timezone.now())
            picked = set(nodes.values_list("name", flat=True))
            context["weights_by_fabric"] = weights.load(within=picked)
        return Response(self.get_serializer(self.get_queryset(), many=True, context=context).data)

    def retrieve(self, request: Request, name: str) -> Response:
        data = dict(self.get_serializer(self.get_object()).data)
        data["headroom"] = placement.headroom(name)
        return Response(data)

    @extend_schema(request=CountsSerializer, responses=ModelSerializer)
    def partial_update(self, request: Request, name: str) -> Response:
        body = CountsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self.get_object()
        try:
            serving.set_counts(
                name,
                body.validated_data.get("always_running"),
                body.validated_data.get("under_load"),
            )
        except serving.CountRefused as refused:
            ex = refused.explanation
            return Response(
                {"detail": str(refused), "explanation": grouped(ex) if ex else ex},
                status=status.HTTP_409_CONFLICT,
            )
        return self.retrieve(request, name)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "nodes",
                OpenApiTypes.STR,
                description='"all" (the default) or how many nodes to name a reason; '
                "each reason keeps its count",
            )
        ],
        responses=serializers.DictField(),
    )
    @action(detail=True, methods=["get"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def explain(self, request: Request, name: str) -> Response:
        self.get_object()
        most = request.query_params.get("nodes", "all")
        if most != "all" and not (most.isascii() and most.isdigit() and len(most) <= 6):
            return Response(
                {"detail": f'nodes: "all" or a whole number, not {most!r}'},
                status=status.HTTP_400_BAD_REQUEST,
            )
        data = placing.explain(name)
        # Its reasons said once each (`grouped`), as ctl and the console show them.
        return Response(grouped(data if most == "all" else shortened(data, int(most))))

    @extend_schema(responses=serializers.DictField())
    @action(detail=True, methods=["get"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def headroom(self, request: Request, name: str) -> Response:
        self.get_object()
        return Response({"model": name, "headroom": placement.headroom(name)})

    @extend_schema(request=None, responses=serializers.DictField())
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def place(self, request: Request, name: str) -> Response:
        """Place one more replica now, held: always_running rises to count it
        (the answer says so), so the reconciler keeps it. A refusal names
        every node's reason; a placement names where, and explain the rest."""
        self.get_object()
        replica, result, counts = serving.place_by_hand(name)
        # A refusal says why on every node at once; a placement says where,
        # and leaves every node's reason to explain: judging 5,000 nodes
        # cost as much as the placement itself, on every one.
        data = placement.explanation_data(result, judge_nodes=replica is None)
        code = status.HTTP_201_CREATED if replica else status.HTTP_409_CONFLICT
        return Response(
            {
                **data,
                "replica": replica.pk if replica else None,
                "always_running": {"before": counts["before"], "after": counts["after"]},
                "held": counts["held"],
            },
            status=code,
        )

    @extend_schema(request=ResourcesSerializer, responses=ModelSerializer)
    @action(detail=True, methods=["post"])  # type: ignore[untyped-decorator]  # DRF ships no types
    def resources(self, request: Request, name: str) -> Response:
        body = ResourcesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self.get_object()
        try:
            catalog.set_resources(
                name,
                body.validated_data.get("memory_gb"),
                body.validated_data.get("cpu_cores"),
                body.validated_data.get("profile"),
            )
        except CatalogError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(self.get_serializer(self.get_queryset().get(name=name)).data)
