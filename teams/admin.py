import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from teams import charts, cloning, consultations, conversation, pm_requests, selectors, services
from teams.drift import drift_report
from teams.errors import LoomError
from teams.lifecycle import TeamAction
from teams.models import (
    Agent,
    Anchor,
    AnchorRevision,
    ApiToken,
    ConsultantProfile,
    Consultation,
    Keeper,
    KeeperEntry,
    Message,
    ModelPrice,
    PMRequest,
    Query,
    Team,
    Turn,
    TurnStep,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WorkspaceFile,
)
from teams.views import agent_drift
from teams.webhooks import (
    WEBHOOK_SETTINGS,
    delivery_retry,
    webhook_create,
    webhook_delete,
    webhook_update,
)
from teams.workspace import file_read as workspace_file_read

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
}

# The "PM" group (made by `manage.py loom_demo`): what the console is for, per the
# README: run and edit teams, agents and anchors, read their history, answer PM
# requests, make and revoke their teams' API tokens. Staff in this group see only
# the teams they manage.
PM_GROUP = "PM"
PM_PERMISSIONS = (
    "view_team",
    "change_team",
    "view_agent",
    "change_agent",
    "view_anchor",
    "change_anchor",
    "view_message",
    "view_turn",
    "view_turnstep",
    "view_query",
    "view_keeper",
    "view_keeperentry",
    "view_anchorrevision",
    "view_pmrequest",
    "change_pmrequest",
    "view_apitoken",
    "add_apitoken",
    "change_apitoken",
    "view_consultation",
    "view_workspacefile",
    "view_webhook",
    "add_webhook",
    "change_webhook",
    "delete_webhook",
    "view_webhookdelivery",
)


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


class TeamScopedAdmin(ScopedChoicesMixin, admin.ModelAdmin):
    """A teams-app admin whose lists, pages, actions, filters and choices show only
    the rows of the teams the user may see (TEAM_PATHS[model] leads to the team)."""

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
    """Rows that record what happened: visible, never edited by hand."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class HistoryInline(ScopedChoicesMixin, admin.TabularInline):
    """Inline rows of history: shown, never added, changed or deleted here."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    def has_add_permission(self, request, obj=None):
        return False


class AgentInline(ScopedChoicesMixin, admin.TabularInline):
    model = Agent
    extra = 0
    fields = ("name", "role", "model", "position", "turns", "drift_score")
    readonly_fields = ("turns", "drift_score")
    show_change_link = True


class AnchorInline(ScopedChoicesMixin, admin.TabularInline):
    model = Anchor
    extra = 0
    fields = ("key", "value", "updated_by", "updated_at")
    readonly_fields = ("updated_by", "updated_at")


def delete_row(request, row) -> None:
    """Delete as the services do: an anchor's deletion joins its history."""
    if isinstance(row, Anchor):
        services.anchor_delete(team=row.team, key=row.key, changed_by=pm_label(request))
    else:
        row.delete()


def pm_label(request) -> str:
    return f"pm ({request.user.get_username()})"


def anchor_save_from(request, anchor: Anchor) -> Anchor:
    """An anchor edited in the admin, saved as every anchor is: a revision kept, the
    person named as its author."""
    return services.anchor_save(
        team=anchor.team,
        key=anchor.key,
        value=anchor.value,
        changed_by=pm_label(request),
    )


