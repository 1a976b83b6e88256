from django.contrib import admin
from django.urls import include, path

from teams.api.site import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("teams.urls")),
]
