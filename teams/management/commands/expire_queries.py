from django.core.management.base import BaseCommand

from teams.conversation import questions


class Command(BaseCommand):
    help = (
        "Expire open queries past their TTL and tell each asker what was gathered. "
        "The workers' sweeper does this every few seconds; this runs it once."
    )

    def handle(self, *args, **options):
        count = questions.expire()
        self.stdout.write(f"{count} queries expired.")
