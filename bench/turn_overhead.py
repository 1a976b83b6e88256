"""Orchestration overhead per turn: a 4-agent team on the offline model for 1,000 turns.

Orchestration is a whole turn (claim, prompt building, tool dispatch, persistence,
events, hand-over) minus the time inside the model's respond(), which stands in
for Claude. Prints its median and p95 for the first and the last 100 turns, their
ratio, the whole-turn median for reference, the process's peak memory, and the SQL
statements per turn (a figure a noisy machine cannot move).
Targets: median under 10 ms on SQLite; last 100 no more than 1.2x the first 100.

With --single-phase the team has one phase, so the history every prompt is built
from grows for all the turns, and the model is a replay model that answers every
turn at once with one short line (no tools): the setting of the peer,
bench/peers/langgraph_turns.py (run it in the same sitting and compare).

With --model-api anthropic or openai (implies --single-phase) the agents call a real
SDK: Claude ids through the anthropic SDK to the fake Messages API, or `fake/…` ids (a
local endpoint) through the openai SDK's Chat Completions to the fake Chat Completions
server, each fake in a child process (its CPU is not this process's) answering the
replay model's line, streamed. Then the figure is the whole turn's CPU, the SDK and
the provider's translation included. --compare-apis runs both in one sitting, one
fresh process each, interleaved over --rounds rounds (A B, B A, ...), and prints the
ratio of each round and their median (target: the OpenAI-style path within 10% of
the Claude path).

Run: .venv/bin/python bench/turn_overhead.py [--turns 1000] [--single-phase]
     .venv/bin/python bench/turn_overhead.py --compare-apis [--turns 300] [--rounds 3]
(uses a fresh SQLite database in a temporary folder unless LOOM_DATABASE_URL is set)
"""

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument(
        "--single-phase",
        action="store_true",
        help="one phase (the history grows every turn) and a replay model",
    )
    parser.add_argument(
        "--no-stuck-checks",
        action="store_true",
        help="turn the stuck checks off (on by default, as users run them)",
    )
    parser.add_argument(
        "--model-api",
        choices=["offline", "anthropic", "openai"],
        default="offline",
        help="call the model through this SDK, against a local fake in a child process",
    )
    parser.add_argument(
        "--compare-apis",
        action="store_true",
        help="run --model-api anthropic, then openai, and compare their CPU per turn",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--compare-apis: rounds of one run of each"
    )
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the turns to FILE")
    parser.add_argument(
        "--show-sql", action="store_true", help="print the SQL statements of the middle turn"
    )
    args = parser.parse_args()
    if args.compare_apis:
        return compare_apis(args.turns, args.rounds)
    fake_url = None
    if args.model_api != "offline":
        args.single_phase = True
        fake_url = start_fake(args.model_api)  # before Django: the child needs none of it

    os.environ.setdefault("LOOM_DATA_DIR", tempfile.mkdtemp(prefix="loom-bench-"))
    os.environ["LOOM_OFFLINE_DELAY"] = "0"
    # As in production: DEBUG on would also record every SQL query in memory.
    os.environ.setdefault("LOOM_DEBUG", "0")
    os.environ.setdefault("LOOM_SECRET_KEY", "bench-only-" + os.urandom(16).hex())
    os.environ.pop("ANTHROPIC_API_KEY", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from teams import selectors, services
    from teams.conversation import pm_requests
    from teams.engine import loop, worker
    from teams.run import team_actions

    # Events go out through an event loop of the process, as a worker's do.
    worker.start_send_loop()
    from teams.engine.offline import OfflineProvider as OfflineModel
    from teams.models import STUCK_CHOICES, PMRequest, Team, Turn

    model_seconds, model_cpu = [0.0], [0.0]
    respond = _replay if args.single_phase else OfflineModel.respond

    def timed_respond(self, **kwargs):
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            return respond(self, **kwargs)
        finally:
            model_seconds[0] += time.perf_counter() - start
            model_cpu[0] += time.process_time() - cpu_start

    if args.model_api == "offline":
        OfflineModel.respond = timed_respond
    agent_model = use_fake(args.model_api, fake_url)

    team = services.team_create(
        slug=f"bench-{int(time.time())}",
        goal="Benchmark the orchestration.",
        phases=["work"] if args.single_phase else [f"phase-{i}" for i in range(1000)],
        max_turns=args.turns,
        agents=[
            {"name": name, "role": name, "model": agent_model}
            for name in ("coach", "researcher", "coder", "reviewer")
        ],
    )
    # No cost cap; the stuck checks stay on (the defaults users run) unless told.
    Team.objects.filter(pk=team.pk).update(max_cost_usd=100_000)
    if args.no_stuck_checks:
        Team.objects.filter(pk=team.pk).update(
            max_exchanges=0, max_pass_rounds=0, max_phase_turns=0
        )
    team_actions.team_start(team=team)
    durations, whole, cpu = [], [], []
    statements = [0]  # SQL statements the turns ran: a figure noise cannot move

    shown_sql = []  # the statements of the middle turn (--show-sql)

    def count_statement(execute, sql, params, many, context):
        statements[0] += 1
        if len(durations) == args.turns // 2:
            shown_sql.append((sql, _caller()))
        return execute(sql, params, many, context)

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()

    outcomes = {}
    calibration = []  # the same pure-Python work before each 100 turns
    while len(durations) < args.turns:
        turn = Turn.objects.filter(team=team, status=Turn.Status.QUEUED).first()
        if turn is None:
            request = selectors.team_open_pm_request(team=team)
            if request is None:
                break
            stuck = request.kind == PMRequest.Kind.STUCK
            answer = STUCK_CHOICES[1] if stuck else "Go with HTML."  # "Let them go on"
            pm_requests.pm_request_answer(request_id=request.id, answer=answer)
            continue
        if len(durations) % 100 == 0 and len(calibration) * 100 <= len(durations):
            calibration.append(_calibrate())
        model_seconds[0] = model_cpu[0] = 0.0
        cpu_start = time.process_time()
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        with connection.execute_wrapper(count_statement):
            done = loop.run_turn(turn.id, "bench")
        if profiler:
            profiler.disable()
        elapsed = time.perf_counter() - start
        whole.append(elapsed * 1000)
        durations.append((elapsed - model_seconds[0]) * 1000)
        cpu.append((time.process_time() - cpu_start - model_cpu[0]) * 1000)
        outcomes[str(done.outcome)] = outcomes.get(str(done.outcome), 0) + 1

    def summary(values):
        ordered = sorted(values)
        return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]

    if profiler:
        profiler.dump_stats(args.profile)
    if args.show_sql:
        print(f"the SQL statements of turn {args.turns // 2 + 1} ({len(shown_sql)}):")
        for sql, caller in shown_sql:
            print(f"   {caller:<40} {sql[:150]}")
    first, last = summary(durations[:100]), summary(durations[-100:])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from django.conf import settings

    mode = "single phase, replay model" if args.single_phase else "a phase per turn, offline model"
    checks = "off" if args.no_stuck_checks else "on (the defaults)"
    if args.model_api != "offline":
        mode += f", through the {args.model_api} SDK to a fake ({agent_model})"
    print(f"mode: {mode}; stuck checks: {checks}")
    print(f"DEBUG: {settings.DEBUG} (set LOOM_DEBUG to change)")
    print(f"database: {connection.vendor}; turns run: {len(durations)}; outcomes: {outcomes}")
    print(f"SQL statements per turn: {statements[0] / len(durations):.1f}")
    print("orchestration time per turn (whole turn minus time inside the model):")
    print(f"first 100 turns: median {first[0]:.2f} ms, p95 {first[1]:.2f} ms")
    print(f"last 100 turns:  median {last[0]:.2f} ms, p95 {last[1]:.2f} ms")
    print(f"last/first median ratio: {last[0] / first[0]:.2f}")
    cpu_first, cpu_last = summary(cpu[:100]), summary(cpu[-100:])
    print(
        f"CPU time of the process per turn (noise moves it less): first 100 median "
        f"{cpu_first[0]:.2f} ms, last 100 median {cpu_last[0]:.2f} ms, "
        f"ratio {cpu_last[0] / cpu_first[0]:.2f}"
    )
    # Growth shows as a trend here; a noisy machine as scatter around one level.
    blocks = [statistics.median(durations[i : i + 100]) for i in range(0, len(durations), 100)]
    print("median of each 100 turns (ms):", " ".join(f"{b:.1f}" for b in blocks))
    print(
        f"all turns: median {statistics.median(durations):.2f} ms orchestration, "
        f"{statistics.median(whole):.2f} ms whole turn with the offline model"
    )
    print(f"peak memory (max RSS): {peak_mb:.1f} MB")
    print(
        "machine speed, sum(range(10**6)) before each 100 turns (ms):",
        " ".join(f"{c:.1f}" for c in calibration),
        "(a steady machine repeats one figure; scatter here means scatter above)",
    )


