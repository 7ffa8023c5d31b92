from django.urls import path

from llmgw.inventory.api import agent_certificates, agent_views

agent_urlpatterns = [
    path("join", agent_views.JoinView.as_view(), name="agent-join"),
    path("register", agent_views.RegisterView.as_view(), name="agent-register"),
    path("heartbeat", agent_views.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("record", agent_views.RecordView.as_view(), name="agent-record"),
    path("certificate", agent_certificates.RenewView.as_view(), name="agent-certificate"),
]
