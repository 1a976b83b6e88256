"""The service errors: each has its HTTP status, and the API answers it as
{"detail": message}."""

import pytest
from django.core.exceptions import ValidationError

from teams.errors import Conflict, InvalidInput, LoomError, NotFound, invalid_from
from tests.helpers import ApiClient


@pytest.mark.parametrize(
    ("error", "status"), [(InvalidInput, 400), (NotFound, 404), (Conflict, 409)]
)
def test_each_error_has_its_status(error, status):
    assert issubclass(error, LoomError) and error("x").status == status


def test_a_django_validation_error_becomes_invalid_input_on_its_field():
    error = invalid_from(ValidationError({"slug": ["Bad slug."]}))
    assert (error.message, error.field) == ("Bad slug.", "slug")


def test_the_api_answers_a_service_error_as_detail(team, superuser):
    from django.test import Client

    client = Client()
    client.force_login(superuser)
    response = ApiClient(client=client).get("/teams/nope")
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}
