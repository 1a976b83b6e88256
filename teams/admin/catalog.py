"""Site-wide settings that belong to no team: consultants and model prices."""

from django.contrib import admin, messages

from teams import selectors
from teams.admin.forms import ConsultantProfileForm
from teams.admin.scoping import SuperuserOnlyAdmin
from teams.integrations import consultations
from teams.models import (
    ConsultantProfile,
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
