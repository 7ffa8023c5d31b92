"""Console pages. No domain logic: they read the same services and
serializers the API uses, so a page never says something the API does not."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from llmgw.inventory.api.serializers import NodeSerializer
from llmgw.inventory.models import Node


@login_required
def cluster(request: HttpRequest) -> HttpResponse:
    nodes = Node.objects.prefetch_related("filesystems", "gpus", "holdings")
    rows = NodeSerializer(nodes, many=True, context={"now": timezone.now()}).data
    return render(request, "cluster.html", {"nodes": rows})
