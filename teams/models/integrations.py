"""What connects a team to the outside: model endpoints, consultants and
consultations, API tokens, webhooks and their deliveries, MCP servers."""

import hashlib
import re
import uuid
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from teams.lib import endpoints, outbound
from teams.models.choices import agent_name_validator, human_text
from teams.models.conversation import ApprovalPolicy
from teams.models.team import Agent, Team
from teams.models.work import Turn


class ProviderKind(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic (Claude)"
    OPENAI = "openai", "OpenAI-compatible (GPT, Gemini, vLLM, Ollama, ...)"
    OFFLINE = "offline", "Offline (loom-offline, no key)"
    A2A = "a2a", "A2A agent (asked at its agent card's URL)"


ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,99}$"


def validate_key_env(value: str) -> None:
    """A consultant's key variable names an API key, never one of Loom's own settings
    (its key would be sent to the consultant's server)."""
    if value.startswith(("LOOM_", "DJANGO_")) or not value.endswith(("_KEY", "_TOKEN")):
        raise ValidationError(
            "Name a variable holding an API key, ending in _KEY or _TOKEN (e.g. "
            "OPENAI_API_KEY); Loom's own LOOM_ and DJANGO_ variables are refused."
        )


class EndpointApi(models.TextChoices):
    ANTHROPIC = endpoints.API_ANTHROPIC, "Anthropic Messages API"
    OPENAI = endpoints.API_OPENAI, "OpenAI Chat Completions (OpenAI, Gemini, vLLM, Ollama, ...)"


endpoint_name_validator = RegexValidator(
    endpoints.ENDPOINT_NAME_PATTERN,
    "An endpoint's name is 1 to 32 characters: lowercase letters, digits and -.",
)
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def validate_header_vars(value) -> None:
    """Header name -> the NAME of the variable holding its value (never the value);
    Loom's own LOOM_ and DJANGO_ variables are refused (they would leave Loom)."""
    if not isinstance(value, dict):
        raise ValidationError("Give an object: header name -> environment variable name.")
    for header, var in value.items():
        if not HEADER_NAME.match(str(header)):
            raise ValidationError(f"{str(header)[:60]!r} is not a header name.")
        if not isinstance(var, str) or not re.match(ENV_NAME_PATTERN, var):
            raise ValidationError(
                f"The header {header} names {str(var)[:60]!r}, which is not the NAME of an "
                "environment variable (e.g. OPENAI_ORG_ID)."
            )
        if var.startswith(("LOOM_", "DJANGO_")):
            raise ValidationError(f"The header {header} may not send Loom's own {var}.")


class ModelEndpoint(models.Model):
    """Where the calls of `<name>/<model>` ids go (teams.lib.endpoints; a row named
    like a built-in endpoint replaces it). The key is never stored: `key_env` names
    the environment variable that holds it."""

    Api = EndpointApi

    name = models.CharField(
        max_length=32,
        unique=True,
        validators=[endpoint_name_validator],
        error_messages={"blank": endpoint_name_validator.message},
    )
    api = models.CharField(max_length=20, choices=Api.choices, default=Api.OPENAI)
    base_url = models.URLField(
        "base URL",
        max_length=300,
        blank=True,
        help_text="Empty: the SDK's default (api.openai.com; Anthropic's own).",
    )
    key_env = models.CharField(
        "key variable",
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                ENV_NAME_PATTERN, "The NAME of an environment variable, e.g. OPENAI_API_KEY."
            ),
            validate_key_env,
        ],
        help_text="The name of the environment variable holding the key (never the key); "
        "empty: no key.",
    )
    header_vars = models.JSONField(
        "header variables",
        default=dict,
        blank=True,
        validators=[validate_header_vars],
        help_text='Extra headers, each from a variable: {"OpenAI-Organization": "OPENAI_ORG"}.',
    )
    local = models.BooleanField(
        default=False,
        help_text="A model server on this machine or network: loopback and private addresses "
        "are allowed, and its models cost nothing unless they have a price.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "model endpoint"
        constraints = [
            models.CheckConstraint(
                condition=Q(api__in=EndpointApi.values), name="model_endpoint_api_valid"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=endpoints.ENDPOINT_NAME_PATTERN),
                name="model_endpoint_name_valid",
            ),
        ]

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        super().save(*args, **kwargs)
        endpoints.endpoints_invalidate()

    def delete(self, *args, **kwargs):
        result = super().delete(*args, **kwargs)
        endpoints.endpoints_invalidate()
        return result

    def clean(self):
        """Only a `local` endpoint may lead to a loopback or private address."""
        super().clean()
        if self.base_url and not self.local:
            try:
                outbound.validate_url(self.base_url)
            except ValidationError as exc:
                raise ValidationError(
                    {"base_url": f"{exc.messages[0]} Mark the endpoint local to allow it."}
                ) from None

    def as_endpoint(self) -> endpoints.Endpoint:
        return endpoints.Endpoint(
            name=self.name,
            api=self.api,
            base_url=self.base_url,
            key_env=self.key_env,
            header_vars=dict(self.header_vars or {}),
            local=self.local,
        )


