from django.urls import path

from llmgw.console import data, facility_page, views

urlpatterns = [
    path("", views.cluster, name="cluster"),
    path("nodes/<str:name>", views.node, name="console-node"),
    path("held", views.held, name="console-held"),
    path("gpus", views.gpus, name="console-gpus"),
    path("facility", facility_page.facility, name="console-facility"),
    path("console/api/nodes/<str:name>", data.node_detail, name="console-node-data"),
    path("console/api/gpus", data.fleet_gpus, name="console-gpus-data"),
    path("console/api/ports", data.port_counters, name="console-ports-data"),
    path("console/api/promql", data.promql, name="console-promql"),
]

# Mounted under /admin/ by llmgw/urls.py, before Django admin's catch-all.
admin_urlpatterns = [
    path("fabrics", views.fabrics, name="console-fabrics"),
    path("nvlink", views.nvlink, name="console-nvlink"),
]
