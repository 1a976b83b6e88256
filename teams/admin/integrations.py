"""What programs use: API tokens and webhooks, their secrets shown once."""

import json

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.formats import date_format
from django.utils.html import format_html

from teams import services
from teams.admin.forms import ApiTokenForm, McpServerForm, WebhookForm
from teams.admin.fragments import fragment
from teams.admin.scoping import HistoryAdminMixin, SuperuserOnlyAdmin, TeamScopedAdmin
from teams.engine import mcp_client
from teams.errors import LoomError
from teams.integrations import mcp_servers
from teams.integrations.webhooks import (
    WEBHOOK_SETTINGS,
    delivery_retry,
    webhook_create,
    webhook_delete,
    webhook_secret_rotate,
    webhook_update,
)
from teams.models import (
    ApiToken,
    McpServer,
    Webhook,
    WebhookDelivery,
    WorkerHeartbeat,
)
from teams.observability.health import live_window


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
        "read_only",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("team", "read_only")
    search_fields = ("name", "prefix")
    list_select_related = ("team", "agent", "user")
    actions = ("revoke",)

    def get_fields(self, request, obj=None):
        """Made with a lifetime (expires_in); a made token's rights stay as they were
        made: its expiry and read-only flag are shown, not changed."""
        lifetime = ("expires_at",) if obj is not None else ("expires_in",)
        return (
            "team",
            "agent",
            "name",
            "read_only",
            *lifetime,
            "user",
            "prefix",
            "created_at",
            "last_used_at",
            "revoked_at",
        )

    def get_readonly_fields(self, request, obj=None):
        live = ("user", "prefix", "created_at", "last_used_at", "revoked_at")
        made = ("team", "agent", "read_only", "expires_at") if obj is not None else ()
        return live + made

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
        token, raw_key = services.api_token_create(
            team=obj.team,
            agent=obj.agent,
            label=obj.name,
            expires_in=form.cleaned_data.get("expires_in") or None,
            read_only=obj.read_only,
        )
        obj.pk, obj.prefix, obj.key_hash = token.pk, token.prefix, token.key_hash
        obj.expires_at, obj.created_at = token.expires_at, token.created_at
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


def with_seconds(value) -> str:
    """A time as the admin shows every time (to the second: loomsite/formats)."""
    return date_format(timezone.localtime(value), "DATETIME_FORMAT") if value else "—"


