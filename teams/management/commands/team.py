import json

from django.core.management.base import BaseCommand, CommandError

from teams import selectors
from teams.conversation import pm_requests
from teams.errors import LoomError
from teams.history import cloning, model_requests
from teams.management import team_fork, team_mcp
from teams.run import team_actions
from teams.run.lifecycle import PM_ACTIONS, TeamAction


class Command(BaseCommand):
    help = (
        "Operate a team from the shell: start, pause, resume, status, answer SLUG [TEXT]; "
        "clone SLUG [NEW_SLUG] [--name NAME] runs a team again as a fresh idle copy; "
        "prompt SLUG AGENT [--turn N] [--call K] [--text] prints exactly what the model "
        "received on that turn (JSON, or readable text with --text). "
        "fork SLUG (--at-message ID | --at-turn ID) [--slug NEW] makes an idle team holding "
        "SLUG's state as of then; replay SLUG [--slug NEW] [--until-turn N] runs SLUG's "
        "recorded run again with no model call and reports where it diverges. "
        "MCP servers: team mcp list|add|remove|refresh SLUG ... (team mcp --help)."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        """`team mcp ...` has a parser of its own (teams.management.team_mcp)."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        mcp_parser, parse_all = team_mcp.parser(self), parser.parse_args

        def parse_args(args=None, namespace=None):
            if args and args[0] == "mcp":
                return team_mcp.parse(mcp_parser, args[1:], namespace)
            return parse_all(args, namespace)

        parser.parse_args = parse_args
        return parser

    def add_arguments(self, parser):
        parser.add_argument(
            "action",
            choices=[
                "start",
                "pause",
                "resume",
                "status",
                "answer",
                "clone",
                "prompt",
                "fork",
                "replay",
            ],
        )
        parser.add_argument("slug")
        parser.add_argument(
            "text",
            nargs="?",
            default="",
            help=(
                "The answer, for `answer`; the new slug, for `clone` (default SLUG-2, -3...); "
                "the agent's name, for `prompt`."
            ),
        )
        parser.add_argument("--name", default=None, help="The copy's name, for `clone`.")
        parser.add_argument(
            "--turn",
            type=int,
            default=None,
            help="For `prompt`: the team's turn number (default: the agent's latest turn).",
        )
        parser.add_argument(
            "--call",
            type=int,
            default=None,
            help="For `prompt`: which model call of the turn, from 1 (default: the last).",
        )
        team_fork.add_arguments(parser)
        parser.add_argument(
            "--text",
            action="store_true",
            dest="as_text",
            help="For `prompt`: readable text, not JSON.",
        )

    def handle(self, *args, action, slug, text, name=None, **options):
        if action == "mcp":
            try:
                team_mcp.run(self.stdout, {"slug": slug, **options})
            except LoomError as exc:
                raise CommandError(exc.message) from exc
            return
        try:
            team = selectors.team_get(slug=slug)
            if action == "prompt":
                self.prompt(team, text.strip(), options)
                return
            if action == "fork":
                team_fork.fork(self.stdout, team, options)
                return
            if action == "replay":
                if team_fork.run_replay(self.stdout, team, options):
                    raise CommandError("The replay diverged (see the report above).")
                return
            if action == "clone":
                new_slug = text.strip() or cloning.next_free_slug(team.slug)
                clone = cloning.team_clone(team=team, slug=new_slug, name=name)
                self.stdout.write(
                    f"{cloning.made_message(team=clone, source=team)} "
                    f"Start it with: manage.py team start {clone.slug}"
                )
                return
            if action in PM_ACTIONS:
                report = team_actions.team_pm_action(team=team, action=TeamAction(action))
                self.stdout.write(report.text)
            elif action == "answer":
                request = selectors.team_open_pm_request(team=team)
                if request is None:
                    raise CommandError(f"Team {slug!r} has no open PM request.")
                if not text.strip():
                    raise CommandError("Give the answer: team answer SLUG 'your answer'.")
                pm_requests.pm_request_answer(request_id=request.id, answer=text)
        except LoomError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(self.status(selectors.team_get(slug=slug)))

    def prompt(self, team, agent_name: str, options) -> None:
        if not agent_name:
            raise CommandError("Name the agent: team prompt SLUG AGENT [--turn N].")
        turn = model_requests.agent_turn(team=team, agent_name=agent_name, number=options["turn"])
        sent = model_requests.turn_requests(turn)
        if not sent:
            raise CommandError(
                f"Turn {turn.number} of {agent_name} ({turn.status}) has no recorded model "
                "request (it made no model call, or ran before requests were kept)."
            )
        call = options["call"] or len(sent)
        if not 1 <= call <= len(sent):
            raise CommandError(
                f"Turn {turn.number} made {len(sent)} model call(s): --call takes 1 to {len(sent)}."
            )
        request = sent[call - 1]
        if options["as_text"]:
            self.stdout.write(
                f"team {team.slug}, {agent_name}, turn {turn.number} ({turn.phase}), "
                f"model call {call} of {len(sent)}"
            )
            self.stdout.write(model_requests.request_text(request))
        else:
            self.stdout.write(json.dumps(request, ensure_ascii=False, indent=2))

    def status(self, team) -> str:
        totals = selectors.team_usage_totals(team=team)
        lines = [
            f"team:   {team.slug} ({team.name})",
            f"status: {team.status}",
            f"phase:  {team.phase} ({team.phase_index + 1} of {len(team.phases)})",
            f"turns:  {team.turn_count} of {team.max_turns}",
            f"tokens: {totals['input_tokens'] + totals['cache_read_tokens']:,} in, "
            f"{totals['output_tokens']:,} out",
            f"cost:   ${totals['cost_usd']:.4f}",
        ]
        if team.forked_from_id:
            lines.append(
                f"forked: from {team.forked_from.slug} at {team.forked_at}; "
                f"{team.copied_turns} turns and ${team.copied_spent_usd:.4f} copied "
                f"(counted above), ${team.spent_usd:.4f} its own"
            )
        request = selectors.team_open_pm_request(team=team)
        if request is not None:
            who = request.agent.name if request.agent_id else "an agent"
            lines.append(f"PM request #{request.id} from {who}: {request.question}")
            lines.append(f"Answer with: manage.py team answer {team.slug} 'your answer'")
        return "\n".join(lines)
