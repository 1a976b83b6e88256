"""The context economy: what Loom's mechanisms save on one fixed, scripted scenario.

The scenario: a team of four (a coach, a researcher, a coder, a reviewer) through
the five default phases, about 80 turns; about a third of them are confirmation
turns where the scripted model passes, and the coach asks the PM one question
(answered at once). Every turn runs through the real agent loop
(teams.engine.loop.run_turn, as the tests' drain() runs it) and the real anthropic
client against the fake Messages API (tests/fakes/messages_api.py) with token
counting on: it counts what it receives (characters / 4 of each block's JSON) and
reports cache writes and reads as the real API does (a prefix marked with
cache_control and seen before is a read; Sonnet's 1,024-token minimum applies).

The same scenario runs five times, each adding one mechanism:
  (1) naive: a plain round-robin group chat: every reply kept ("agree" replies
      included), the whole history across phases, no offload, no caching;
  (2) + passes kept out (the model passes with the pass tool; the pass note never
      reaches a prompt);
  (3) + phase-scoped history (earlier phases only by their summaries);
  (4) + automatic offload at the context budget (the bench gives every agent a
      context budget of --budget tokens, so this short scenario reaches it as a long
      session reaches the default 100,000);
  (5) + prompt caching (Loom as it ships).
The variants before (5) switch mechanisms off here, in the bench, by patching the
engine (no production switches): caching off strips every cache_control marker
from the request; whole history drops the phase term of the history query; offload
off skips the loop's automatic offload; "agree" replies replace the passes.

It prints, for each: requests, input tokens (plain, cache writes, cache reads),
dollars at Sonnet prices (teams.lib.catalog.cost_of) and each step's cut; then the
input per turn of a 300-turn single-phase run without offload or caching, with
caching only, and with offload and caching.

Run: .venv/bin/python bench/economy.py [--budget 2000] [--long-turns 300]
(a fresh SQLite database in a temporary folder; about a minute)
"""

import argparse
import os
import random
import re
import secrets
import sys
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "claude-sonnet-4-6"
AGENTS = ["coach", "researcher", "coder", "reviewer"]
GOAL = "Build a command-line tool that converts Markdown notes into a static HTML site."
PM_ANSWER = "HTML only for the first version; PDF can wait."

WORDS = (
    "parser renderer template index sidebar navigation heading anchor link slug "
    "front-matter metadata tag archive feed theme stylesheet asset image cache build "
    "watch server reload config default option flag error warning test fixture "
    "snapshot edge-case unicode encoding path folder output input layout partial "
    "table code-block highlight footnote toc search excerpt date author draft"
).split()
OPENERS = [
    "I think we should",
    "My proposal is to",
    "One risk is that we",
    "Before we decide, we could",
    "From what I found, most tools",
    "To keep it simple, we can",
    "The cleanest option is to",
    "We should make sure to",
]
QUALITIES = ["small", "testable", "fast", "predictable"]
VERBS = ["handle", "split", "render", "validate", "cache", "test", "document", "generate"]
AGREE = [
    "I agree with what has been said; the plan for the {a} and the {b} looks right to me.",
    "Agreed. Handling the {a} before the {b} makes sense, nothing to add from my side.",
    "Sounds good to me: the {a} approach covers it, and the {b} can follow as proposed.",
]


def line(rng: random.Random, sentences: int) -> str:
    """A few sentences of plausible discussion, fixed by the generator's seed."""
    out = []
    for _ in range(sentences):
        a, b, c = rng.sample(WORDS, 3)
        opener, verb = rng.choice(OPENERS), rng.choice(VERBS)
        joint, quality = rng.choice(["and", "with", "before"]), rng.choice(QUALITIES)
        x, y = rng.choice(WORDS), rng.choice(WORDS)
        out.append(
            f"{opener} {verb} the {a} {joint} the {b}, so the {c} stays {quality}"
            f" and we avoid surprises when {x} and {y} interact."
        )
    return " ".join(out)


@dataclass
class Plan:
    """Each agent's scripted actions, in the order of its turns."""

    actions: dict[str, list[tuple]] = field(default_factory=dict)


