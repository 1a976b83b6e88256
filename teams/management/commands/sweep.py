import time

from django.core.management.base import BaseCommand

from teams.engine.worker import SWEEP_SECONDS, sweep


class Command(BaseCommand):
    help = (
        "Re-queue turns whose worker died and re-wake turns whose wake-up was lost. "
        "`serve` runs this itself; run it beside `runworker` in the scaled-out mode."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")

    def handle(self, *args, once, **options):
        while True:
            counts = sweep()
            self.stdout.write(
                f"re-queued {counts['requeued']}, failed {counts['failed']}, "
                f"re-woken {counts['rewoken']}, queries expired {counts['expired']}, "
                f"stalled teams restarted {counts['restarted']}"
            )
            if once:
                return
            time.sleep(SWEEP_SECONDS)
