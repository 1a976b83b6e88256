"""Prices as data (teams.models.ModelPrice, teams.lib.catalog.cost_of): the table starts
with the defaults, is edited in the admin by superusers, read with the longest
matching prefix; a model with no price is never priced as another and never called
(a turn on it fails naming the model and how to add its price; rows recorded before
are counted as free and flagged)."""

from decimal import Decimal
from importlib import import_module

import pytest
from django.apps import apps as django_apps
from django.urls import reverse

from teams.engine.providers import model_problem
from teams.lib import catalog
from teams.lib.catalog import Usage, cost_of
from teams.models import Message, ModelPrice, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text
from tests.helpers import client_for, drain, make_turn

MILLION_IN = Usage(input_tokens=1_000_000)


@pytest.fixture(autouse=True)
def fresh_prices(db):
    """The price cache is per process: a test's rolled-back rows must not stay in it.
    The table holds what migration 0012 seeds: a transactional test run before this
    module in the same process (pytest-xdist runs files one after another on a worker)
    empties every table, so its seeding is run again (get_or_create: a no-op when the
    rows are there)."""
    seeding = import_module("teams.migrations.0012_prices_budgets_and_spend")
    seeding.seed_prices(django_apps, None)
    catalog.prices_invalidate()
    yield
    catalog.prices_invalidate()


def test_the_table_starts_with_the_defaults(db):
    sonnet = ModelPrice.objects.get(model="claude-sonnet")
    assert (sonnet.input_usd, sonnet.output_usd) == (3, 15)
    assert (sonnet.cache_write_usd, sonnet.cache_read_usd) == (Decimal("3.75"), Decimal("0.3"))
    assert set(ModelPrice.objects.values_list("model", flat=True)) == set(catalog.PRICES)
    usage = Usage(
        input_tokens=1000, output_tokens=100, cache_creation_tokens=1000, cache_read_tokens=10_000
    )
    # 1000 x 3 + 100 x 15 + 1000 x 3.75 + 10,000 x 0.3, per million
    assert cost_of("claude-sonnet-4-6", usage) == Decimal("0.011250")


def test_an_edited_price_counts_at_once_and_the_longest_prefix_wins(db):
    sonnet = ModelPrice.objects.get(model="claude-sonnet")
    sonnet.input_usd = Decimal("4")
    sonnet.save()
    assert cost_of("claude-sonnet-4-6", MILLION_IN) == 4
    ModelPrice.objects.create(
        model="claude-sonnet-4-6", input_usd=1, output_usd=2, cache_write_usd=1, cache_read_usd=0
    )
    assert cost_of("claude-sonnet-4-6", MILLION_IN) == 1
    assert cost_of("claude-sonnet-4-5", MILLION_IN) == 4


def test_an_empty_table_falls_back_to_the_code_defaults(db):
    ModelPrice.objects.all().delete()
    assert cost_of("claude-opus-4-1-20250805", MILLION_IN) == 15
    assert cost_of("claude-sonnet-4-6", Usage(cache_read_tokens=1_000_000)) == Decimal("0.3")


def test_an_unknown_model_is_free_and_flagged(team, agents, superuser):
    assert catalog.price_for("gpt-9") is None
    assert cost_of("gpt-9", MILLION_IN) == 0  # not priced as Sonnet
    make_turn(agents["coder"], status="done", model="gpt-9")
    admin = client_for(superuser)
    turns = admin.get(reverse("admin:teams_turn_changelist")).content.decode()
    assert "unknown price: gpt-9" in turns
    page = admin.get(reverse("admin:teams_team_change", args=[team.pk])).content.decode()
    assert "unknown price: gpt-9" in page
    ModelPrice.objects.create(
        model="gpt-9", input_usd=2, output_usd=8, cache_write_usd=2, cache_read_usd=Decimal("0.5")
    )
    turns = admin.get(reverse("admin:teams_turn_changelist")).content.decode()
    assert "unknown price" not in turns
    assert cost_of("gpt-9", MILLION_IN) == 2


def test_only_superusers_edit_prices(team, pm, superuser):
    url = reverse("admin:teams_modelprice_changelist")
    assert client_for(pm).get(url).status_code == 403
    admin = client_for(superuser)
    assert "claude-sonnet" in admin.get(url).content.decode()
    sonnet = ModelPrice.objects.get(model="claude-sonnet")
    response = admin.post(
        reverse("admin:teams_modelprice_change", args=[sonnet.pk]),
        {
            "model": "claude-sonnet",
            "input_usd": "2.5",
            "output_usd": "12",
            "cache_write_usd": "3.125",
            "cache_read_usd": "0.25",
        },
    )
    assert response.status_code == 302
    assert cost_of("claude-sonnet-4-6", MILLION_IN) == Decimal("2.5")


def test_a_refused_price_list_names_no_other_teams_models(team, pm, other_team):
    """A PM sent away from the price list (403) is not told, on their next page, which
    unpriced models other teams used."""
    coach = other_team.agents.get(name="coach")
    make_turn(coach, status="done", model="secret-model-9")
    manager = client_for(pm)
    assert manager.get(reverse("admin:teams_modelprice_changelist")).status_code == 403
    assert "secret-model-9" not in manager.get(reverse("admin:index")).content.decode()


def test_a_turn_on_a_model_without_a_price_fails_saying_so(team, agents, messages_api):
    api = messages_api([text("Hello.")])
    coach = agents["coach"]
    coach.model = "claude-mystery-9"
    coach.save()
    team_actions.team_start(team=team)
    drain(team, limit=1)
    turn = Turn.objects.get(team=team, number=1)
    assert api.requests == []  # never sent, rather than counted as $0
    assert turn.status == Turn.Status.FAILED and turn.cost_usd == 0
    assert turn.error == (
        "No price is known for the model 'claude-mystery-9', so Loom does not call it (its "
        "cost could not be counted against the budgets). A superuser adds its price in the "
        "admin, Model prices: a row for 'claude-mystery-9' or a prefix of it, in USD per "
        "million tokens; or choose a model that has a price"
    )
    note = Message.objects.filter(kind=Message.Kind.SYSTEM).order_by("id").last().content
    assert note.startswith("The turn of coach failed: No price is known for the model")
    # The team's page and `serve` say so before any turn: model_problem includes it.
    assert model_problem("claude-mystery-9") == turn.error
    assert model_problem("loom-offline") == "" and model_problem("claude-sonnet-4-6") == ""
    ModelPrice.objects.create(
        model="claude-mystery", input_usd=1, output_usd=5, cache_write_usd=1, cache_read_usd=0
    )
    assert model_problem("claude-mystery-9") == ""


def test_the_offline_model_is_free_even_without_its_row(db):
    ModelPrice.objects.filter(model=catalog.OFFLINE_MODEL).delete()
    assert catalog.price_problem(catalog.OFFLINE_MODEL) == ""
    assert catalog.price_problem("claude-sonnet-4-6") == ""
    assert "'gpt-9'" in catalog.price_problem("gpt-9")
