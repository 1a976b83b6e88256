"""How the PM's pages and the admin word the domain's figures: drift, budgets, a turn's
figures, money tables, sizes, "(not set)". Both faces import this module, never each
other, so a figure reads the same wherever the PM meets it (the live view's script
words the live updates the same way: teams/static/teams/live.js)."""

from teams.conversation import hierarchy
from teams.lib import endpoints
from teams.lib.catalog import priced_as_local
from teams.models import Agent
from teams.run import drift
from teams.run.budgets import WARN_PERCENT, agent_spent
from teams.run.drift import recommendation

NOT_SET = "(not set)"

# From this share of a budget on, the pages warn (the team pauses at the budget).
BUDGET_WARNING_SHARE = WARN_PERCENT / 100
BUDGET_WARNING = (
    "⚠ {percent}% of the {budget} budget used ({used} of {limit}); "
    "the team pauses when it is reached."
)
# An agent's own cost budget (teams.run.budgets.agent_budget_check): said from its warning
# until that budget changes.
AGENT_BUDGET_WARNING = (
    "⚠ {agent} has used {percent}% of its {limit} cost budget ({used}); "
    "the team pauses when it is reached."
)


def agent_drift(agent: Agent) -> dict:
    """What the PM sees of an agent's drift (the live view, its script and the admin):
    the score as check_drift computes it, what it means, the hierarchy, the chain
    breaks and the advice."""
    value = drift.score(agent)
    breaks = drift.chain_breaks(agent)
    meaning = drift.meaning(value)
    return {
        "agent": agent.name,
        "role": agent.role,
        "score": value,
        "meaning": meaning,
        "band": meaning.replace(" ", "-"),
        "flagged": value < drift.SIGNIFICANT,
        "hierarchy": [[level, getattr(agent, level) or NOT_SET] for level in hierarchy.LEVELS],
        "breaks": breaks,
        "recommendation": recommendation(value, breaks, marks=False),
    }


def budgets(team) -> dict:
    """The team's turns and cost against its budgets, with a warning line per budget
    from BUDGET_WARNING_SHARE on (the live view's script words them the same way)."""
    warnings, warned = [], set()
    for budget, used, limit, shown in (
        ("turn", team.turn_count, team.max_turns, "{:,}"),
        ("cost", team.spent_usd, team.max_cost_usd, "${:,.2f}"),
    ):
        if limit and float(used) >= float(limit) * BUDGET_WARNING_SHARE:
            warned.add(budget)
            warnings.append(
                BUDGET_WARNING.format(
                    percent=int(100 * used / limit),
                    budget=budget,
                    used=shown.format(used),
                    limit=shown.format(limit),
                )
            )
    return {
        "spent": f"{team.spent_usd:.6f}",
        "turns_high": team.max_turns * BUDGET_WARNING_SHARE,
        "cost_high": f"{float(team.max_cost_usd) * BUDGET_WARNING_SHARE:.6f}",
        "warnings": warnings,
        "turns_warn": "turn" in warned,
        "cost_warn": "cost" in warned,
    }


def agent_budget_warnings(agents) -> list[tuple[str, str]]:
    """(name, line) for each of `agents` told it has used 80% of its own cost budget;
    only those cost a query (what they spent)."""
    lines = []
    for agent in agents:
        limit = agent.max_cost_usd
        if agent.cost_warned_at is None or not limit:
            continue
        used = agent_spent(agent)
        line = AGENT_BUDGET_WARNING.format(
            agent=agent.name,
            percent=int(100 * used / limit),
            used=f"${used:,.2f}",
            limit=f"${limit:,.2f}",
        )
        lines.append((agent.name, line))
    return lines


def turn_figures(turn) -> dict | None:
    """A turn's tokens, cost and duration: a short line, and the detail on hover
    (the live view's script builds the same from the turn.finished event)."""
    if turn is None or turn.status not in (turn.Status.DONE, turn.Status.FAILED):
        return None
    tokens = (
        turn.input_tokens + turn.output_tokens + turn.cache_creation_tokens + turn.cache_read_tokens
    )
    seconds = None
    if turn.started_at and turn.finished_at:
        seconds = (turn.finished_at - turn.started_at).total_seconds()
    free_here = not turn.cost_usd and turn.model and priced_as_local(turn.model)
    line = f"{tokens:,} tokens · " + ("local" if free_here else f"${turn.cost_usd:.4f}")
    title = (
        f"Turn {turn.number}, {turn.model or 'no model call'}: {turn.input_tokens:,} input, "
        f"{turn.cache_read_tokens:,} read from cache, {turn.cache_creation_tokens:,} written "
        f"to cache, {turn.output_tokens:,} output tokens; ${turn.cost_usd:.6f}"
    )
    if seconds is not None:
        line += f" · {seconds:.1f} s"
        title += f"; {seconds:.2f} s"
    return {"line": line, "title": title}


def model_label(model: str) -> str:
    """A model id as the pages say it: "qwen3:8b on ollama (local)", "claude-sonnet-4-6
    on anthropic", "loom-offline"."""
    route = endpoints.route(model)
    if route.endpoint is None:
        return model
    said = f"{route.model} on {route.endpoint.name}"
    return said + " (local)" if route.endpoint.local else said


def shortened(text: str, limit: int) -> str:
    """`text` whole when it fits in `limit` characters, else cut after its last whole
    word that fits, with "…" (never mid-word; a single word longer than the limit is
    cut where it must be). live.js shortens the same way."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    if not text[limit - 1].isspace():  # the cut falls inside a word: drop that word
        space = max(head.rfind(" "), head.rfind("\n"))
        if space > limit // 2:
            head = head[:space]
    return head.rstrip() + "…"


def size_in_bytes(size: int | None) -> str:
    return "1 byte" if size == 1 else f"{size or 0:,} bytes"


def _tokens(row) -> str:
    return f"{row['input_tokens']:,} in · {row['output_tokens']:,} out"


def _cache(row) -> str:
    return f"{row['cache_read_tokens']:,} read · {row['cache_creation_tokens']:,} written"


def _usd(row) -> str:
    return f"${row['cost_usd']:.4f}"


USAGE_COLUMNS = [("tokens", _tokens), ("cache", _cache), ("cost", _usd)]
MONEY_TABLES = (
    (
        "Per agent",
        "agents",
        [("agent", lambda r: r["agent"]), ("turns", lambda r: r["turns"]), *USAGE_COLUMNS],
    ),
    (
        "Per phase",
        "phases",
        [("phase", lambda r: r["phase"] or "—"), ("turns", lambda r: r["turns"]), *USAGE_COLUMNS],
    ),
    (
        "Per tool (model calls besides the turns' own; included above)",
        "tools",
        [
            ("tool", lambda r: r["tool"]),
            ("calls", lambda r: r["calls"]),
            ("tokens", _tokens),
            ("cost", _usd),
        ],
    ),
    (
        "What the mechanisms cut (estimates)",
        "cuts",
        [
            ("mechanism", lambda r: r["mechanism"]),
            ("count", lambda r: f"{r['count']:,}"),
            ("tokens kept out", lambda r: f"{r['tokens']:,}"),
            ("saved", lambda r: f"${r['usd']:.4f}"),
        ],
    ),
)


def money_tables(spend: dict) -> list[dict]:
    """A team's spend (selectors.team_spend) as titled tables of text cells."""
    return [
        {
            "title": title,
            "columns": [label for label, _ in columns],
            "rows": [[str(cell(row)) for _, cell in columns] for row in spend[key]],
        }
        for title, key, columns in MONEY_TABLES
    ]