def scenario(phases: int, rounds: int, ask_pm: bool, seed: int = 14) -> Plan:
    """Per agent, `rounds` turns per phase: the coach speaks, asks the PM once (its
    third turn) and ends each phase on its last turn; the others speak on their first
    turn of a phase and pass on two of every three after it (staggered by agent)."""
    rng = random.Random(seed)
    plan = Plan({name: [] for name in AGENTS})
    for phase in range(phases):
        for turn in range(rounds):
            for index, name in enumerate(AGENTS):
                if name == "coach":
                    if turn == rounds - 1 and phases > 1:
                        summary = f"Phase {phase + 1} agreed: " + line(rng, 2)
                        plan.actions[name].append(("done", summary))
                    elif ask_pm and phase == 0 and turn == 2:
                        plan.actions[name].append(("ask", "Should the first version export PDF?"))
                    else:
                        plan.actions[name].append(("say", line(rng, 3)))
                elif turn > 0 and (turn + index) % 3 != 0:
                    a, b = rng.sample(WORDS, 2)
                    plan.actions[name].append(("pass", rng.choice(AGREE).format(a=a, b=b)))
                else:
                    plan.actions[name].append(("say", line(rng, rng.choice([3, 4, 5]))))
    return plan


@dataclass
class Variant:
    label: str
    passes: bool = True  # pass with the tool (else an "agree" reply, kept)
    phase_scoped: bool = True
    offload: bool = True
    caching: bool = True