def _replay(self, *, model, system, messages, tools, max_tokens=0, on_text=None):
    """The replay model: one short line per turn, at once (no tools)."""
    from teams.engine.offline import IDENTITY
    from teams.engine.reply import ModelReply
    from teams.lib.catalog import OFFLINE_MODEL, Usage

    match = IDENTITY.search("\n".join(b["text"] for b in system))
    name = match["name"] if match else "agent"
    line = f"{name}: noted, carrying on with item {len(messages)}."
    if on_text:
        on_text(line)
    return ModelReply(
        content=[{"type": "text", "text": line}],
        stop_reason="end_turn",
        model=OFFLINE_MODEL,
        usage=Usage(
            input_tokens=sum(len(str(m["content"])) for m in messages) // 4, output_tokens=12
        ),
    )


def replay_line(agent: str, count: int) -> str:
    return f"{agent}: noted, carrying on with item {count}."


def _serve_fake(api: str, pipe) -> None:
    """The child process: a fake vendor API answering every request with the replay
    model's line, until the parent ends it."""
    import threading

    if api == "anthropic":
        from tests.fakes.messages_api import FakeMessagesAPI, text

        def reply(request):
            return text(replay_line(request.agent, len(request.body["messages"])), output_tokens=12)

        server = FakeMessagesAPI(reply)
    else:
        from tests.fakes.openai_api import Completion, FakeOpenAI

        def reply(request):
            count = sum(1 for m in request.body["messages"] if m["role"] != "system")
            return Completion(replay_line(request.agent, count), completion_tokens=12)

        server = FakeOpenAI(reply)
    with server:
        pipe.send(server.url)
        threading.Event().wait()


