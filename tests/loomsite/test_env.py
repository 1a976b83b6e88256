import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from loomsite import env

ROOT = Path(__file__).resolve().parents[2]


class TestDatabaseUrl:
    def test_unset_is_sqlite_under_data_dir_with_wal_and_immediate(self, tmp_path):
        db = env.parse_database_url(None, "LOOM_DATABASE_URL", tmp_path)
        assert db["ENGINE"] == "django.db.backends.sqlite3"
        assert db["NAME"] == str(tmp_path / "loom.sqlite3")
        assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
        assert db["OPTIONS"]["timeout"] >= 5
        assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]

    def test_sqlite_absolute_path(self, tmp_path):
        db = env.parse_database_url("sqlite:////var/lib/loom/x.db", "V", tmp_path)
        assert db["NAME"] == "/var/lib/loom/x.db"

    def test_postgres_url(self, tmp_path):
        db = env.parse_database_url(
            "postgres://loom:s%40cret@db.example:6543/loomdb?sslmode=require", "V", tmp_path
        )
        assert db["ENGINE"] == "django.db.backends.postgresql"
        assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("loomdb", "loom", "s@cret")
        assert (db["HOST"], db["PORT"]) == ("db.example", "6543")
        assert db["OPTIONS"] == {"sslmode": "require"}

    @pytest.mark.parametrize(
        "value, fragment",
        [
            ("mysql://root@localhost/x", "unknown scheme"),
            ("postgres://localhost:notaport/x", "not a valid URL"),
            ("postgres://localhost", "needs a database name"),
            ("sqlite://", "needs a file path"),
        ],
    )
    def test_bad_values_name_the_variable(self, value, fragment, tmp_path):
        with pytest.raises(ImproperlyConfigured) as exc:
            env.parse_database_url(value, "LOOM_DATABASE_URL", tmp_path)
        assert "LOOM_DATABASE_URL" in str(exc.value)
        assert fragment in str(exc.value)


class TestRedisUrl:
    def test_unset_is_in_memory(self):
        assert env.parse_redis_url(None, "LOOM_REDIS_URL")["BACKEND"].endswith(
            "InMemoryChannelLayer"
        )

    def test_set_is_channels_redis(self):
        layer = env.parse_redis_url("redis://127.0.0.1:6379/2", "LOOM_REDIS_URL")
        assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
        (host,) = layer["CONFIG"]["hosts"]
        assert host["address"] == "redis://127.0.0.1:6379/2"
        # Longer than channels-redis's 5 s blocking pop, or idle workers crash.
        assert host["socket_timeout"] > 5

    @pytest.mark.parametrize("value", ["http://x", "redis://:99999999", "redis://"])
    def test_bad_values(self, value):
        with pytest.raises(ImproperlyConfigured, match="LOOM_REDIS_URL"):
            env.parse_redis_url(value, "LOOM_REDIS_URL")


