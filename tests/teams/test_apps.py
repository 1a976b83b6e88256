"""The app's start-up: the catalog reads prices from the ModelPrice rows once the app
registry is ready (not as a side effect of importing the models)."""

from decimal import Decimal

from teams import models
from teams.lib import catalog


def test_the_price_loader_is_the_models_rows():
    assert catalog._price_rows is models.price_rows


def test_a_price_row_is_what_the_catalog_charges(db):
    models.ModelPrice.objects.create(
        model="test-model", input_usd=2, output_usd=8, cache_write_usd=0, cache_read_usd=0
    )
    cost = catalog.cost_of("test-model", catalog.Usage(input_tokens=1_000_000))
    assert cost == Decimal(2)