def endpoint_rows():
    for row in ModelEndpoint.objects.all():
        yield row.as_endpoint()


class ConsultantProfile(models.Model):
    """Another model an agent may consult for a second opinion, or an A2A agent (its
    agent card's URL in `a2a_url`). The key is never stored: `key_env` names the
    environment variable that holds it (an A2A agent's bearer token)."""

    Provider = ProviderKind

    name = models.CharField(max_length=60, unique=True, validators=[agent_name_validator])
    provider = models.CharField(max_length=20, choices=Provider.choices, default=Provider.OFFLINE)
    model = models.CharField(max_length=100)
    base_url = models.URLField(
        max_length=300, blank=True, help_text="Empty: the provider's default endpoint."
    )
    a2a_url = models.URLField(
        "A2A agent card URL",
        max_length=300,
        blank=True,
        help_text="An A2A agent's card (…/.well-known/agent-card.json) or its base URL.",
    )
    key_env = models.CharField(
        "key variable",
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                ENV_NAME_PATTERN, "The NAME of an environment variable, e.g. OPENAI_API_KEY."
            ),
            validate_key_env,
        ],
        help_text="The name of the environment variable holding the key or an A2A agent's "
        "bearer token (never the key).",
    )
    strengths = models.TextField(
        blank=True, validators=[human_text], help_text="What this consultant is good at."
    )
    extra_prompt = models.TextField(
        blank=True, validators=[human_text], help_text="Added to every request it gets."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(provider__in=ProviderKind.values), name="consultant_provider_valid"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.model})"


class Consultation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="consultations")
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="consultations"
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="consultations"
    )
    profile = models.ForeignKey(
        ConsultantProfile, on_delete=models.SET_NULL, null=True, related_name="consultations"
    )
    batch = models.UUIDField(
        default=uuid.uuid4,
        help_text="Shared by the consultations of one ask of several consultants.",
    )
    prompt = models.TextField()
    task_type = models.CharField(max_length=40, blank=True)
    relevant_files = models.JSONField(default=list, blank=True)
    focus_areas = models.JSONField(default=list, blank=True)
    context = models.TextField(blank=True)
    custom_prompt = models.TextField(blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    output = models.JSONField(null=True, blank=True, help_text="The structured PeerOutput.")
    flagged_files = models.JSONField(
        default=list, blank=True, help_text="File references dropped: missing or outside."
    )
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    duration_seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["batch"], name="consultation_batch_idx"),
            models.Index(fields=["team", "-id"], name="consultation_team_idx"),
        ]

    def __str__(self):
        return f"consultation {self.pk} ({self.status})"


class ApiToken(models.Model):
    """A REST API token; only its SHA-256 is stored.

    A team token reaches one team (and, bound to an agent, acts only as that agent);
    an account token acts with its staff user's rights."""

    PREFIX_LENGTH = 12

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens"
    )
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set: the token acts only as this agent.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set: an account token, with this staff user's rights (no team).",
    )
    name = models.CharField("label", max_length=80, blank=True)
    prefix = models.CharField(max_length=PREFIX_LENGTH, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty: never expires. Past it, every use is a 401."
    )
    read_only = models.BooleanField(
        default=False, help_text="Reads only: no writes, no tools (403 with the reason)."
    )

    class Meta:
        ordering = ["-id"]
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(user__isnull=True))
                | (Q(team__isnull=True) & Q(user__isnull=False) & Q(agent__isnull=True)),
                name="api_token_team_xor_user",
            ),
        ]

    def __str__(self):
        return f"{self.name or 'token'} ({self.prefix}…)"

    @staticmethod
    def hash_key(raw_key: str) -> str:
        return hashlib.sha256(raw_key.encode()).hexdigest()


# --- webhooks ------------------------------------------------------------------


class WebhookEvent(models.TextChoices):
    """What a team's webhooks may be told about (teams.integrations.webhooks says when)."""

    PM_REQUEST_OPENED = "pm_request.opened", "PM request opened"
    TEAM_DONE = "team.done", "Team done"
    TEAM_FAILED = "team.failed", "Team failed (a turn failed and paused it)"
    BUDGET_WARNING = "budget.warning", "Budget warning (80% of turns or cost used)"
    APPROVAL_REQUESTED = "approval.requested", "Approval requested (a tool call waits)"
    DRIFT_ALERT = "drift.alert", "Drift alert (an agent in significant drift two turns running)"


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


WEBHOOK_URL_MAX = 500
webhook_url_validator = RegexValidator(
    r"^https?://[^\s/?#@]+(?:[/?#]\S*)?$",
    "A webhook URL is an http:// or https:// address with a host, e.g. "
    "https://hooks.example.com/loom.",
)