VARIANTS = [
    Variant("(1) naive group chat", passes=False, phase_scoped=False, offload=False, caching=False),
    Variant("(2) + passes kept out", phase_scoped=False, offload=False, caching=False),
    Variant("(3) + phase-scoped history", offload=False, caching=False),
    Variant("(4) + offload at the budget", caching=False),
    Variant("(5) + prompt caching", caching=True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=2000, help="agents' context budget")
    parser.add_argument("--long-turns", type=int, default=300)
    args = parser.parse_args()

    os.environ.setdefault("LOOM_DATA_DIR", tempfile.mkdtemp(prefix="loom-economy-"))
    os.environ["LOOM_OFFLINE_DELAY"] = "0"
    os.environ.setdefault("LOOM_DEBUG", "0")
    os.environ.setdefault("LOOM_SECRET_KEY", secrets.token_urlsafe(50))  # serves nothing
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    import logging

    import django

    django.setup()
    logging.getLogger("loom").setLevel(logging.WARNING)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    bench = Bench(args.budget)
    results = [bench.run(v, scenario(phases=5, rounds=4, ask_pm=True)) for v in VARIANTS]
    print_table(results, args.budget)
    print_tool_share(results[-1])
    if args.long_turns:
        print_long_run(bench, args.long_turns)


class Bench:
    def __init__(self, budget: int):
        from django.conf import settings

        from teams.engine import history_rows, loop, providers

        self.settings, self.budget, self.count = settings, budget, 0
        self.variant = VARIANTS[-1]
        self._patch(loop, history_rows, providers)

    def _patch(self, loop, history_rows, providers):
        """The switches: each reads self.variant; (5) is the engine untouched."""
        bench = self
        respond, offload = providers.AnthropicProvider.respond, loop._offload_when_over_budget
        history_queryset = history_rows.history_queryset

        def respond_maybe_uncached(provider, **kwargs):
            if not bench.variant.caching:
                kwargs = {k: _uncached(v) for k, v in kwargs.items()}
            return respond(provider, **kwargs)

        def offload_maybe(turn, prompt):
            return offload(turn, prompt) if bench.variant.offload else prompt

        def history_maybe_whole(agent, team, phase=None, unseen_after=None):
            if bench.variant.phase_scoped:
                return history_queryset(agent, team, phase, unseen_after)
            return whole_history(history_rows, agent, team)

        providers.AnthropicProvider.respond = respond_maybe_uncached
        loop._offload_when_over_budget = offload_maybe
        history_rows.history_queryset = history_maybe_whole

    def run(self, variant: Variant, plan: Plan, phases=None, max_turns=1000):
        """Run the plan as a team; the fake server's recorded requests, in order."""
        from teams import selectors, services
        from teams.conversation import pm_requests
        from teams.engine import loop
        from teams.models import Agent, Keeper, Team, Turn
        from teams.run import team_actions
        from tests.fakes.messages_api import FakeMessagesAPI, text, tool
        from tools.conversation import AskPm, PassTurn, SignalPhaseComplete

        self.variant = variant
        self.count += 1
        queues = {name: list(actions) for name, actions in plan.actions.items()}

        def reply(request):
            queue = queues.get(request.agent) or [("pass", "")]
            kind, words = queue.pop(0)
            if kind == "say":
                return text(words)
            if kind == "ask":
                return tool(AskPm.name, {"question": words}, "toolu_ask")
            if kind == "done":
                return tool(SignalPhaseComplete.name, {"summary": words}, "toolu_done")
            if variant.passes:
                return tool(PassTurn.name, {"reason": "agree"}, "toolu_pass")
            return text(words)  # a plain group chat: "agree" is a message like any

        team = services.team_create(
            slug=f"economy-{self.count}",
            goal=GOAL,
            phases=phases,
            max_turns=max_turns,
            agents=[{"name": n, "role": n, "model": MODEL} for n in AGENTS],
        )
        # No cost cap, and no stuck checks: the bench measures the engine, not the PM.
        Team.objects.filter(pk=team.pk).update(
            max_cost_usd=100_000, max_exchanges=0, max_pass_rounds=0, max_phase_turns=0
        )
        Agent.objects.filter(team=team).update(context_budget_tokens=self.budget)
        with FakeMessagesAPI(reply, count_tokens=True, min_cache_tokens=1024) as api:
            self.settings.ANTHROPIC_API_KEY = "sk-bench"
            self.settings.ANTHROPIC_BASE_URL = api.url
            team.refresh_from_db()
            team_actions.team_start(team=team)
            turns = []
            while True:
                turn = Turn.objects.filter(team=team, status=Turn.Status.QUEUED).first()
                if turn is None:
                    request = selectors.team_open_pm_request(team=team)
                    team.refresh_from_db()
                    if request is None or team.turn_count >= max_turns:
                        break  # done, or the turn budget's own request: stop there
                    pm_requests.pm_request_answer(request_id=request.id, answer=PM_ANSWER)
                    continue
                done = loop.run_turn(turn.id, "economy-bench")
                if done.status != Turn.Status.DONE:
                    raise SystemExit(f"turn {done.id} {done.status}: {done.error}")
                turns.append(done)
        offloads = Keeper.objects.filter(team=team).count()
        return Result(variant, api.requests, turns, offloads)


def whole_history(history_rows, agent, team):
    """history_rows.history_queryset without its phase term: every phase's conversation."""
    from django.db.models import Q

    from teams.models import Message

    conversation = Q(team=team, recipient__isnull=True, kind__in=history_rows.CONVERSATION_KINDS)
    summaries = Q(team=team, kind=Message.Kind.PHASE_SUMMARY)
    return (
        Message.objects.filter(conversation | summaries | Q(recipient=agent))
        .exclude(kind=Message.Kind.PASS_NOTE)
        .exclude(keeper_entries__keeper__agent=agent)
        .select_related("author")
        .prefetch_related("query")
        .order_by("id")
    )


def _uncached(value):
    """A request part with every cache_control marker removed."""
    if isinstance(value, list):
        return [_uncached(v) for v in value]
    if isinstance(value, dict):
        return {k: _uncached(v) for k, v in value.items() if k != "cache_control"}
    return value


@dataclass
class Result:
    variant: Variant
    requests: list
    turns: list
    offloads: int

    def total(self, key: str) -> int:
        return sum(r.usage[key] for r in self.requests)

    @property
    def plain(self) -> int:
        return self.total("input_tokens")

    @property
    def writes(self) -> int:
        return self.total("cache_creation_input_tokens")

    @property
    def reads(self) -> int:
        return self.total("cache_read_input_tokens")

    def dollars(self, *, output: bool) -> Decimal:
        from teams.lib.catalog import Usage, cost_of

        usage = Usage(
            input_tokens=self.plain,
            output_tokens=self.total("output_tokens") if output else 0,
            cache_creation_tokens=self.writes,
            cache_read_tokens=self.reads,
        )
        return cost_of(MODEL, usage)


def print_table(results: list[Result], budget: int) -> None:
    first = results[0]
    turns = len(first.turns)
    passes = sum(1 for t in results[1].turns if t.outcome == "pass")
    print(
        f"Scenario: 4 agents (coach, researcher, coder, reviewer), 5 phases, {turns} turns, "
        f"{passes} of them passes (in (1) 'agree' replies), 1 PM question; "
        f"context budget {budget} tokens; Sonnet prices."
    )
    head = (
        f"{'variant':<30} {'requests':>8} {'input':>9} {'cache wr':>9} {'cache rd':>9} "
        f"{'input $':>8} {'step cut':>8} {'vs (1)':>7} {'total $':>8} {'vs (1)':>7}"
    )
    print(head)
    print("-" * len(head))
    previous = None
    for result in results:
        cost, total = result.dollars(output=False), result.dollars(output=True)
        cut = "" if previous is None else f"-{(1 - cost / previous) * 100:.0f}%"
        print(
            f"{result.variant.label:<30} {len(result.requests):>8} {result.plain:>9,} "
            f"{result.writes:>9,} {result.reads:>9,} {cost:>8.4f} {cut:>8} "
            f"{cost / first.dollars(output=False) * 100:>6.1f}% {total:>8.4f} "
            f"{total / first.dollars(output=True) * 100:>6.1f}%"
        )
        previous = cost
        spent = sum((t.cost_usd for t in result.turns), Decimal(0))
        assert abs(spent - total) < Decimal("0.001"), (spent, total)  # Loom counted the same
    print(
        "input $: plain input + cache writes (1.25x) + cache reads (0.1x); total $ adds the "
        "output tokens, which no mechanism here changes."
    )
    print(
        f"automatic offloads: (4) {results[3].offloads}, (5) {results[4].offloads}; "
        f"passes kept out from (2) on: {passes}"
    )


def print_tool_share(result: Result) -> None:
    """The tool definitions' share of each request of Loom as it ships, per phase: how
    many tools were offered and how many of the request's tokens (the fake's count of
    each block's JSON, cached or not) their definitions were."""
    from tests.fakes.messages_api import _pieces, tokens

    by_phase: dict[str, list[tuple[int, int, int]]] = {}
    for request in result.requests:
        match = re.search(r"Current phase: ([\w-]+)", request.dump)
        sizes = [(where, tokens(text)) for where, text, _ in _pieces(request.body)]
        tool_tokens = sum(n for where, n in sizes if where.startswith("tools["))
        row = (len(request.tool_names), tool_tokens, sum(n for _, n in sizes))
        by_phase.setdefault(match.group(1) if match else "?", []).append(row)
    print()
    print("Tool definitions in each request of (5), per phase (mean per request)")
    head = (
        f"{'phase':<18} {'requests':>8} {'tools':>6} {'tool tokens':>11} "
        f"{'request':>8} {'share':>6}"
    )
    print(head)
    print("-" * len(head))
    every = [row for rows in by_phase.values() for row in rows]
    for phase, rows in [*by_phase.items(), ("all", every)]:
        count = len(rows)
        tools_, tool_tokens, total = (sum(r[i] for r in rows) for i in range(3))
        print(
            f"{phase:<18} {count:>8} {tools_ / count:>6.1f} {tool_tokens // count:>11,} "
            f"{total // count:>8,} {tool_tokens / total * 100:>5.1f}%"
        )


def print_long_run(bench: Bench, turns: int) -> None:
    rounds = -(-turns // len(AGENTS))
    runs = [
        ("no offload, no caching", Variant("long", offload=False, caching=False)),
        ("caching only", Variant("long", offload=False, caching=True)),
        ("offload + caching", Variant("long", offload=True, caching=True)),
    ]
    results = []
    for label, variant in runs:
        plan = scenario(phases=1, rounds=rounds, ask_pm=False, seed=300)
        result = bench.run(variant, plan, phases=["implementation"], max_turns=turns)
        results.append((label, result))
    window = 25
    print()
    print(
        f"{turns}-turn single-phase run: input tokens per request, averaged over each "
        f"{window} turns (uncached = plain input + cache writes; read = cache reads)"
    )
    head = f"{'turns':>9}" + "".join(f" | {label:^27}" for label, _ in results)
    print(head)
    print(f"{'':>9}" + " | {:>13} {:>13}".format("uncached", "read") * len(results))
    print("-" * len(head))
    count = min(len(r.requests) for _, r in results)
    for start in range(0, count, window):
        cells = []
        for _, result in results:
            chunk = result.requests[start : start + window]
            uncached = sum(
                r.usage["input_tokens"] + r.usage["cache_creation_input_tokens"] for r in chunk
            )
            read = sum(r.usage["cache_read_input_tokens"] for r in chunk)
            cells.append(f" | {uncached // len(chunk):>13,} {read // len(chunk):>13,}")
        print(f"{start + 1:>4}-{start + len(chunk):<4}" + "".join(cells))
    print(
        "dollars: "
        + "; ".join(f"{label} ${result.dollars(output=True):.4f}" for label, result in results)
    )


if __name__ == "__main__":
    main()
