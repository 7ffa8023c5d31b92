"""/api/v1/replicas: the replicas that run on a node (`?node=NAME`) or of
a model (`?model=NAME`), each with its model's name. What `ctl node`
prints of a node's work: asking every model for its replicas and keeping
those on one node would read the whole fleet's replicas for one node."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from llmgw.accounts.permissions import IsViewer
from llmgw.inventory.models import Node
from llmgw.serving.api.serializers import ReplicaSerializer
from llmgw.serving.models import Replica, Shard


class NodeReplicaSerializer(ReplicaSerializer):
    model = serializers.CharField(source="model.name")

    class Meta(ReplicaSerializer.Meta):
        fields = ["model", *ReplicaSerializer.Meta.fields]


class ReplicaListView(APIView):  # type: ignore[misc]  # DRF ships no types
    permission_classes = [IsViewer]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "node", OpenApiTypes.STR, description="only replicas with a shard on this node"
            ),
            OpenApiParameter("model", OpenApiTypes.STR, description="only this model's replicas"),
        ],
        responses=NodeReplicaSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        # A replica's explanation names every node of the fleet, and a node
        # row carries its telemetry: neither is printed here.
        nodes = Node.objects.only("name", "agent_labels", "operator_labels", "shard_samples")
        replicas = (
            Replica.objects.select_related("model", "profile")
            .defer("explanation")
            .prefetch_related(Prefetch("shards__node", queryset=nodes))
        )
        node_name = request.query_params.get("node")
        if node_name is not None:
            node = Node.objects.filter(name=node_name).only("pk").first()
            if node is None:
                return Response(
                    {"detail": f"no node named {node_name!r}"}, status=status.HTTP_404_NOT_FOUND
                )
            # A multi-node replica is listed once, with every shard it has.
            replicas = replicas.filter(pk__in=Shard.objects.filter(node=node).values("replica"))
        model = request.query_params.get("model")
        if model is not None:
            replicas = replicas.filter(model__name=model)
        data = NodeReplicaSerializer(replicas.order_by("model__name", "created_at"), many=True).data
        return Response(data)
