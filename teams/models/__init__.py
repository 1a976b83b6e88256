"""Loom's data model: every piece of a team's life is a row. The rows live in one
module per concept; every name is re-exported here, so `from teams.models import Team`
stays the way to reach them.

May import: teams.lib and Django only (the rows are the bottom of the domain)."""

from teams.models.choices import (  # noqa: F401
    ACTIVE_TURN_STATUSES,
    AGENT_NAME_PATTERN,
    ANCHOR_KEY_PATTERN,
    DEFAULT_PHASES,
    HUMAN_TEXT_LIMIT,
    MAX_PHASES,
    PHASE_GUIDE_TEXT_LIMIT,
    PHASE_NAME_MAX,
    PHASES_NEEDED,
    PLAN_LIMIT,
    SHORT_TEXT_LIMIT,
    AgentRole,
    EvalCaseStatus,
    EvalRunStatus,
    MessageKind,
    PMRequestStatus,
    QueryStatus,
    TeamStatus,
    TurnOutcome,
    TurnStatus,
    agent_name_validator,
    default_phases,
    human_text,
    new_query_key,
    plan_text,
    team_slug_validator,
    validate_approvals,
    validate_phase_guide,
    validate_phases,
    validate_tool_access,
)
from teams.models.conversation import (  # noqa: F401
    ALWAYS_APPROVE,
    APPROVAL_CHOICES,
    APPROVE,
    BUDGET_CHOICES,
    DENY,
    STUCK_CHOICES,
    ApprovalPolicy,
    BudgetKind,
    LiveEvent,
    Message,
    PMRequest,
    PMRequestKind,
    Query,
)
from teams.models.evals import (  # noqa: F401
    EvalCase,
    EvalRun,
)
from teams.models.files import (  # noqa: F401
    FileBlob,
    FileRevision,
    WorkspaceFile,
)
from teams.models.integrations import (  # noqa: F401
    ENV_NAME_PATTERN,
    MCP_NAME_PATTERN,
    WEBHOOK_EVENTS_NEEDED,
    WEBHOOK_URL_MAX,
    ApiToken,
    ConsultantProfile,
    Consultation,
    EndpointApi,
    McpServer,
    McpTransport,
    ModelEndpoint,
    ProviderKind,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
    endpoint_name_validator,
    endpoint_rows,
    mcp_name_validator,
    validate_header_vars,
    validate_key_env,
    validate_webhook_events,
    validate_webhook_url,
    webhook_url_validator,
)
from teams.models.knowledge import (  # noqa: F401
    Anchor,
    AnchorRevision,
    AnchorSource,
    Keeper,
    KeeperEntry,
)
from teams.models.team import (  # noqa: F401
    Agent,
    Team,
)
from teams.models.work import (  # noqa: F401
    ModelCall,
    ModelPrice,
    Replay,
    ReplayStatus,
    Turn,
    TurnStep,
    WorkerHeartbeat,
    price_rows,
    prices_changed,
)
