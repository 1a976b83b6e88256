"""Login lockout per address across usernames (loomsite/lockout.py; issue 22)."""

import pytest
from django.test import Client

from tests.helpers import PASSWORD, make_user


def login(client, username, password="wrong", address="203.0.113.9"):
    return client.post(
        "/admin/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


@pytest.mark.django_db
def test_one_address_trying_one_password_on_every_account_is_locked_out(settings):
    settings.LOOM_LOGIN_ADDRESS_FAILURES = 20
    make_user("alice", superuser=True)
    attacker = Client()
    # One wrong password each for 20 usernames: no user reached its own limit of 5...
    for n in range(20):
        login(attacker, f"user{n}")
    # ...but the address did: even alice's right password is refused from it.
    response = login(attacker, "alice", PASSWORD)
    assert response.status_code == 429  # django-axes: Too Many Requests
    assert "_auth_user_id" not in attacker.session
    # Alice, from her own address, logs in as usual.
    alice = Client()
    assert login(alice, "alice", PASSWORD, address="198.51.100.7").status_code == 302


@pytest.mark.django_db
def test_an_offices_typos_below_the_address_limit_lock_nobody_out(settings):
    settings.LOOM_LOGIN_ADDRESS_FAILURES = 20
    office = Client()
    for name in ("alice", "bob", "carol", "dave"):
        make_user(name, superuser=True)
    # Four people behind one NAT mistype a few times each: 16 failures in all.
    for name in ("alice", "bob", "carol", "dave"):
        for _ in range(4):
            login(office, name)
    for name in ("alice", "bob", "carol", "dave"):
        response = login(Client(), name, PASSWORD)
        assert response.status_code == 302, name


@pytest.mark.django_db
def test_a_successful_login_does_not_clear_the_addresss_other_failures(settings):
    """An attacker with one working account cannot reset the address count by using it."""
    settings.LOOM_LOGIN_ADDRESS_FAILURES = 10
    make_user("mallory", superuser=True)
    make_user("alice", superuser=True)
    attacker = Client()
    for n in range(9):
        login(attacker, f"user{n}")
    assert login(attacker, "mallory", PASSWORD).status_code == 302
    login(Client(), "user9")  # the tenth failure from the address
    assert login(Client(), "alice", PASSWORD).status_code == 429  # django-axes: Too Many Requests
