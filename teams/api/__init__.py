"""Loom's REST API (django-ninja), mounted at /api/: one router per area, the tools
as typed operations, Bearer tokens and staff sessions. `teams.api.site.api` is the
NinjaAPI; the OpenAPI document is /api/openapi.json, the docs /api/docs."""
