from channels.management.commands import runworker

from teams.engine.worker import TurnWorker


class Command(runworker.Command):
    help = (
        "Run a turn worker: `manage.py runworker loom.turns` (the scaled-out mode, beside "
        "daphne and `manage.py sweep`). It renews the leases of its running turns with a "
        "heartbeat, records itself for /healthz, and keeps listening through a Redis restart."
    )
    worker_class = TurnWorker
