from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from loomsite.health import healthz
from loomsite.metrics import metrics
from teams.api.site import api

# The admin and its login page say Loom, not "Django administration".
admin.site.site_header = "Loom administration"
admin.site.site_title = "Loom admin"
admin.site.index_title = "Teams, agents and everything they did"

urlpatterns = [
    # Browsers ask every page's /favicon.ico; the admin's pages have no icon link.
    path("favicon.ico", RedirectView.as_view(url=static("teams/favicon.svg"), permanent=True)),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("teams.web.urls")),
]
