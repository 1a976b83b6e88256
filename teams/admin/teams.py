"""What a PM edits: teams (with their agents and anchors inline), agents, anchors
and the PM requests they answer."""

import json

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from teams import selectors, services
from teams.admin.forms import (
    AgentForm,
    AgentInlineForm,
    PMRequestAnswerForm,
    TeamActionForm,
    TeamForm,
    budget_formfield,
)
from teams.admin.fragments import fragment
from teams.admin.scoping import HistoryInline, ScopedChoicesMixin, TeamScopedAdmin
from teams.conversation import phase_guide, pm_requests
from teams.errors import LoomError
from teams.history import cloning
from teams.integrations import model_endpoints
from teams.lib import endpoints
from teams.models import (
    Agent,
    Anchor,
    AnchorRevision,
    Message,
    PMRequest,
    Team,
)
from teams.run import steering, team_actions
from teams.run.drift import drift_report
from teams.run.lifecycle import TeamAction
from teams.web import charts
from teams.web.presentation import agent_drift, money_tables


class BudgetFieldsMixin:
    """A cost budget takes ASCII dollars only, never negative (forms.BudgetField)."""

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "max_cost_usd":
            return budget_formfield(db_field, **kwargs)
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class AgentInline(BudgetFieldsMixin, ScopedChoicesMixin, admin.TabularInline):
    model = Agent
    form = AgentInlineForm
    extra = 0
    fields = ("name", "role", "model", "max_tokens", "position", "turns", "drift_score")
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


class EvalTeamFilter(admin.SimpleListFilter):
    """Teams an eval run made (one per case and repeat), or the others."""

    title = "made by an eval"
    parameter_name = "eval"

    def lookups(self, request, model_admin):
        return (("yes", "Yes"), ("no", "No"))

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(eval_case__isnull=self.value() == "no")
        return queryset


@admin.register(Team)
class TeamAdmin(BudgetFieldsMixin, TeamScopedAdmin):
    form = TeamForm
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
    list_filter = ("status", EvalTeamFilter)
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
        "effective_phase_guide",
    )
    fieldsets = (
        (None, {"fields": ("slug", "name", "goal", "plan", "phases", "workspace", "managers")}),
        ("Budgets", {"fields": ("max_turns", "max_cost_usd")}),
        ("A2A", {"fields": ("a2a",)}),
        (
            "What the agents read and may do",
            {
                "fields": (
                    "phase_guide",
                    "effective_phase_guide",
                    "tool_access",
                    "tool_approvals",
                    "consultants",
                    "max_anchors",
                    "anchor_value_limit",
                )
            },
        ),
        (
            "When the team asks for help (stuck: 0 turns a check off)",
            {"fields": ("max_exchanges", "max_pass_rounds", "max_phase_turns")},
        ),
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

    @admin.display(description="phase lines as agents read them")
    def effective_phase_guide(self, obj):
        if obj.pk is None:
            return "—"
        text = json.dumps(phase_guide.effective_guide(obj), indent=2, ensure_ascii=False)
        return format_html("<pre>{}</pre>", text)

    filter_horizontal = ("managers", "consultants")
    inlines = (AgentInline, AnchorInline)
    actions = ("start_teams", "pause_teams", "resume_teams", "run_again", "set_model")
    action_form = TeamActionForm

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)  # a new team starts idle
            return
        try:
            services.team_update(
                team=obj, fields=[f for f in form.changed_data if f in services.TEAM_SETTINGS]
            )
        except LoomError as exc:  # a slug taken meanwhile: say so, change nothing
            self.refuse(exc)

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
                report = team_actions.team_pm_action(team=team, action=action)
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
        """A fresh idle copy of each selected team (see teams.history.cloning), linked."""
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

    @admin.action(
        description="Set every agent's model (the model id beside)", permissions=["change"]
    )
    def set_model(self, request, queryset):
        """The same model id for every agent of each selected team, checked first."""
        model = (request.POST.get("model") or "").strip()
        problem = model_endpoints.model_id_problem(model) if model else ""
        if problem:
            self.message_user(request, f"No agent changed: {problem}", messages.ERROR)
            return
        for team in queryset:
            try:
                changed = services.team_model_set(team=team, model=model)
            except LoomError as exc:
                self.message_user(request, f"{team.slug}: {exc.message}", messages.ERROR)
                continue
            said = model or "the default model"
            names = ", ".join(changed) if changed else "none needed it"
            self.message_user(request, f"{team.slug}: {said} for {names}.", messages.SUCCESS)

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
        spend = selectors.team_spend(team=obj)
        return fragment(
            "money.html", unknown_prices=spend["unknown_prices"], tables=money_tables(spend)
        )

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


def save_changed_fields(form) -> None:
    """Save a model form's changes without writing back the fields it did not show:
    an agent's counters and score move while the form is open."""
    obj = form.save(commit=False)
    if obj.pk is None or obj._state.adding:
        obj.save()
    else:
        changed = [f for f in form.changed_data if f in form.fields]
        if isinstance(obj, Agent):  # a new cost budget warns again at 80%, as in the API
            changed += services.agent_cost_rearmed(obj, changed)
        obj.save(update_fields=changed)
    if isinstance(obj, Agent) and {"trajectory", "tactic", "action"} & set(form.changed_data):
        services.agent_intent_publish(obj)  # the live view's drift card, at once


