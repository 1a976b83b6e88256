"""The records of what happened (messages, turns, queries, keepers, consultations,
files): shown, never edited by hand."""

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from teams import selectors
from teams.admin.fragments import fragment
from teams.admin.scoping import HistoryAdminMixin, HistoryInline, TeamScopedAdmin
from teams.errors import LoomError
from teams.files.workspace import file_read as workspace_file_read
from teams.history import cloning, forking, model_requests
from teams.integrations import consultations
from teams.models import (
    AnchorRevision,
    Consultation,
    Keeper,
    KeeperEntry,
    Message,
    Query,
    Turn,
    TurnStep,
    WorkspaceFile,
)


@admin.register(Message)
class MessageAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = ("id", "team", "kind", "speaker", "recipient", "phase", "short", "created_at")
    list_filter = ("kind", "team", "phase")
    search_fields = ("content", "author__name", "author_label")
    list_select_related = ("team", "author", "recipient")

    actions = ("fork_here",)

    @admin.display(description="content")
    def short(self, obj):
        return obj.content[:100]

    @admin.action(description="Fork the team at this message", permissions=["view"])
    def fork_here(self, request, queryset):
        """A new idle team holding the message's team as of the message (teams.history.forking)."""
        if len(queryset) != 1:
            self.message_user(request, "Select one message to fork at.", messages.ERROR)
            return
        message = queryset.select_related("team").first()
        team = message.team
        try:
            fork = forking.team_fork(
                team=team,
                slug=cloning.next_free_slug(team.slug),
                at_message=message.pk,
                user=request.user,
            )
        except LoomError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        self.message_user(
            request,
            format_html(
                '{} <a href="{}">Watch it live</a>; start it when ready.',
                forking.made_message(fork),
                reverse("team-live", args=[fork.slug]),
            ),
            messages.SUCCESS,
        )


class TurnStepInline(HistoryInline):
    model = TurnStep
    fields = (
        "index",
        "kind",
        "content",
        "request_sent",
        "input_tokens",
        "output_tokens",
        "created_at",
    )

    @admin.display(description="what the model read")
    def request_sent(self, obj):
        """A model step's request exactly as sent (as `manage.py team prompt` prints it)."""
        request = model_requests.request_unpack(obj.request)
        if request is None:
            return "—"
        text = model_requests.request_text(request)
        return format_html(
            '<details class="model-read"><summary>request ({} characters)</summary>'
            "<pre>{}</pre></details>",
            f"{len(text):,}",
            text,
        )


@admin.register(Turn)
class TurnAdmin(HistoryAdminMixin, TeamScopedAdmin):
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
    readonly_fields = (*(f.name for f in Turn._meta.fields), "duration", "working_notes")
    inlines = (TurnStepInline,)

    @admin.display(description="working notes")
    def working_notes(self, obj):
        """What the agent wrote beside its tool calls: not part of its message."""
        return model_requests.turn_working_notes(obj) or "—"

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


@admin.register(AnchorRevision)
class AnchorRevisionAdmin(HistoryAdminMixin, TeamScopedAdmin):
    list_display = ("key", "team", "value", "deleted", "changed_by", "created_at")
    list_filter = ("team", "deleted")
    search_fields = ("key", "value")
    list_select_related = ("team",)


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
        columns = [
            {
                "consultant": c.profile.name if c.profile_id else "—",
                "model": c.model,
                "status": c.status,
                "cost": str(c.cost_usd),
                "seconds": str(c.duration_seconds) if c.duration_seconds is not None else "—",
                "text": consultations.render(c),
            }
            for c in batch.order_by("profile__name", "id")
        ]
        return fragment("side_by_side.html", columns=columns)


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
