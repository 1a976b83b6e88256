"""What a careful operator expects of a production configuration (issue 9)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "LOOM_DEBUG": "0",
    "LOOM_ALLOWED_HOSTS": "loom.example.com",
    "LOOM_HTTPS": "1",
    "LOOM_CSRF_TRUSTED_ORIGINS": "https://loom.example.com",
}


def manage(*args, data_dir, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "ANTHROPIC_"))}
    env.update(LOOM_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="loomsite.settings")
    env.update(variables)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_is_clean_with_the_documented_production_variables(tmp_path):
    key = secrets.token_urlsafe(50)
    result = manage("check", "--deploy", data_dir=tmp_path, LOOM_SECRET_KEY=key, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_without_a_secret_key_and_debug_off_nothing_starts(tmp_path):
    result = manage("check", data_dir=tmp_path, **PRODUCTION)
    assert result.returncode != 0
    assert "LOOM_SECRET_KEY is not set and LOOM_DEBUG is off" in result.stderr


def test_debug_is_off_unless_asked_for_or_on_a_bare_laptop(tmp_path):
    show = ["shell", "-c", "from django.conf import settings; print(settings.DEBUG)"]
    assert manage(*show, data_dir=tmp_path, LOOM_SECRET_KEY="k" * 60).stdout.split()[-1] == "False"
    # Nothing configured at all: manage.py's local default (make run).
    assert manage(*show, data_dir=tmp_path).stdout.split()[-1] == "True"


def test_loom_creates_its_data_folder_and_database_for_its_user_alone(tmp_path):
    data = tmp_path / "data"
    manage("check", data_dir=data)
    assert (data.stat().st_mode & 0o777) == 0o700
    assert ((data / "loom.sqlite3").stat().st_mode & 0o777) == 0o600


def test_an_older_installs_readable_files_are_tightened(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "loom.sqlite3").touch(mode=0o644)
    (data / "loom.sqlite3").chmod(0o644)
    data.chmod(0o755)
    manage("check", data_dir=data, LOOM_DEBUG="1")
    assert (data.stat().st_mode & 0o777) == 0o700
    assert ((data / "loom.sqlite3").stat().st_mode & 0o777) == 0o600


def test_a_half_configured_server_does_not_fall_back_to_debug(tmp_path):
    show = ["shell", "-c", "from django.conf import settings; print(settings.DEBUG)"]
    result = manage(*show, data_dir=tmp_path, LOOM_ALLOWED_HOSTS="loom.example.com")
    assert result.returncode != 0 and "LOOM_SECRET_KEY is not set" in result.stderr


def test_every_page_sends_a_content_security_policy(client, db):
    policy = client.get("/admin/login/")["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


def test_a_404_lists_no_url_patterns(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"admin/" not in response.content and b"URLconf" not in response.content


@pytest.mark.django_db
def test_failed_logins_are_throttled_per_user_and_address_and_logged(client):
    import logging

    from axes.models import AccessAttempt

    from tests.helpers import PASSWORD, make_user

    logged = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = logged.append
    logging.getLogger("axes").addHandler(handler)

    make_user("alice", superuser=True)
    make_user("bob", superuser=True)
    for _ in range(5):
        client.post("/admin/login/", {"username": "alice", "password": "wrong"})
    response = client.post("/admin/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429  # django-axes: Too Many Requests
    assert "_auth_user_id" not in client.session  # the right password is refused too
    assert AccessAttempt.objects.get(username="alice").failures_since_start >= 5
    logging.getLogger("axes").removeHandler(handler)
    lines = [record.getMessage() for record in logged]
    assert any('username: "alice"' in line for line in lines), lines
    assert not any("wrong" in line for line in lines)  # the password is never logged
    # Another user from the same address is not locked out.
    response = client.post("/admin/login/", {"username": "bob", "password": PASSWORD})
    assert response.status_code == 302 and client.session["_auth_user_id"]


@pytest.mark.django_db
def test_behind_a_trusted_proxy_throttling_keys_on_the_address_the_proxy_saw(client, settings):
    from tests.helpers import PASSWORD, make_user

    settings.LOOM_TRUSTED_PROXIES = 1
    make_user("alice", superuser=True)

    def attempt(forwarded, password="wrong"):
        return client.post(
            "/admin/login/",
            {"username": "alice", "password": password},
            REMOTE_ADDR="10.0.0.1",  # the proxy
            HTTP_X_FORWARDED_FOR=forwarded,
        )

    # An attacker at 203.0.113.9 rotates what it claims on the left: still one address.
    for i in range(5):
        attempt(f"10.9.{i}.1, 203.0.113.9")
    assert attempt("10.9.99.1, 203.0.113.9", PASSWORD).status_code == 429
    # The real admin, elsewhere behind the same proxy, is not locked out.
    response = attempt("198.51.100.7", PASSWORD)
    assert response.status_code == 302