@admin.register(Team)
class TeamAdmin(TeamScopedAdmin):
    # Few, narrow columns: the list fits a laptop's screen beside the admin's sidebar.
    list_display = (
        "slug",
        "name",
        "status",
        "phase_name",
        "turns_of_budget",
        "cost_of_budget",
        "live_link",
        "updated_at",
    )
    list_filter = ("status",)
    search_fields = ("slug", "name", "goal")
    prepopulated_fields = {"slug": ("name",)}
    # Live state is shown, never edited: it changes through the actions (services)
    # only, so a stale form cannot write an old status, phase or count back.
    readonly_fields = (
        "status",
        "phase_name",
        "turn_count",
        "spent_usd",
        "live_link",
        "usage_totals",
        "created_at",
        "updated_at",
        "where_the_money_goes",
        "tokens_by_agent",
    )
    fieldsets = (
        (None, {"fields": ("slug", "name", "goal", "plan", "phases", "workspace", "managers")}),
        ("Budgets", {"fields": ("max_turns", "max_cost_usd")}),
        ("Where the money goes", {"fields": ("where_the_money_goes", "tokens_by_agent")}),
        (
            "Live state",
            {
                "fields": (
                    "status",
                    "phase_name",
                    "turn_count",
                    "spent_usd",
                    "usage_totals",
                    "live_link",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )

    # Who manages a team decides who sees it, and the workspace is a folder on the
    # server: only superusers set either. Only superusers add teams (see
    # has_add_permission).
    superuser_fields = ("managers", "workspace")

    def get_readonly_fields(self, request, obj=None):
        readonly = super().get_readonly_fields(request, obj)
        if request.user.is_superuser:
            return readonly
        return (*readonly, *self.superuser_fields)

    def has_add_permission(self, request):
        return request.user.is_superuser and super().has_add_permission(request)

    @admin.display(description="live view")
    def live_link(self, obj):
        if obj.pk is None:
            return "—"
        return format_html('<a href="{}">watch live ›</a>', reverse("team-live", args=[obj.slug]))

    filter_horizontal = ("managers",)
    inlines = (AgentInline, AnchorInline)
    actions = ("start_teams", "pause_teams", "resume_teams", "run_again")

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)  # a new team starts idle
            return
        try:
            services.team_update(
                team=obj, fields=[f for f in form.changed_data if f in services.TEAM_SETTINGS]
            )
        except LoomError as exc:  # a slug taken meanwhile: say so, change nothing
            self.message_user(request, exc.message, messages.ERROR)

    def save_formset(self, request, form, formset, change):
        # Agents and anchors have live parts a full save would overwrite (an agent's
        # counters, an anchor's history): each changed row goes its own way.
        save_row = {
            Agent: lambda row_form: save_changed_fields(row_form),
            Anchor: lambda row_form: anchor_save_from(request, row_form.instance),
        }.get(formset.model)
        if save_row is None:
            super().save_formset(request, form, formset, change)
            return
        for row_form in formset.forms:
            if row_form in formset.deleted_forms or not row_form.has_changed():
                continue
            if row_form in formset.initial_forms and row_form.instance.pk is None:
                continue  # an id not among this team's rows (tampered): as Django does
            save_row(row_form)
        formset.save(commit=False)  # collects deleted_objects
        for row in formset.deleted_objects:
            delete_row(request, row)

    def _run(self, request, queryset, action: TeamAction):
        # Each team's own message, saying what really happened to it.
        for team in queryset:
            try:
                report = conversation.team_pm_action(team=team, action=action)
            except LoomError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                level = messages.WARNING if report.stopped else messages.SUCCESS
                self.message_user(request, report.text, level)

    @admin.action(description="Start the selected teams")
    def start_teams(self, request, queryset):
        self._run(request, queryset, TeamAction.START)

    @admin.action(description="Pause the selected teams")
    def pause_teams(self, request, queryset):
        self._run(request, queryset, TeamAction.PAUSE)

    @admin.action(description="Resume the selected teams")
    def resume_teams(self, request, queryset):
        self._run(request, queryset, TeamAction.RESUME)

    @admin.action(description="Run again (make a fresh copy)", permissions=["change"])
    def run_again(self, request, queryset):
        """A fresh idle copy of each selected team (see teams.cloning), linked."""
        for team in queryset:
            try:
                clone = cloning.team_clone(
                    team=team, slug=cloning.next_free_slug(team.slug), user=request.user
                )
            except LoomError as exc:
                self.message_user(request, f"{team.slug}: {exc.message}", messages.ERROR)
                continue
            self.message_user(
                request,
                format_html(
                    '{} <a href="{}">Watch it live</a> or <a href="{}">edit it</a>; start it '
                    "when ready.",
                    cloning.made_message(team=clone, source=team),
                    reverse("team-live", args=[clone.slug]),
                    reverse("admin:teams_team_change", args=[clone.pk]),
                ),
                messages.SUCCESS,
            )

    @admin.display(description="phase")
    def phase_name(self, obj):
        return obj.phase

    @admin.display(description="turns", ordering="turn_count")
    def turns_of_budget(self, obj):
        return f"{obj.turn_count} / {obj.max_turns}"

    @admin.display(description="cost", ordering="spent_usd")
    def cost_of_budget(self, obj):
        return f"${obj.spent_usd:.4f} / ${obj.max_cost_usd:.2f}"

    @admin.display(description="input tokens per turn, by agent (the last 120 turns)")
    def tokens_by_agent(self, obj):
        if obj.pk is None:
            return "—"
        recent = (
            obj.turn_set.filter(status__in=["done", "failed"], purpose="conversation")
            .select_related("agent")
            .order_by("-id")[:120]
        )
        return charts.tokens_by_agent(recent)

    @admin.display(description="where the money goes")
    def where_the_money_goes(self, obj):
        if obj.pk is None:
            return "—"
        return money_block(selectors.team_spend(team=obj))

    @admin.display(description="tokens and cost")
    def usage_totals(self, obj):
        if obj.pk is None:
            return "—"
        t = selectors.team_usage_totals(team=obj)
        return (
            f"input {t['input_tokens']:,} · output {t['output_tokens']:,} · "
            f"cache write {t['cache_creation_tokens']:,} · cache read {t['cache_read_tokens']:,}"
            f" · ${t['cost_usd']:.4f}"
        )


def money_block(spend: dict):
    """The team's spend (selectors.team_spend) as small read-only tables."""

    def table(title, rows, columns):
        head = format_html_join("", "<th>{}</th>", ((label,) for label, _ in columns))
        body = format_html_join(
            "",
            "<tr>{}</tr>",
            (
                (format_html_join("", "<td>{}</td>", ((shown(row),) for _, shown in columns)),)
                for row in rows
            ),
        )
        return format_html(
            "<h4>{}</h4><table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
            title,
            head,
            body,
        )

    def tokens(row):
        return f"{row['input_tokens']:,} in · {row['output_tokens']:,} out"

    def cache(row):
        return f"{row['cache_read_tokens']:,} read · {row['cache_creation_tokens']:,} written"

    def usd(row):
        return f"${row['cost_usd']:.4f}"

    usage = [("tokens", tokens), ("cache", cache), ("cost", usd)]
    unknown = format_html_join(
        "",
        '<p class="errornote">⚠ unknown price: {} (counted as free)</p>',
        ((model,) for model in spend["unknown_prices"]),
    )
    return format_html(
        "{}{}{}{}{}",
        unknown,
        table(
            "Per agent",
            spend["agents"],
            [("agent", lambda r: r["agent"]), ("turns", lambda r: r["turns"]), *usage],
        ),
        table(
            "Per phase",
            spend["phases"],
            [("phase", lambda r: r["phase"] or "—"), ("turns", lambda r: r["turns"]), *usage],
        ),
        table(
            "Per tool (model calls besides the turns' own; included above)",
            spend["tools"],
            [
                ("tool", lambda r: r["tool"]),
                ("calls", lambda r: r["calls"]),
                ("tokens", tokens),
                ("cost", usd),
            ],
        ),
        table(
            "What the mechanisms cut (estimates)",
            spend["cuts"],
            [
                ("mechanism", lambda r: r["mechanism"]),
                ("count", lambda r: f"{r['count']:,}"),
                ("tokens kept out", lambda r: f"{r['tokens']:,}"),
                ("saved", lambda r: f"${r['usd']:.4f}"),
            ],
        ),
    )


def save_changed_fields(form) -> None:
    """Save a model form's changes without writing back the fields it did not show:
    an agent's counters and score move while the form is open."""
    obj = form.save(commit=False)
    if obj.pk is None or obj._state.adding:
        obj.save()
    else:
        obj.save(update_fields=[f for f in form.changed_data if f in form.fields])


@admin.register(Agent)
class AgentAdmin(TeamScopedAdmin):
    list_display = ("name", "team", "role", "model", "position", "turns", "drift")
    list_filter = ("role", "team")
    search_fields = ("name", "team__slug", "role_prompt")
    list_select_related = ("team",)
    readonly_fields = (
        "drift",
        "drift_summary",
        "drift_report",
        "usage_chart",
        "team_anchors",
        "recent_messages",
        "turns",
        "context_updates",
        "last_context_update_turn",
        "files_touched",
        "violations",
        "drift_score",
        "created_at",
    )
    fieldsets = (
        (None, {"fields": ("team", "name", "role", "model", "position", "role_prompt")}),
        ("Hierarchy", {"fields": ("trajectory", "tactic", "action")}),
        ("Drift", {"fields": ("drift_summary", "usage_chart", "drift_report")}),
        ("Context", {"fields": ("team_anchors", "recent_messages", "context_budget_tokens")}),
        ("Budget", {"fields": ("max_cost_usd",)}),
        (
            "Metrics",
            {
                "fields": (
                    "turns",
                    "context_updates",
                    "last_context_update_turn",
                    "files_touched",
                    "violations",
                    "drift_score",
                    "created_at",
                )
            },
        ),
    )

    def save_model(self, request, obj, form, change):
        save_changed_fields(form)

    @admin.display(description="drift")
    def drift(self, obj):
        d = agent_drift(obj)
        return f"{'⚠ ' if d['flagged'] else ''}{d['score']} · {d['meaning']}"

    @admin.display(description="drift score")
    def drift_summary(self, obj):
        """The score and what it means, the hierarchy, the chain breaks and the advice."""
        if obj.pk is None:
            return "—"
        d = agent_drift(obj)
        levels = format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>", ((level, value) for level, value in d["hierarchy"])
        )
        breaks = format_html_join("", "<li>{}</li>", ((line,) for line in d["breaks"]))
        return format_html(
            '<div class="drift-summary drift-{}">'
            '<p style="margin:0 0 .4em"><strong class="drift-score" style="font-size:1.4em">{}'
            '</strong>/100 · <strong class="drift-meaning">{}</strong></p>'
            '<dl class="drift-hierarchy" style="margin:0 0 .4em">{}</dl>'
            '<p style="margin:0">chain breaks: {}</p>'
            '<p class="drift-advice" style="margin:.4em 0 0">{}</p></div>',
            d["band"],
            d["score"],
            d["meaning"],
            levels,
            format_html("<ul>{}</ul>", breaks) if d["breaks"] else "none",
            d["recommendation"],
        )

    @admin.display(description="drift report (what the agent reads)")
    def drift_report(self, obj):
        if obj.pk is None:
            return "—"
        return format_html('<pre style="margin:0">{}</pre>', drift_report(obj))

    @admin.display(description="drift score and input tokens per turn")
    def usage_chart(self, obj):
        if obj.pk is None:
            return "—"
        recent = list(obj.turn_set.exclude(status__in=["queued", "running"]).order_by("-id")[:40])
        return charts.drift_and_tokens(reversed(recent))

    @admin.display(description="anchors")
    def team_anchors(self, obj):
        if obj.pk is None:
            return "—"
        anchors = Anchor.objects.filter(team_id=obj.team_id).order_by("key")
        return (
            format_html_join(
                mark_safe("<br>"), "<b>{}</b>: {}", ((a.key, a.value) for a in anchors)
            )
            or "—"
        )

    @admin.display(description="latest messages")
    def recent_messages(self, obj):
        if obj.pk is None:
            return "—"
        latest = Message.objects.filter(author=obj).order_by("-id")[:5]
        return (
            format_html_join(
                mark_safe("<br>"), "[{}] {}", ((m.kind, m.content[:200]) for m in latest)
            )
            or "—"
        )


@admin.register(Message)
class MessageAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = ("id", "team", "kind", "speaker", "recipient", "phase", "short", "created_at")
    list_filter = ("kind", "team", "phase")
    search_fields = ("content", "author__name", "author_label")
    list_select_related = ("team", "author", "recipient")

    @admin.display(description="content")
    def short(self, obj):
        return obj.content[:100]


class TurnStepInline(HistoryInline):
    model = TurnStep
    fields = ("index", "kind", "content", "input_tokens", "output_tokens", "created_at")


@admin.register(Turn)
class TurnAdmin(TeamScopedAdmin):
    # Narrow columns so the list fits a laptop's screen beside the sidebar and filters.
    list_display = (
        "turn",
        "team",
        "agent_name",
        "status_outcome",
        "tokens",
        "cost",
        "duration",
        "started_at",
    )
    list_display_links = ("turn",)
    list_filter = ("status", "outcome", "purpose", "team")
    search_fields = ("agent__name", "team__slug", "error")
    list_select_related = ("team", "agent")
    readonly_fields = (*(f.name for f in Turn._meta.fields), "duration")
    inlines = (TurnStepInline,)

    def changelist_view(self, request, extra_context=None):
        teams = selectors.teams_visible_to(user=request.user)
        for model in selectors.models_without_price(teams=teams):
            self.message_user(
                request,
                f"⚠ unknown price: {model} (its calls were counted as free; add it under "
                "Model prices)",
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)

    @admin.display(description="turn", ordering="id")
    def turn(self, obj):
        inbox = "" if obj.purpose == Turn.Purpose.CONVERSATION else " inbox"
        return f"#{obj.number}{inbox}"

    @admin.display(description="agent", ordering="agent__name")
    def agent_name(self, obj):
        return obj.agent.name

    @admin.display(description="status", ordering="status")
    def status_outcome(self, obj):
        label = obj.get_status_display()
        return f"{label}: {obj.get_outcome_display().lower()}" if obj.outcome else label

    @admin.display(description="tokens in / out")
    def tokens(self, obj):
        return format_html(
            '<span title="{} input, {} read from cache, {} written to cache">{} / {}</span>',
            f"{obj.input_tokens:,}",
            f"{obj.cache_read_tokens:,}",
            f"{obj.cache_creation_tokens:,}",
            f"{obj.input_tokens + obj.cache_read_tokens + obj.cache_creation_tokens:,}",
            f"{obj.output_tokens:,}",
        )

    @admin.display(description="cost", ordering="cost_usd")
    def cost(self, obj):
        return f"${obj.cost_usd:.4f}"

    @admin.display(description="duration")
    def duration(self, obj):
        if obj.started_at and obj.finished_at:
            return f"{(obj.finished_at - obj.started_at).total_seconds():.1f} s"
        return "—"

    def has_add_permission(self, request):
        return False


@admin.register(TurnStep)
class TurnStepAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = (
        "id",
        "turn",
        "index",
        "kind",
        "summary",
        "input_tokens",
        "output_tokens",
        "created_at",
    )
    list_filter = ("kind",)
    list_select_related = ("turn", "turn__agent")

    @admin.display(description="what happened")
    def summary(self, obj):
        parts = []
        for block in obj.content or []:
            if block.get("type") == "text":
                parts.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                parts.append(f"→ {block.get('name')}({block.get('input')})")
            elif block.get("type") == "tool_result":
                parts.append(f"{obj.tool_name}: {block.get('content', '')}")
        text = " ".join(parts)
        return text[:160] + ("…" if len(text) > 160 else "")


@admin.register(Query)
class QueryAdmin(TeamScopedAdmin):
    list_display = ("key", "team", "origin", "target", "status", "hop_count", "expires_at")
    list_filter = ("status", "team")
    search_fields = ("key", "question", "answer")
    list_select_related = ("team", "origin", "target")
    readonly_fields = (
        "key",
        "hop_chain",
        "enrichments",
        "answered_by",
        "answered_at",
        "created_at",
    )
    exclude = ("hops",)

    @admin.display(description="hop chain")
    def hop_chain(self, obj):
        return (
            format_html_join(
                mark_safe("<br>"),
                "{}. {}",
                ((i, text) for i, text in enumerate(obj.hop_lines(), 1)),
            )
            or "—"
        )


class KeeperEntryInline(HistoryInline):
    model = KeeperEntry
    fields = ("position", "role", "content")


@admin.register(Keeper)
class KeeperAdmin(TeamScopedAdmin):
    list_display = ("id", "topic", "team", "agent", "created_at")
    list_filter = ("team",)
    search_fields = ("topic", "index_entry")
    list_select_related = ("team", "agent")
    inlines = (KeeperEntryInline,)


@admin.register(KeeperEntry)
class KeeperEntryAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = ("id", "keeper", "position", "role", "content")
    search_fields = ("content",)
    list_select_related = ("keeper",)


class AnchorRevisionInline(HistoryInline):
    model = AnchorRevision
    fields = ("value", "changed_by", "created_at")


@admin.register(Anchor)
class AnchorAdmin(TeamScopedAdmin):
    list_display = ("key", "team", "value", "updated_by", "updated_at")
    list_filter = ("team",)
    search_fields = ("key", "value")
    list_select_related = ("team",)
    inlines = (AnchorRevisionInline,)

    def get_readonly_fields(self, request, obj=None):
        # A key names the fact; changing it would start another anchor's history.
        return ("team", "key") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        saved = anchor_save_from(request, obj)
        obj.pk, obj.updated_by = saved.pk, saved.updated_by

    def delete_model(self, request, obj):
        delete_row(request, obj)

    def delete_queryset(self, request, queryset):
        for anchor in queryset.select_related("team"):
            delete_row(request, anchor)


@admin.register(AnchorRevision)
class AnchorRevisionAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = ("key", "team", "value", "deleted", "changed_by", "created_at")
    list_filter = ("team", "deleted")
    search_fields = ("key", "value")
    list_select_related = ("team",)


class PMRequestAnswerForm(forms.ModelForm):
    """Answering goes through the service: the answer joins the conversation and the
    team resumes; a request answered meanwhile is a form error, not a second answer."""

    pin_as = forms.CharField(
        label="Pin as anchor",
        required=False,
        max_length=80,
        help_text="A key (e.g. output_format): the answer becomes that anchor, in every "
        "later prompt of the team.",
    )

    class Meta:
        model = PMRequest
        fields = ("answer",)

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and self.instance.status != PMRequest.Status.OPEN:
            raise forms.ValidationError(f"This PM request was already {self.instance.status}.")
        answer = (cleaned.get("answer") or "").strip()
        if not answer:
            self.add_error("answer", "Write the answer the team should get.")
        elif cleaned.get("pin_as"):
            try:
                services.anchor_check(key=cleaned["pin_as"].strip(), value=answer)
            except LoomError as exc:
                self.add_error("pin_as", exc.message)
        return cleaned


@admin.register(PMRequest)
class PMRequestAdmin(TeamScopedAdmin):
    list_display = ("id", "team", "agent", "status", "question", "created_at", "answered_at")
    list_filter = ("status", "team")
    search_fields = ("question", "answer")
    list_select_related = ("team", "agent")
    form = PMRequestAnswerForm
    readonly_fields = ("team", "agent", "turn", "question", "status", "answered_by", "answered_at")
    fields = ("team", "agent", "question", "status", "answer", "answered_by", "answered_at")

    def has_add_permission(self, request):
        return False

    def get_fields(self, request, obj=None):
        if obj is not None and obj.status == PMRequest.Status.OPEN:
            return (*self.fields, "pin_as")
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.status != PMRequest.Status.OPEN:
            return (*self.readonly_fields, "answer")
        return self.readonly_fields

    def save_model(self, request, obj, form, change):
        try:
            pm_requests.pm_request_answer(
                request_id=obj.pk,
                answer=form.cleaned_data["answer"],
                user=request.user,
                pin_as=form.cleaned_data.get("pin_as", ""),
            )
        except LoomError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(request, f"Answer sent; team {obj.team.slug} resumes.")
        obj.refresh_from_db()


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


@admin.register(ConsultantProfile)
class ConsultantProfileAdmin(SuperuserOnlyAdmin):
    """Profiles belong to no team and serve every team: superusers only."""

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
    """What each model's tokens cost (teams.catalog.cost_of): superusers only."""

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


@admin.register(Consultation)
class ConsultationAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = (
        "id",
        "team",
        "agent",
        "profile",
        "status",
        "task_type",
        "cost_usd",
        "duration_seconds",
        "created_at",
    )
    list_filter = ("status", "team")
    search_fields = ("prompt",)
    list_select_related = ("team", "agent", "profile")
    readonly_fields = ("side_by_side",)

    @admin.display(description="the consultants' answers, side by side")
    def side_by_side(self, obj):
        """Every consultation of the same ask (several consultants at once), one column each."""
        batch = Consultation.objects.filter(batch=obj.batch).select_related("profile")
        columns = format_html_join(
            "",
            '<td style="vertical-align:top;min-width:18em"><strong>{}</strong> {} · {} · '
            '${} · {} s<pre style="white-space:pre-wrap">{}</pre></td>',
            (
                (
                    c.profile.name if c.profile_id else "—",
                    c.model,
                    c.status,
                    c.cost_usd,
                    c.duration_seconds if c.duration_seconds is not None else "—",
                    consultations.render(c),
                )
                for c in batch.order_by("profile__name", "id")
            ),
        )
        return format_html("<table><tr>{}</tr></table>", columns)


@admin.register(WorkspaceFile)
class WorkspaceFileAdmin(HistoryAdminMixin, TeamScopedAdmin):
    """The team's files as its agents last wrote them, read-only; the page shows the file
    itself (escaped, its first 100 KB) or that it is binary."""

    list_display = ("path", "team", "size", "agent", "turn_number", "writes", "updated_at")
    list_filter = ("team",)
    search_fields = ("path",)
    list_select_related = ("team", "agent", "turn")
    fields = ("team", "path", "size", "agent", "turn", "writes", "updated_at", "content")
    readonly_fields = fields

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="turn", ordering="turn__number")
    def turn_number(self, obj):
        return obj.turn.number if obj.turn_id else "—"

    @admin.display(description="content")
    def content(self, obj):
        try:
            found = workspace_file_read(obj.team, obj.path)
        except LoomError as exc:
            return f"Not readable now: {exc.message}"
        if found.binary:
            return f"binary, {found.size:,} bytes"
        return format_html(
            '<pre class="workspace-file" style="margin:0;max-height:40em;overflow:auto">{}</pre>{}',
            found.text,
            " (its first 100 KB)" if found.truncated else "",
        )


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ("team", "agent", "name")

    def clean(self):
        data = super().clean()
        team, agent = data.get("team"), data.get("agent")
        if not self.instance.pk and team is None:
            self.add_error(
                "team",
                "A token made here is for a team (account tokens: "
                "manage.py create_api_token --user NAME).",
            )
        if agent is not None and team is not None and agent.team_id != team.id:
            self.add_error("agent", f"Agent {agent.name} is not in team {team.slug}.")
        return data


