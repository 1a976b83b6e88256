import asyncio
import logging
import socket

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger("loom.serve")


class Command(BaseCommand):
    help = (
        "Serve the site (HTTP and WebSockets) and run the turn workers and the sweeper in "
        "this one process: the embedded mode. With LOOM_REDIS_URL set you may instead run "
        "daphne and `manage.py runworker loom.turns` as separate processes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-workers", action="store_true", help="Serve only; run workers elsewhere."
        )

    def handle(self, *args, host, port, no_workers, **options):
        from channels.layers import get_channel_layer
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from loomsite.asgi import application
        from teams.engine import deliveries
        from teams.engine.worker import WORKER_ID, TurnWorker, run_sweeper
        from teams.live.events import TURNS_CHANNEL

        layer = get_channel_layer()
        if layer is None:
            raise CommandError("No channel layer is configured.")
        background: list[asyncio.Future] = []

        def start_workers():
            if no_workers:
                return
            worker = TurnWorker(
                application=application, channels=[TURNS_CHANNEL], channel_layer=layer
            )
            background.append(asyncio.ensure_future(worker.arun()))
            background.append(asyncio.ensure_future(run_sweeper()))
            deliveries.start_thread()  # webhooks, in a thread: a slow receiver blocks no turn
            log.info(
                "Turn worker %s, the sweeper and the webhook deliverer are running in this "
                "process.",
                WORKER_ID,
            )

        _check_port_free(host, port)
        if settings.DEBUG and settings.SECRET_KEY_IS_DEFAULT:
            self.stdout.write(
                self.style.WARNING(
                    "Local development mode: DEBUG is on and the public development key is "
                    "in use. For production set LOOM_SECRET_KEY (DEBUG is then off) and see "
                    "docs/production.md."
                )
            )
        _warn_about_models()
        self.stdout.write(f"Loom on http://{host}:{port}/ (admin at /admin/). Ctrl-C stops.")
        Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            ready_callable=start_workers,
            verbosity=0,
        ).run()


def _warn_about_models() -> None:
    """Say at start which agents' models cannot run, rather than at their first turn."""
    from teams.engine.providers import model_problem
    from teams.lib.catalog import OFFLINE_MODEL, default_model
    from teams.models import Agent

    if not settings.ANTHROPIC_API_KEY and default_model() == OFFLINE_MODEL:
        log.warning("No ANTHROPIC_API_KEY: agents without a model run on %s.", OFFLINE_MODEL)
    used: dict[str, list[str]] = {}
    for agent in Agent.objects.select_related("team"):
        used.setdefault(agent.effective_model, []).append(f"{agent.team.slug}/{agent.name}")
    for model, agents in sorted(used.items()):
        problem = model_problem(model)
        if problem:
            log.warning("Agents %s cannot run: %s.", ", ".join(agents), problem)


def _check_port_free(host: str, port: int) -> None:
    """Daphne only logs a listen failure and exits 0; say so plainly and fail instead."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CommandError(f"Cannot serve on {host!r}: {exc.strerror}.") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise CommandError(
                f"Cannot listen on {host}:{port}: {exc.strerror}. "
                "Is Loom already running? Choose another port with --port "
                "(make run PORT=8001)."
            ) from None
