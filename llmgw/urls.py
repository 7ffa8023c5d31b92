from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from llmgw import embedded_db
from llmgw.accounts.views import TokenView, throttled_login
from llmgw.console.urls import admin_urlpatterns as console_admin
from llmgw.health import healthz
from llmgw.inventory.api.urls import agent_urlpatterns
from llmgw.metrics import views as metrics

# The admin index says which database the control plane runs on.
admin.site.index_title = "Site administration · database: " + embedded_db.describe(
    settings.DATABASES["default"], settings.DATABASE_EMBEDDED
)

urlpatterns = [
    path(
        "login/",
        throttled_login(auth_views.LoginView.as_view(template_name="login.html")),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Before Django admin's own: the same page, behind the same throttle.
    path("admin/login/", throttled_login(admin.site.login)),
    # Console drawings live under /admin/; listed first, or Django admin's
    # catch-all would answer them with its own 404.
    path("admin/", include(console_admin)),
    path("admin/", admin.site.urls),
    path("api/agent/v1/", include(agent_urlpatterns)),
    path("api/v1/", include("llmgw.api_urls")),
    path("api/v1/token", TokenView.as_view(), name="api-token"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("metrics/fleet", metrics.fleet, name="metrics-fleet"),
    path("metrics/nodes", metrics.nodes, name="metrics-nodes"),
    path("", include("llmgw.console.urls")),
]
