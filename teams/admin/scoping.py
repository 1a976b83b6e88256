"""Who sees what in the admin, and the mixins every teams-app admin is built from."""

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import Q

from teams import selectors
from teams.errors import LoomError
from teams.models import (
    Agent,
    Anchor,
    AnchorRevision,
    ApiToken,
    Consultation,
    Keeper,
    KeeperEntry,
    McpServer,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
    TurnStep,
    Webhook,
    WebhookDelivery,
    WorkspaceFile,
)

# --- who sees what --------------------------------------------------------------
#
# One rule: selectors.teams_visible_to (superusers every team, active staff the teams
# they manage, nobody else). Every teams-app row reaches its team by the path below;
# the admin's lists, change pages, actions, filters and choice lists all go through
# it, so another team's row is as absent as a deleted one.

TEAM_PATHS = {
    Team: "pk",
    Agent: "team",
    Turn: "team",
    TurnStep: "turn__team",
    Query: "team",
    Message: "team",
    Keeper: "team",
    KeeperEntry: "keeper__team",
    Anchor: "team",
    AnchorRevision: "team",
    PMRequest: "team",
    Consultation: "team",
    ApiToken: "team",
    WorkspaceFile: "team",
    Webhook: "team",
    WebhookDelivery: "webhook__team",
    McpServer: "team",
}


def visible_teams_q(request, model) -> Q | None:
    """The condition on `model`'s rows for the request's user, or None when `model`
    belongs to no team."""
    path = TEAM_PATHS.get(model)
    if path is None:
        return None
    return Q(**{f"{path}__in": selectors.teams_visible_to(user=request.user)})


def visible_rows(request, queryset):
    """The rows of `queryset` the request's user may see."""
    condition = visible_teams_q(request, queryset.model)
    return queryset if condition is None else queryset.filter(condition)


class VisibleRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A list filter on a team, agent, turn... offering only the visible ones."""

    def field_choices(self, field, request, model_admin):
        ordering = self.field_admin_ordering(field, request, model_admin)
        condition = visible_teams_q(request, field.related_model)
        return field.get_choices(
            include_blank=False, limit_choices_to=condition or Q(), ordering=ordering
        )


class ScopedChoicesMixin:
    """Foreign-key and many-to-many choices limited to the user's visible teams."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if field is not None and getattr(field, "queryset", None) is not None:
            field.queryset = visible_rows(request, field.queryset)
        return field

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        field = super().formfield_for_manytomany(db_field, request, **kwargs)
        if field is not None and getattr(field, "queryset", None) is not None:
            field.queryset = visible_rows(request, field.queryset)
        return field


class Refused(Exception):
    """A service refused an admin save (TeamScopedAdmin.refuse)."""

    def __init__(self, error: LoomError):
        super().__init__(error.message)
        self.error = error


class TeamScopedAdmin(ScopedChoicesMixin, admin.ModelAdmin):
    """A teams-app admin whose lists, pages, actions, filters and choices show only
    the rows of the teams the user may see (TEAM_PATHS[model] leads to the team).

    A save_model whose service refuses calls `self.refuse(exc)`: the whole edit is
    rolled back (inline rows too), and the form comes back with the user's input and
    the reason as a form error, never "changed successfully"."""

    def refuse(self, error: LoomError):
        raise Refused(error)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except Refused as refused:
            # The edit's transaction was rolled back: show the form again, refused.
            request.loom_refusal = refused.error
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        refusal = getattr(request, "loom_refusal", None)
        if refusal is None:
            return form

        class RefusedForm(form):
            def clean(self):
                cleaned = super().clean()
                field = refusal.field if refusal.field in self.fields else None
                self.add_error(field, refusal.message)
                return cleaned

        RefusedForm.__name__ = form.__name__
        return RefusedForm

    @property
    def team_path(self) -> str:
        return TEAM_PATHS[self.model]

    def get_queryset(self, request):
        return visible_rows(request, super().get_queryset(request))

    def get_list_filter(self, request):
        scoped = []
        for entry in super().get_list_filter(request):
            if isinstance(entry, str):
                field = get_fields_from_path(self.model, entry)[-1]
                if field.is_relation and field.related_model in TEAM_PATHS:
                    entry = (entry, VisibleRelatedFieldListFilter)
            scoped.append(entry)
        return scoped


class HistoryAdminMixin:
    """Rows that record what happened: visible, never edited by hand. Their pages
    offer neither Save nor Delete (a team's deletion still takes them along)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "show_delete": False}
        )


class HistoryInline(ScopedChoicesMixin, admin.TabularInline):
    """Inline rows of history: shown, never added, changed or deleted here."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    def has_add_permission(self, request, obj=None):
        return False


class SuperuserOnlyAdmin(admin.ModelAdmin):
    """Site-wide settings (consultants, prices): superusers only, whatever the
    permissions a staff account was given."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_add_permission(self, request):
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def has_delete_permission(self, request, obj=None):
        return self.has_module_permission(request)