def validate_webhook_url(value: str) -> None:
    """http or https with a host and a usable port, leading to no private address
    (teams.lib.outbound); nothing else is ever posted to."""
    webhook_url_validator(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValidationError(webhook_url_validator.message) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(webhook_url_validator.message)
    outbound.validate_url(value)


WEBHOOK_EVENTS_NEEDED = (
    "Choose at least one event, each once: " + ", ".join(WebhookEvent.values) + "."
)


def validate_webhook_events(value) -> None:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(e, str) for e in value)
        or len(set(value)) != len(value)
    ):
        raise ValidationError(WEBHOOK_EVENTS_NEEDED)
    unknown = [e for e in value if e not in WebhookEvent.values]
    if unknown:
        choices = ", ".join(WebhookEvent.values)
        raise ValidationError(f"Unknown event {unknown[0][:60]!r}; choose among {choices}.")


class Webhook(models.Model):
    """Where a team's events are POSTed, signed with the webhook's own secret.

    The secret is stored encrypted (teams.integrations.webhooks: Fernet, with a key derived from
    the site's SECRET_KEY) and shown once, when the webhook is made."""

    Event = WebhookEvent

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(
        "URL",
        max_length=WEBHOOK_URL_MAX,
        validators=[validate_webhook_url],
        error_messages={"blank": webhook_url_validator.message},
    )
    events = models.JSONField(
        validators=[validate_webhook_events],
        error_messages={"blank": WEBHOOK_EVENTS_NEEDED},
        help_text="The events POSTed to the URL: " + ", ".join(WebhookEvent.values) + ".",
    )
    secret_encrypted = models.TextField(editable=False)
    secret_prefix = models.CharField(
        max_length=12, editable=False, help_text="The secret's first characters, to tell it."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "url"], name="webhook_url_unique_in_team"),
            models.CheckConstraint(
                condition=Q(url__startswith="http://") | Q(url__startswith="https://"),
                name="webhook_url_http",
            ),
        ]

    def __str__(self):
        return f"{self.team.slug} → {self.url}"


class WebhookDelivery(models.Model):
    """One event to POST to one webhook, retried with backoff until it is delivered
    or given up on. Written in the transaction of the change it reports, so a
    restart loses none; teams.engine.deliveries sends it."""

    Status = WebhookDeliveryStatus

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40, choices=WebhookEvent.choices)
    payload = models.JSONField(help_text="The JSON body POSTed, as it is signed.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When it is due (pending); empty once it is settled."
    )
    claimed_by = models.CharField(max_length=120, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=WebhookDeliveryStatus.values),
                name="webhook_delivery_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(event__in=WebhookEvent.values), name="webhook_delivery_event_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=WebhookDeliveryStatus.DELIVERED)
                | Q(delivered_at__isnull=False),
                name="webhook_delivered_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status=WebhookDeliveryStatus.PENDING)
                | Q(next_attempt_at__isnull=False),
                name="webhook_pending_has_due_time",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="webhook_delivery_lease_idx"),
            models.Index(fields=["webhook", "id"], name="webhook_delivery_log_idx"),
        ]

    def __str__(self):
        return f"{self.event} #{self.pk} ({self.status})"


class McpTransport(models.TextChoices):
    STDIO = "stdio", "stdio (a command on the Loom host)"
    HTTP = "http", "Streamable HTTP"


MCP_NAME_PATTERN = r"^[a-z0-9-]{1,32}$"
mcp_name_validator = RegexValidator(
    MCP_NAME_PATTERN, "A server name is 1-32 lowercase letters, digits or dashes."
)


class McpServer(models.Model):
    """A Model Context Protocol server whose tools a team's agents may call, as
    `<name>__<tool>`. Environment and header values are never stored: only the names
    of the variables that hold them."""

    Transport = McpTransport

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=32, validators=[mcp_name_validator])
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.JSONField(
        default=list, blank=True, help_text="stdio: the program, then its arguments."
    )
    env_vars = models.JSONField(
        default=list, blank=True, help_text="stdio: names of variables passed to it."
    )
    url = models.CharField(max_length=500, blank=True, help_text="http: the server's URL.")
    header_vars = models.JSONField(
        default=dict, blank=True, help_text="http: header name -> variable holding its value."
    )
    roles = models.JSONField(default=list, blank=True, help_text="Empty: every role.")
    phases = models.JSONField(default=list, blank=True, help_text="Empty: every phase.")
    approval = models.CharField(
        max_length=10, choices=ApprovalPolicy.choices, default=ApprovalPolicy.ASK
    )
    tool_approvals = models.JSONField(
        default=dict, blank=True, help_text="Tool name -> auto, ask or never."
    )
    # The server's tool list as last listed (name, description, input_schema), and
    # its health: empty error = healthy.
    tools = models.JSONField(default=list, blank=True, editable=False)
    listed_at = models.DateTimeField(null=True, blank=True, editable=False)
    error = models.TextField(blank=True, editable=False)
    error_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "name"]
        verbose_name = "MCP server"
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="mcp_server_unique_name"),
            models.CheckConstraint(
                condition=Q(transport__in=McpTransport.values), name="mcp_server_transport_valid"
            ),
            models.CheckConstraint(
                condition=Q(approval__in=ApprovalPolicy.values), name="mcp_server_approval_valid"
            ),
        ]

    def __str__(self):
        return f"{self.team.slug}: {self.name}"

    @property
    def healthy(self) -> bool:
        return not self.error
