from django.urls import path

from llmgw.console import views

urlpatterns = [
    path("", views.cluster, name="cluster"),
]
