from django.apps import AppConfig


class TeamsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "teams"
    verbose_name = "Loom teams"

    def ready(self):
        # The catalog knows prices without knowing the models: the table's rows are
        # handed to it here, once the app registry is ready.
        from teams import catalog, models

        catalog.prices_load_with(models.price_rows)
