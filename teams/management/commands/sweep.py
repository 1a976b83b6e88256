import logging
import time

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from teams.engine import deliveries
from teams.engine.worker import start_send_loop, sweep, sweep_seconds

log = logging.getLogger("loom.sweep")


class Command(BaseCommand):
    help = (
        "Re-queue turns whose worker died and re-wake turns whose wake-up was lost, and "
        "deliver due webhooks (in a thread of their own). `serve` runs this itself; run "
        "it beside `runworker` in the scaled-out mode."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")

    def handle(self, *args, once, **options):
        if not once:
            start_send_loop()  # wake-ups reuse one loop and its Redis connection
            deliveries.start_thread()
        while True:
            try:
                counts = sweep()
            except Exception:  # the database or Redis is away: try again next pass
                if once:
                    raise
                log.exception("Sweeper pass failed")
                close_old_connections()
                time.sleep(sweep_seconds())
                continue
            self.stdout.write(
                f"re-queued {counts['requeued']}, failed {counts['failed']}, "
                f"re-woken {counts['rewoken']}, queries expired {counts['expired']}, "
                f"stalled teams restarted {counts['restarted']}"
            )
            if once:
                sent = deliveries.deliver_due()
                self.stdout.write(
                    f"webhooks delivered {sent['delivered']}, retrying {sent['retrying']}, "
                    f"failed {sent['failed']}"
                )
                return
            time.sleep(sweep_seconds())
