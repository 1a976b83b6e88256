"""Site-wide settings that belong to no team: consultants, model endpoints and model
prices."""

from django.contrib import admin, messages

from teams import selectors
from teams.admin.forms import ConsultantProfileForm
from teams.admin.scoping import SuperuserOnlyAdmin
from teams.integrations import consultations
from teams.lib.endpoints import BUILTINS
from teams.models import (
    ConsultantProfile,
    ModelEndpoint,
    ModelPrice,
)


@admin.register(ConsultantProfile)
class ConsultantProfileAdmin(SuperuserOnlyAdmin):
    """Profiles belong to no team and serve every team: superusers only."""

    form = ConsultantProfileForm

    list_display = ("name", "provider", "model", "key_status", "enabled")
    list_filter = ("enabled", "provider")
    search_fields = ("name", "model", "strengths")
    fields = (
        "name",
        "provider",
        "model",
        "base_url",
        "a2a_url",
        "key_env",
        "key_status",
        "strengths",
        "extra_prompt",
        "enabled",
    )
    readonly_fields = ("key_status",)

    @admin.display(description="key")
    def key_status(self, obj):
        """Whether the key variable is set now (never the key itself)."""
        if obj.pk is None:
            return "—"
        problem = consultations.key_problem(obj)
        return f"⚠ cannot be asked: {problem}" if problem else "ready"


@admin.register(ModelPrice)
class ModelPriceAdmin(SuperuserOnlyAdmin):
    """What each model's tokens cost (teams.lib.catalog.cost_of): superusers only."""

    list_display = ("model", "input_usd", "output_usd", "cache_write_usd", "cache_read_usd")
    search_fields = ("model",)
    fields = ("model", "input_usd", "output_usd", "cache_write_usd", "cache_read_usd")

    def changelist_view(self, request, extra_context=None):
        # Only for whoever may see the prices: the list names every team's models.
        unknown = selectors.models_without_price() if self.has_view_permission(request) else []
        for model in unknown:
            self.message_user(
                request,
                f"⚠ unknown price: {model} (its calls were counted as free)",
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(SuperuserOnlyAdmin):
    """Where `ENDPOINT/MODEL` ids are called (teams.lib.endpoints): superusers only. The
    built-in endpoints need no row; a row named like one replaces it."""

    list_display = ("name", "api", "base_url", "key_env", "local", "status")
    list_filter = ("api", "local")
    search_fields = ("name", "base_url")
    fields = ("name", "api", "base_url", "key_env", "header_vars", "local", "status")
    readonly_fields = ("status",)

    @admin.display(description="status")
    def status(self, obj):
        """Whether its variables are set now (never their values)."""
        if obj.pk is None:
            return "—"
        problem = obj.as_endpoint().problem()
        return f"⚠ cannot be called: {problem}" if problem else "ready"

    def get_readonly_fields(self, request, obj=None):
        # The name stays: the model ids that name it would lose their endpoint.
        return ("name", *self.readonly_fields) if obj is not None else self.readonly_fields

    def changelist_view(self, request, extra_context=None):
        rows = set(ModelEndpoint.objects.values_list("name", flat=True))
        builtins = [name for name in BUILTINS if name not in rows]
        if builtins and self.has_view_permission(request):
            self.message_user(
                request,
                "Built in (no row needed; add one with the same name to change it): "
                + ", ".join(builtins),
                messages.INFO,
            )
        return super().changelist_view(request, extra_context)
