import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
django_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from llmgw.accounts import token_events  # noqa: E402
from llmgw.console.consumers import ConsoleConsumer  # noqa: E402
from llmgw.inventory import listening  # noqa: E402
from llmgw.inventory.api.heartbeat_asgi import heartbeats_first  # noqa: E402
from llmgw.inventory.consumers import AgentStreamConsumer  # noqa: E402
from llmgw.middleware import limit_body  # noqa: E402
from llmgw.serving import keep_warm  # noqa: E402
from llmgw.serving.gateway.app import Gateway, mount  # noqa: E402

websockets = URLRouter(
    [
        path("api/agent/v1/stream", AgentStreamConsumer.as_asgi()),
        # Session auth for the console's pages; the agent stream uses its own
        # credential. A browser sends the session cookie whichever site opens
        # the socket, so the console's is refused unless its Origin is one of
        # ALLOWED_HOSTS (an agent is no browser and sends no cookie).
        path(
            "ws/console",
            AllowedHostsOriginValidator(AuthMiddlewareStack(ConsoleConsumer.as_asgi())),
        ),
    ]
)
# /v1/ (the OpenAI-compatible gateway) is routed before Django: its
# middleware stack costs more per request than the whole proxy.
gateway = Gateway()
# The gateway has its own body limit, in its own (OpenAI's) error shape.
# Heartbeats, the commonest request of all, are stored before Django too:
# what that path cannot store itself goes on to Django as it came.
# The lifespan keeps the process's warm fleet warm (serving.keep_warm) and
# records that the process can hear its fleet (inventory.listening); it
# hears changes to credentials, dropping its copy of them (token_events).
application = ProtocolTypeRouter(
    {
        "http": mount(gateway, heartbeats_first(limit_body(django_app))),
        "websocket": websockets,
        "lifespan": token_events.lifespan(listening.lifespan(keep_warm.lifespan)),
    }
)
