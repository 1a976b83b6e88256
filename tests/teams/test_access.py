"""Who a caller is and what it may reach: a slug is looked up only when it could be
a team's (the model's own rule and length)."""

import pytest

from teams.access import SLUG_MAX, _is_slug
from teams.models import Team


def test_the_slug_length_is_the_models():
    assert SLUG_MAX == Team._meta.get_field("slug").max_length


@pytest.mark.parametrize("slug", ["alpha", "a-1", "x" * SLUG_MAX])
def test_a_team_slug_is_looked_up(slug):
    assert _is_slug(slug)


@pytest.mark.parametrize("slug", ["", "Alpha", "a--b", "-a", "a-", "a_b", "x" * (SLUG_MAX + 1)])
def test_anything_else_is_not(slug):
    assert not _is_slug(slug)
