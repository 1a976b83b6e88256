from django.apps import AppConfig


class TeamsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "teams"
    verbose_name = "Loom teams"

    def ready(self):
        # The catalog knows prices without knowing the models: the table's rows are
        # handed to it here, once the app registry is ready.
        from django.db.models.signals import post_delete

        from teams import models
        from teams.files import workspace
        from teams.lib import catalog

        catalog.prices_load_with(models.price_rows)
        from teams.lib import endpoints

        endpoints.endpoints_load_with(models.endpoint_rows)
        # However a team is deleted (admin, shell, a cascade), its default workspace
        # folder goes with it: no other team ever finds its files.
        post_delete.connect(workspace.team_deleted, sender=models.Team, dispatch_uid="loom-folder")
        from teams.files import revisions

        post_delete.connect(revisions.blobs_prune, sender=models.Team, dispatch_uid="loom-blobs")
        # manage.py check says why run_command is not offered, when it is not.
        from django.core import checks

        from teams.files import sandbox

        checks.register(sandbox.sandbox_check)
        # Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; nothing otherwise.
        from teams.observability import telemetry

        telemetry.configure()