def start_fake(api: str) -> str:
    import multiprocessing

    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=_serve_fake, args=(api, child), daemon=True)
    process.start()
    return parent.recv()


def use_fake(api: str, url: str | None) -> str:
    """Point Loom at the fake; the agents' model id."""
    if api == "offline":
        return ""
    from django.conf import settings

    from teams.models import ModelEndpoint

    if api == "anthropic":
        settings.ANTHROPIC_API_KEY = "sk-bench"
        settings.ANTHROPIC_BASE_URL = url
        return "claude-sonnet-4-6"
    ModelEndpoint.objects.update_or_create(
        name="fake", defaults={"api": "openai", "base_url": url, "local": True}
    )
    return "fake/bench-model"


def compare_apis(turns: int, rounds: int) -> None:
    """Both SDK paths in one sitting, each run a fresh process, interleaved over
    `rounds` rounds (A B, then B A, ...: a machine that speeds up or slows down during
    the sitting moves both sides alike), their CPU per turn and its ratio per round."""
    ratios = {"first 100": [], "last 100": []}
    for number in range(rounds):
        apis = ("anthropic", "openai") if number % 2 == 0 else ("openai", "anthropic")
        medians = {api: _cpu_medians(api, turns) for api in apis}
        for index, label in enumerate(ratios):
            claude, openai = medians["anthropic"][index], medians["openai"][index]
            ratios[label].append(openai / claude)
            print(
                f"round {number + 1}, {label} turns: CPU per turn, Claude path {claude:.2f} ms, "
                f"OpenAI-style path {openai:.2f} ms, ratio {openai / claude:.2f}"
            )
    for label, values in ratios.items():
        print(
            f"OpenAI-style / Claude CPU per turn, {label} turns, median of {rounds} rounds: "
            f"{statistics.median(values):.2f} (rounds: {' '.join(f'{r:.2f}' for r in values)}; "
            "target: at most 1.10)"
        )


def _cpu_medians(api: str, turns: int) -> tuple[float, float]:
    """One run of the bench on this API, in a process of its own: its median CPU per
    turn over the first and the last 100 turns."""
    import re
    import subprocess

    command = [sys.executable, __file__, "--model-api", api, "--turns", str(turns)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    print(f"--- {api} ---\n{out}")
    found = re.search(r"first 100 median ([0-9.]+) ms, last 100 median ([0-9.]+) ms", out)
    return float(found[1]), float(found[2])


def _caller() -> str:
    """The innermost frame of Loom's own code that ran a statement (file:line function)."""
    import traceback

    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/teams/" in frame.filename or "/tools/" in frame.filename:
            where = str(Path(frame.filename).relative_to(ROOT))
            return f"{where}:{frame.lineno} {frame.name}"
    return "?"


def _calibrate() -> float:
    start = time.perf_counter()
    sum(range(10**6))
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    main()
