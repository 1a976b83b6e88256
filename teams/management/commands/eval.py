"""`manage.py eval run|compare|rescore`: team evals from the shell (docs/evals.md)."""

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from teams.engine import eval_driver, evals
from teams.errors import LoomError
from teams.evals import compare, report, runs, suites


class Command(BaseCommand):
    help = (
        "Team evals. run SUITE.yaml [--repeat N] [--set KEY=VALUE ...] [--concurrency K] "
        "[--json FILE]: a team per case and repeat, run to the end, checked, a table "
        "printed; compare RUN_A RUN_B: two runs side by side; rescore RUN [--suite FILE]: "
        "the checks applied again to a stored run's teams, with no model call for them."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="run|compare|rescore")
        run = actions.add_parser("run", help="Run a suite.")
        run.add_argument("suite", help="The suite file (YAML).")
        run.add_argument("--repeat", type=int, default=1, help="Runs of each case (default 1).")
        run.add_argument(
            "--set",
            action="append",
            default=[],
            dest="overrides",
            metavar="KEY=VALUE",
            help="Change the team template, e.g. agents.coder.model=claude-haiku-4-5 or "
            "phases=implementation,code-review (repeatable).",
        )
        run.add_argument(
            "--concurrency",
            type=int,
            default=runs.DEFAULT_CONCURRENCY,
            help=f"Cases at work at once (default {runs.DEFAULT_CONCURRENCY}).",
        )
        run.add_argument("--json", dest="json_file", default=None, help="Write the report here.")
        run.add_argument(
            "--workers",
            choices=["inline", "external"],
            default="inline",
            help="inline (default): this command runs the teams' turns with the worker's "
            "turn runner; external: the running workers (serve, runworker) run them.",
        )
        against = actions.add_parser("compare", help="Two runs side by side.")
        against.add_argument("run_a", type=int)
        against.add_argument("run_b", type=int)
        again = actions.add_parser("rescore", help="Apply the checks again to a stored run.")
        again.add_argument("run_id", type=int, metavar="RUN")
        again.add_argument("--suite", default=None, help="A suite file with new checks.")
        again.add_argument("--json", dest="json_file", default=None, help="Write the report here.")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except LoomError as exc:
            raise CommandError(exc.message) from None

    def _run(self, *, suite, repeat, overrides, concurrency, json_file, workers, **_):
        spec = suites.suite_load(suite, overrides=overrides)
        settings = runs.RunSettings(
            repeat=repeat, overrides=tuple(overrides), concurrency=concurrency
        )
        run = evals.eval_run_start(suite=spec, settings=settings)
        self.stdout.write(
            f"Eval run {run.pk}: suite {spec.name}, {run.cases.count()} case runs "
            f"({len(spec.cases)} cases x {repeat}), {concurrency} at once."
        )
        run = eval_driver.drive(run, inline=workers == "inline", on_progress=self._progress())
        self._finish(run, json_file)

    def _progress(self):
        said = {"line": ""}
        live = sys.stderr.isatty()

        def show(run):
            line = report.progress_line(run)
            # A terminal sees every change on one line; a log, a line per case scored.
            moved = line.split(" · ")[0] if not live else line
            if moved == said["line"]:
                return
            said["line"] = moved
            self.stderr.write(f"\r{line}" if live else line, ending="" if live else "\n")

        return show

    def _finish(self, run, json_file):
        found = report.run_report(run)
        self.stderr.write("")
        self.stdout.write(report.table(found))
        if json_file:
            Path(json_file).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
            self.stdout.write(f"Report written to {json_file}.")

    def _compare(self, *, run_a, run_b, **_):
        a, b = runs.eval_run_get(run_id=run_a), runs.eval_run_get(run_id=run_b)
        self.stdout.write(compare.compare_table(compare.runs_compare(a, b)))

    def _rescore(self, *, run_id, suite, json_file, **_):
        run = runs.eval_run_get(run_id=run_id)
        spec = suites.suite_load(suite) if suite else None
        run = evals.eval_run_rescore(run, suite=spec)
        self._finish(run, json_file)
