"""Prices as data (ModelPrice, seeded with the defaults of the day), budget PM
requests (PMRequest.kind, .budget), an agent's own cost budget, and the model calls
tools make (ModelCall)."""

import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


# USD per million tokens (input, output) as teams.catalog.PRICES had them when this
# migration was written; cache writes cost 1.25x input, cache reads 0.1x input.
DEFAULT_PRICES = {
    "claude-opus-4-1": ("15", "75"),
    "claude-opus-4": ("15", "75"),
    "claude-opus": ("5", "25"),
    "claude-sonnet": ("3", "15"),
    "claude-haiku-4": ("1", "5"),
    "claude-3-5-haiku": ("0.8", "4"),
    "claude-haiku": ("1", "5"),
    "loom-offline": ("0", "0"),
}


def seed_prices(apps, schema_editor):
    ModelPrice = apps.get_model("teams", "ModelPrice")
    for model, (inp, out) in DEFAULT_PRICES.items():
        inp, out = Decimal(inp), Decimal(out)
        ModelPrice.objects.get_or_create(
            model=model,
            defaults={
                "input_usd": inp,
                "output_usd": out,
                "cache_write_usd": inp * Decimal("1.25"),
                "cache_read_usd": inp * Decimal("0.1"),
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0011_webhooks_and_budget_warnings"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ModelCall",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "purpose",
                    models.CharField(
                        choices=[("smart_retrieval", "Smart retrieval")], max_length=30
                    ),
                ),
                ("model", models.CharField(blank=True, max_length=100)),
                ("input_tokens", models.PositiveIntegerField(default=0)),
                ("output_tokens", models.PositiveIntegerField(default=0)),
                ("cache_creation_tokens", models.PositiveIntegerField(default=0)),
                ("cache_read_tokens", models.PositiveIntegerField(default=0)),
                (
                    "cost_usd",
                    models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=12),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="ModelPrice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "model",
                    models.CharField(
                        help_text="A model id, or a prefix such as claude-sonnet.",
                        max_length=100,
                        unique=True,
                    ),
                ),
                (
                    "input_usd",
                    models.DecimalField(
                        decimal_places=4,
                        help_text="USD per million input tokens.",
                        max_digits=10,
                        verbose_name="input",
                    ),
                ),
                (
                    "output_usd",
                    models.DecimalField(
                        decimal_places=4,
                        help_text="USD per million output tokens.",
                        max_digits=10,
                        verbose_name="output",
                    ),
                ),
                (
                    "cache_write_usd",
                    models.DecimalField(
                        decimal_places=4,
                        help_text="USD per million tokens written to the prompt cache (usually 1.25x input).",
                        max_digits=10,
                        verbose_name="cache write",
                    ),
                ),
                (
                    "cache_read_usd",
                    models.DecimalField(
                        decimal_places=4,
                        help_text="USD per million tokens read from the prompt cache (usually 0.1x input).",
                        max_digits=10,
                        verbose_name="cache read",
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "verbose_name": "model price",
                "ordering": ["model"],
            },
        ),
        migrations.AddField(
            model_name="agent",
            name="max_cost_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=4,
                help_text="This agent's own cost budget in USD; empty: none (the team's applies).",
                max_digits=10,
                null=True,
                verbose_name="cost budget",
            ),
        ),
        migrations.AddField(
            model_name="pmrequest",
            name="budget",
            field=models.CharField(
                blank=True,
                choices=[("", "—"), ("cost", "Cost"), ("turns", "Turns")],
                help_text="Which budget a budget request is about (the agent's own when it has one).",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="pmrequest",
            name="kind",
            field=models.CharField(
                choices=[("question", "Question"), ("budget", "Budget")],
                default="question",
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="pmrequest",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["question", "budget"])),
                name="pm_request_kind_valid",
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="model_calls",
                to="teams.agent",
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="model_calls",
                to="teams.team",
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="turn",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="model_calls",
                to="teams.turn",
            ),
        ),
        migrations.AddConstraint(
            model_name="modelprice",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("input_usd__gte", 0),
                    ("output_usd__gte", 0),
                    ("cache_write_usd__gte", 0),
                    ("cache_read_usd__gte", 0),
                ),
                name="model_price_not_negative",
            ),
        ),
        migrations.AddIndex(
            model_name="modelcall",
            index=models.Index(fields=["team", "purpose"], name="model_call_team_idx"),
        ),
        migrations.RunPython(seed_prices, migrations.RunPython.noop),
    ]
