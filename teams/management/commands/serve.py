import asyncio
import logging

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
        from channels.worker import Worker
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from loomsite.asgi import application
        from teams.events import TURNS_CHANNEL
        from teams.worker import WORKER_ID, run_sweeper

        if not settings.ANTHROPIC_API_KEY:
            log.warning("No ANTHROPIC_API_KEY: agents run on the offline model (loom-offline).")
        layer = get_channel_layer()
        if layer is None:
            raise CommandError("No channel layer is configured.")
        background: list[asyncio.Future] = []

        def start_workers():
            if no_workers:
                return
            worker = Worker(application=application, channels=[TURNS_CHANNEL], channel_layer=layer)
            background.append(asyncio.ensure_future(worker.arun()))
            background.append(asyncio.ensure_future(run_sweeper()))
            log.info("Turn worker %s and the sweeper are running in this process.", WORKER_ID)

        self.stdout.write(f"Loom on http://{host}:{port}/ (admin at /admin/). Ctrl-C stops.")
        Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            ready_callable=start_workers,
            verbosity=0,
        ).run()
