import logging
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
# Django must be set up before anything imports models (consumers, routing).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from teams.routing import channel_routes, websocket_urlpatterns  # noqa: E402

if settings.SECRET_KEY_IS_DEFAULT:
    logging.getLogger("loom").warning(
        "LOOM_SECRET_KEY is not set: using the development key. Set it in production."
    )

application = ProtocolTypeRouter(
    {
        # Static files straight from the apps: the embedded mode needs no collectstatic
        # (put a web server or CDN in front in the scaled-out mode).
        "http": ASGIStaticFilesHandler(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
        "channel": channel_routes,
    }
)