class TestScalars:
    @pytest.mark.parametrize(
        "value, expected", [("1", True), ("true", True), ("No", False), ("0", False)]
    )
    def test_bool(self, value, expected):
        assert env.parse_bool(value, "LOOM_DEBUG") is expected

    def test_bool_default_and_bad(self):
        assert env.parse_bool(None, "LOOM_DEBUG", default=True) is True
        with pytest.raises(ImproperlyConfigured, match="LOOM_DEBUG"):
            env.parse_bool("maybe", "LOOM_DEBUG")

    def test_hosts(self):
        assert env.parse_hosts("a.example, b.example", "H", []) == ["a.example", "b.example"]
        assert env.parse_hosts(None, "H", ["localhost"]) == ["localhost"]
        with pytest.raises(ImproperlyConfigured, match="LOOM_ALLOWED_HOSTS"):
            env.parse_hosts(" , ", "LOOM_ALLOWED_HOSTS", [])
        with pytest.raises(ImproperlyConfigured, match="LOOM_ALLOWED_HOSTS"):
            env.parse_hosts("http://x/", "LOOM_ALLOWED_HOSTS", [])

    def test_anthropic_base_url(self):
        assert env.parse_url(None, "ANTHROPIC_BASE_URL") is None
        assert env.parse_url("http://127.0.0.1:9/", "X") == "http://127.0.0.1:9/"
        with pytest.raises(ImproperlyConfigured, match="ANTHROPIC_BASE_URL"):
            env.parse_url("ftp://x", "ANTHROPIC_BASE_URL")

    def test_seconds(self):
        assert env.parse_seconds(None, "LOOM_OFFLINE_DELAY", 1.0) == 1.0
        assert env.parse_seconds("0.25", "LOOM_OFFLINE_DELAY", 1.0) == 0.25
        with pytest.raises(ImproperlyConfigured, match="LOOM_OFFLINE_DELAY"):
            env.parse_seconds("soon", "LOOM_OFFLINE_DELAY", 1.0)

    def test_model(self):
        assert env.parse_model(None, "LOOM_MODEL", "claude-x") == "claude-x"
        assert env.parse_model("claude-haiku-4-5", "LOOM_MODEL", "d") == "claude-haiku-4-5"
        with pytest.raises(ImproperlyConfigured, match="LOOM_MODEL"):
            env.parse_model("two words", "LOOM_MODEL", "d")


def _start(extra_env):
    """Run `manage.py check` in a child with the given environment."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "ANTHROPIC_"))}
    child_env.update(extra_env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "name, value",
    [
        ("LOOM_DATABASE_URL", "oracle://x/y"),
        ("LOOM_REDIS_URL", "amqp://x"),
        ("LOOM_DEBUG", "perhaps"),
        ("LOOM_ALLOWED_HOSTS", ","),
        ("ANTHROPIC_BASE_URL", "not a url"),
        ("LOOM_MODEL", "a model"),
        ("LOOM_OFFLINE_DELAY", "-1"),
    ],
)
def test_bad_value_stops_start_up_naming_the_variable(name, value, tmp_path):
    result = _start({name: value, "LOOM_DATA_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert name in result.stderr


def test_good_environment_starts(tmp_path):
    result = _start(
        {
            "LOOM_DATA_DIR": str(tmp_path),
            "LOOM_SECRET_KEY": "k" * 50,
            "LOOM_DEBUG": "0",
            "LOOM_ALLOWED_HOSTS": "loom.example",
            "LOOM_MODEL": "claude-haiku-4-5",
        }
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def _settings(extra_env, tmp_path, *names):
    code = "from django.conf import settings; " + "; ".join(
        f"print(repr(settings.{name}))" for name in names
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "ANTHROPIC_"))}
    env.update({"LOOM_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "loomsite.settings"})
    env.update(extra_env)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_secret_key_default_is_flagged_and_env_wins(tmp_path):
    assert _settings({}, tmp_path, "SECRET_KEY_IS_DEFAULT") == ["True"]
    key = "s" * 50
    assert _settings({"LOOM_SECRET_KEY": key}, tmp_path, "SECRET_KEY", "SECRET_KEY_IS_DEFAULT") == [
        repr(key),
        "False",
    ]


def test_data_dir_holds_the_default_database(tmp_path):
    (name,) = _settings({}, tmp_path, "DATABASES['default']['NAME']")
    assert name == repr(str(tmp_path / "loom.sqlite3"))


def test_environment_reaches_settings(tmp_path):
    values = _settings(
        {
            "LOOM_DEBUG": "false",
            "LOOM_ALLOWED_HOSTS": "loom.example",
            "ANTHROPIC_API_KEY": "sk-x",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "LOOM_MODEL": "claude-haiku-4-5",
            "LOOM_REDIS_URL": "redis://127.0.0.1:6379/1",
        },
        tmp_path,
        "DEBUG",
        "ALLOWED_HOSTS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "LOOM_MODEL",
        "CHANNEL_LAYERS['default']['BACKEND']",
    )
    assert values == [
        "False",
        "['loom.example']",
        "'sk-x'",
        "'http://127.0.0.1:9'",
        "'claude-haiku-4-5'",
        "'channels_redis.core.RedisChannelLayer'",
    ]