def shown_once(model_admin, request, title: str, **context) -> TemplateResponse:
    """The page after making a token or a webhook: its secret in this response's body
    only (not in a message, whose cookie is signed, not encrypted; not in the session
    or a redirect), never cached (templates/admin/teams/<model>/created.html)."""
    opts = model_admin.opts
    response = TemplateResponse(
        request,
        f"admin/teams/{opts.model_name}/created.html",
        {
            **model_admin.admin_site.each_context(request),
            "title": title,
            "opts": opts,
            "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
            **context,
        },
    )
    add_never_cache_headers(response)
    return response


@admin.register(ApiToken)
class ApiTokenAdmin(TeamScopedAdmin):
    """Team tokens are made here (the key shown once) and revoked with the action;
    account tokens (a user's, no team) are superusers' to see."""

    form = ApiTokenForm
    list_display = (
        "name",
        "team",
        "agent",
        "user",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("team",)
    search_fields = ("name", "prefix")
    list_select_related = ("team", "agent", "user")
    fields = ("team", "agent", "name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def get_readonly_fields(self, request, obj=None):
        live = ("user", "prefix", "created_at", "last_used_at", "revoked_at")
        return live + (("team", "agent") if obj is not None else ())

    def get_queryset(self, request):
        if request.user.is_superuser:  # account tokens belong to no team
            return admin.ModelAdmin.get_queryset(self, request)
        return super().get_queryset(request)

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            services.api_token_revoke(token=token)
        self.message_user(request, f"{len(queryset)} token(s) revoked.")

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        token, raw_key = services.api_token_create(team=obj.team, agent=obj.agent, label=obj.name)
        obj.pk, obj.prefix, obj.key_hash = token.pk, token.prefix, token.key_hash
        obj._raw_key = raw_key  # for response_add only; never stored

    def response_add(self, request, obj, post_url_continue=None):
        """Show the new key once, in this response's body only: not in a message (the
        messages cookie is signed, not encrypted), the session or a redirect."""
        raw_key = getattr(obj, "_raw_key", None)
        if raw_key is None:
            return super().response_add(request, obj, post_url_continue)
        del obj._raw_key
        return shown_once(
            self, request, "API token created", crumb=obj.name, token=obj, raw_key=raw_key
        )


# --- webhooks --------------------------------------------------------------------


def with_seconds(value) -> str:
    """A time as the admin shows every time (to the second: loomsite/formats)."""
    return date_format(timezone.localtime(value), "DATETIME_FORMAT") if value else "—"


class WebhookForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="POSTed to the URL when they happen, signed with the webhook's secret.",
    )

    class Meta:
        model = Webhook
        fields = ("team", "url", "events", "enabled")


@admin.register(Webhook)
class WebhookAdmin(TeamScopedAdmin):
    """A team's webhooks: made here (the secret shown once), changed (URL, events,
    enabled) and deleted through teams.webhooks; the latest deliveries on the page."""

    form = WebhookForm
    list_display = ("url", "team", "event_list", "enabled", "secret_prefix", "created_at")
    list_filter = ("enabled", "team")
    search_fields = ("url",)
    list_select_related = ("team",)
    fields = (
        "team",
        "url",
        "events",
        "enabled",
        "secret_prefix",
        "created_at",
        "recent_deliveries",
    )

    def get_readonly_fields(self, request, obj=None):
        live = ("secret_prefix", "created_at", "recent_deliveries")
        return live + (("team",) if obj is not None else ())

    @admin.display(description="events")
    def event_list(self, obj):
        return ", ".join(obj.events or [])

    @admin.display(description="latest deliveries")
    def recent_deliveries(self, obj):
        if obj.pk is None:
            return "—"
        rows = obj.deliveries.order_by("-id")[:10]
        log_url = (
            reverse("admin:teams_webhookdelivery_changelist") + f"?webhook__id__exact={obj.pk}"
        )
        lines = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    d.pk,
                    d.event,
                    d.status,
                    d.attempts,
                    d.last_status_code or "—",
                    with_seconds(d.created_at),
                )
                for d in rows
            ),
        )
        return format_html(
            "<table><tr><th>id</th><th>event</th><th>status</th><th>attempts</th>"
            "<th>last answer</th><th>created</th></tr>{}</table>"
            '<p><a href="{}">the whole delivery log ›</a></p>',
            lines,
            log_url,
        )

    def save_model(self, request, obj, form, change):
        try:
            if change:
                fields = [f for f in form.changed_data if f in WEBHOOK_SETTINGS]
                webhook_update(webhook=obj, fields=fields)
                return
            webhook, secret = webhook_create(
                team=obj.team, url=obj.url, events=obj.events, enabled=obj.enabled
            )
        except LoomError as exc:  # a duplicate made meanwhile: say so, change nothing
            self.message_user(request, exc.message, messages.ERROR)
            return
        obj.pk, obj.secret_prefix = webhook.pk, webhook.secret_prefix
        obj.created_at = webhook.created_at
        obj._secret = secret  # for response_add only; stored encrypted

    def delete_model(self, request, obj):
        webhook_delete(webhook=obj)

    def delete_queryset(self, request, queryset):
        for webhook in queryset:
            webhook_delete(webhook=webhook)

    def response_add(self, request, obj, post_url_continue=None):
        """Show the new secret once, in this response's body only (as API tokens)."""
        secret = getattr(obj, "_secret", None)
        if secret is None:
            if obj.pk is None:  # not made: back to the list, where the error shows
                return HttpResponseRedirect(reverse("admin:teams_webhook_changelist"))
            return super().response_add(request, obj, post_url_continue)
        del obj._secret
        return shown_once(
            self, request, "Webhook created", crumb=obj.url, webhook=obj, secret=secret
        )


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(HistoryAdminMixin, TeamScopedAdmin):
    """The delivery log: what was sent where, how it went; "Send again" re-queues a
    failed delivery (for whoever may change the team's webhooks)."""

    list_display = (
        "id",
        "webhook",
        "event",
        "status",
        "attempts",
        "last_status_code",
        "error",
        "created_at",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "event", "webhook")
    search_fields = ("last_error",)
    list_select_related = ("webhook", "webhook__team")
    fields = (
        "webhook",
        "event",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "created_at",
        "next_attempt_at",
        "delivered_at",
        "body",
    )
    readonly_fields = fields
    actions = ("send_again",)

    @admin.display(description="last error")
    def error(self, obj):
        return obj.last_error[:120] + ("…" if len(obj.last_error) > 120 else "")

    @admin.display(description="body sent")
    def body(self, obj):
        return format_html(
            '<pre style="white-space:pre-wrap;margin:0">{}</pre>',
            json.dumps(obj.payload, indent=2, ensure_ascii=False),
        )

    def has_resend_permission(self, request):
        return request.user.has_perm("teams.change_webhook")

    @admin.action(description="Send the selected failed deliveries again", permissions=["resend"])
    def send_again(self, request, queryset):
        sent = 0
        for delivery in queryset:
            try:
                delivery_retry(delivery=delivery)
            except LoomError as exc:
                self.message_user(request, exc.message, messages.WARNING)
            else:
                sent += 1
        if sent:
            self.message_user(request, f"{sent} deliver{'y' if sent == 1 else 'ies'} queued again.")