@admin.register(Webhook)
class WebhookAdmin(TeamScopedAdmin):
    """A team's webhooks: made here (the secret shown once), changed (URL, events,
    enabled) and deleted through teams.integrations.webhooks; the latest deliveries on the page."""

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

    actions = ("rotate_secret",)

    @admin.action(description="Rotate the secret (the new one shown once)", permissions=["change"])
    def rotate_secret(self, request, queryset):
        """A new secret for one webhook, shown once on the next page (as when made)."""
        if len(queryset) != 1:
            self.message_user(
                request, "Choose one webhook: its new secret is shown once.", messages.WARNING
            )
            return None
        try:
            webhook, secret = webhook_secret_rotate(webhook=queryset[0])
        except LoomError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return None
        return shown_once(
            self,
            request,
            "Webhook secret rotated",
            crumb=webhook.url,
            webhook=webhook,
            secret=secret,
            rotated=True,
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
        deliveries = [
            {
                "id": str(d.pk),
                "event": d.event,
                "status": d.status,
                "attempts": str(d.attempts),
                "code": str(d.last_status_code or "—"),
                "created": with_seconds(d.created_at),
            }
            for d in rows
        ]
        return fragment("webhook_deliveries.html", deliveries=deliveries, log_url=log_url)

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
            self.refuse(exc)
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


@admin.register(McpServer)
class McpServerAdmin(TeamScopedAdmin):
    """A team's MCP servers: made, changed and deleted through teams.integrations.mcp_servers, their
    tools listed again by the action. A stdio server runs a command on the Loom host:
    its command and variables are a superuser's (others see them read-only and add
    streamable HTTP servers only). Variable values are never here: only names."""

    form = McpServerForm
    list_display = ("name", "team", "transport", "target", "approval", "health", "listed_at")
    list_filter = ("transport", "team")
    search_fields = ("name", "url")
    list_select_related = ("team",)
    fields = (
        "team",
        "name",
        *mcp_servers.MCP_SETTINGS,
        "health",
        "listed_at",
        "tool_list",
    )
    actions = ("refresh",)

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if request.user.is_superuser:
            return fields
        # A PM sees the command without the host's paths (the stored one, which runs, has them).
        return tuple("command_shown" if f == "command" else f for f in fields)

    def get_readonly_fields(self, request, obj=None):
        live = ("health", "listed_at", "tool_list")
        if obj is not None:
            live += ("team", "name")
        if not request.user.is_superuser:
            live += ("command_shown", "env_vars") + (("transport",) if obj is not None else ())
        return live

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.by_superuser = request.user.is_superuser
        return form

    def get_list_display(self, request):
        if request.user.is_superuser:
            return self.list_display
        return tuple("target_shown" if f == "target" else f for f in self.list_display)

    @admin.display(description="command or URL")
    def target(self, obj):
        return " ".join(obj.command) if obj.transport == McpServer.Transport.STDIO else obj.url

    @admin.display(description="command or URL")
    def target_shown(self, obj):
        """As `target`, for a PM: the command without the host's paths."""
        return self.command_shown(obj) if obj.transport == McpServer.Transport.STDIO else obj.url

    @admin.display(description="command")
    def command_shown(self, obj):
        return " ".join(mcp_servers.mcp_command_shown(server=obj, by_superuser=False)) or "—"

    @admin.display(description="health")
    def health(self, obj):
        if obj.pk is None:
            return "—"
        if obj.healthy:
            return "healthy"
        return f"unhealthy since {with_seconds(obj.error_at)}: {obj.error}"

    @admin.display(description="tools")
    def tool_list(self, obj):
        if obj.pk is None:
            return "—"
        return fragment("mcp_tools.html", tools=mcp_servers.mcp_server_tools(server=obj))

    @admin.action(description="List the selected servers' tools again", permissions=["change"])
    def refresh(self, request, queryset):
        for server in queryset:
            server = mcp_client.refresh(server)
            if server.healthy:
                self.message_user(request, f"{server.name}: {len(server.tools)} tool(s) listed.")
            else:
                self.message_user(request, f"{server.name}: {server.error}", messages.WARNING)

    def save_model(self, request, obj, form, change):
        superuser = request.user.is_superuser
        try:
            if change:
                changes = {
                    f: getattr(obj, f) for f in form.changed_data if f in mcp_servers.MCP_SETTINGS
                }
                server = mcp_servers.mcp_server_update(
                    server=obj, changes=changes, by_superuser=superuser
                )
            else:
                server = mcp_servers.mcp_server_create(
                    team=obj.team,
                    name=obj.name,
                    **{f: getattr(obj, f) for f in mcp_servers.MCP_SETTINGS},
                    by_superuser=superuser,
                )
        except LoomError as exc:  # changed meanwhile: say so, change nothing
            self.message_user(request, exc.message, messages.ERROR)
            return
        if server.listed_at is None and server.transport == McpServer.Transport.STDIO:
            server = mcp_client.list_at_once(server)  # new, or it runs something else
            if server.healthy:
                self.message_user(request, f"{server.name}: {len(server.tools)} tool(s) listed.")
            else:
                self.message_user(request, f"{server.name}: {server.error}", messages.WARNING)
        obj.pk, obj.created_at, obj.updated_at = server.pk, server.created_at, server.updated_at

    def delete_model(self, request, obj):
        mcp_servers.mcp_server_delete(server=obj)

    def delete_queryset(self, request, queryset):
        for server in queryset:
            mcp_servers.mcp_server_delete(server=server)

    def response_add(self, request, obj, post_url_continue=None):
        if obj.pk is None:  # not made: back to the list, where the error shows
            return HttpResponseRedirect(reverse("admin:teams_mcpserver_changelist"))
        return super().response_add(request, obj, post_url_continue)


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(SuperuserOnlyAdmin):
    """The turn workers' signs of life (teams.observability.health), read-only: the workers write
    them. Deployment-wide (hosts and pids), so for superusers only."""

    list_display = ("worker", "host", "pid", "running_turns", "started_at", "last_seen", "alive")
    list_filter = ("host",)
    readonly_fields = ("worker", "host", "pid", "running_turns", "started_at", "last_seen")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(boolean=True, description="alive")
    def alive(self, obj):
        """Seen within two turn leases: /healthz counts it."""
        return obj.last_seen >= timezone.now() - live_window()