@admin.register(Agent)
class AgentAdmin(BudgetFieldsMixin, TeamScopedAdmin):
    form = AgentForm
    list_display = ("name", "team", "role", "model", "position", "turns", "drift")
    list_filter = ("role", "team")
    search_fields = ("name", "team__slug", "role_prompt")
    list_select_related = ("team",)
    readonly_fields = (
        "endpoint",
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
        (
            None,
            {"fields": ("team", "name", "role", "model", "endpoint", "position", "role_prompt")},
        ),
        ("Hierarchy", {"fields": ("trajectory", "tactic", "action")}),
        ("Drift", {"fields": ("drift_summary", "usage_chart", "drift_report")}),
        ("Context", {"fields": ("team_anchors", "recent_messages", "context_budget_tokens")}),
        ("Budget", {"fields": ("max_cost_usd",)}),
        ("Steer (the PM, in the run)", {"fields": ("speak_next", "nudge", "take_seat")}),
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
        if change:
            self._steer(request, obj, form.cleaned_data)

    def _steer(self, request, agent, data) -> None:
        """The steering fields call the same services as the live view and the API."""
        steps = [
            (data.get("speak_next"), steering.team_next_speaker_set, {"team": agent.team}),
            ((data.get("nudge") or "").strip(), steering.agent_nudge, {"text": data.get("nudge")}),
            (
                (data.get("take_seat") or "").strip(),
                steering.agent_seat_take,
                {"text": data.get("take_seat")},
            ),
        ]
        for wanted, service, kwargs in steps:
            if not wanted:
                continue
            try:
                service(agent=agent, user=request.user, **kwargs)
            except LoomError as exc:
                self.refuse(exc)
        said = [
            words
            for wanted, words in zip(
                [s[0] for s in steps],
                ["speaks next", "is nudged", "has a turn written by you"],
                strict=True,
            )
            if wanted
        ]
        if said:
            self.message_user(request, f"{agent.name} {', and '.join(said)}.")

    @admin.display(description="endpoint")
    def endpoint(self, obj):
        """Where its model's calls go, and why they cannot be made now, if so."""
        if obj.pk is None:
            return "—"
        model = obj.effective_model
        route = endpoints.route(model)
        if route.endpoint is None:
            return route.problem or "none: the offline model runs in Loom"
        said = f"{route.endpoint.name} ({route.endpoint.api} API"
        said += ", local)" if route.endpoint.local else ")"
        said += f", model {route.model}"
        problem = model_endpoints.model_id_problem(model)
        return f"{said} ⚠ {problem}" if problem else said

    @admin.display(description="drift")
    def drift(self, obj):
        d = agent_drift(obj)
        return f"{'⚠ ' if d['flagged'] else ''}{d['score']} · {d['meaning']}"

    @admin.display(description="drift score")
    def drift_summary(self, obj):
        """The score and what it means, the hierarchy, the chain breaks and the advice."""
        if obj.pk is None:
            return "—"
        return fragment("drift_summary.html", d=agent_drift(obj))

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


@admin.register(PMRequest)
class PMRequestAdmin(TeamScopedAdmin):
    list_display = ("id", "team", "agent", "status", "question", "created_at", "answered_at")
    list_filter = ("status", "team")
    search_fields = ("question", "answer")
    list_select_related = ("team", "agent")
    form = PMRequestAnswerForm
    readonly_fields = (
        "team",
        "agent",
        "turn",
        "kind",
        "question",
        "status",
        "tool_name",
        "arguments_shown",
        "approved_arguments",
        "note",
        "answered_by",
        "answered_at",
    )
    fields = ("team", "agent", "kind", "question", "status", "answer", "answered_by", "answered_at")

    def has_add_permission(self, request):
        return False

    def get_fields(self, request, obj=None):
        if obj is not None and obj.kind == PMRequest.Kind.APPROVAL:
            if obj.status == PMRequest.Status.OPEN:
                return (*self.fields[:4], "tool_name", "answer", "note", "edited_arguments")
            return (*self.fields, "tool_name", "arguments_shown", "approved_arguments", "note")
        if obj is not None and obj.status == PMRequest.Status.OPEN:
            return (*self.fields, "pin_as")
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.status != PMRequest.Status.OPEN:
            return (*self.readonly_fields, "answer")
        return tuple(f for f in self.readonly_fields if f != "note")

    @admin.display(description="Arguments")
    def arguments_shown(self, obj):
        return format_html("<pre>{}</pre>", obj.arguments_json)

    def save_model(self, request, obj, form, change):
        try:
            pm_requests.pm_request_answer(
                request_id=obj.pk,
                answer=form.cleaned_data["answer"],
                user=request.user,
                pin_as=form.cleaned_data.get("pin_as", ""),
                note=form.cleaned_data.get("note", ""),
                arguments=form.cleaned_data.get("arguments"),
            )
        except LoomError as exc:  # e.g. a budget answer that is no budget
            self.refuse(exc)
        obj.refresh_from_db()
        team = Team.objects.get(pk=obj.team_id)
        # Said as it is: a budget's "Stop" leaves the team paused.
        now = (
            "resumes"
            if team.status == Team.Status.RUNNING
            else f"is {team.get_status_display().lower()}"
        )
        self.message_user(request, f"Answer sent; team {team.slug} {now}.")
