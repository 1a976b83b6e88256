"""Consultant profiles in the admin: an A2A agent's card URL, checked by the outbound
guard as the API checks it."""

import pytest
from django.urls import reverse

from teams.models import ConsultantProfile
from tests.helpers import client_for

pytestmark = pytest.mark.django_db


def test_the_admin_takes_an_a2a_consultant_and_refuses_a_url_inside(superuser, settings):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    client = client_for(superuser)
    add = reverse("admin:teams_consultantprofile_add")
    body = {"name": "scout", "provider": "a2a", "model": "a2a", "key_env": "SCOUT_A2A_TOKEN"}
    inside = client.post(add, {**body, "a2a_url": "http://127.0.0.1:9/a2a/x/"})
    assert "loopback" in " ".join(inside.context["adminform"].form.errors["a2a_url"])
    both = client.post(
        add, {**body, "a2a_url": "https://a.example.test/", "base_url": "https://b.example.test/"}
    )
    assert "leave base_url empty" in " ".join(both.context["adminform"].form.errors["base_url"])
    assert not ConsultantProfile.objects.exists()
    saved = client.post(add, {**body, "a2a_url": "https://a.example.test/a2a/x/"})
    assert saved.status_code == 302
    assert ConsultantProfile.objects.get().a2a_url == "https://a.example.test/a2a/x/"
