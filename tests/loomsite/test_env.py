import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from loomsite import env

ROOT = Path(__file__).resolve().parents[2]


def _is_ours(name):
    return name.startswith(("LOOM_", "ANTHROPIC_"))


@pytest.fixture
def load(monkeypatch):
    """load(**variables): env.load() with exactly these Loom variables in the environment."""
    for name in list(os.environ):
        if _is_ours(name):
            monkeypatch.delenv(name)

    def load_with(**variables):
        # DEBUG is off by default and then a key is required: bring one unless the
        # test is about the key (None leaves a variable unset).
        variables.setdefault("LOOM_SECRET_KEY", TEST_KEY)
        for name, value in variables.items():
            if value is not None:
                monkeypatch.setenv(name, value)
        return env.load()

    return load_with


def _error(load, **variables):
    with pytest.raises(ImproperlyConfigured) as exc:
        load(**variables)
    return str(exc.value)


TEST_KEY = "test-key-" + "x" * 50


class TestDefaults:
    def test_debug_is_off_by_default(self, load):
        assert load().debug is False

    def test_the_development_key_is_refused_when_debug_is_off(self, load):
        message = _error(load, LOOM_SECRET_KEY=None)
        assert message.startswith("LOOM_SECRET_KEY is not set and LOOM_DEBUG is off")
        assert load(LOOM_SECRET_KEY=None, LOOM_DEBUG="1").secret_key_is_default is True

    def test_unset_environment(self, load):
        loom = load(LOOM_SECRET_KEY=None, LOOM_DEBUG="1")  # a laptop, as manage.py sets it
        assert loom.data_dir == ROOT / "data"
        assert loom.database_url is None
        assert loom.redis_url is None
        assert loom.secret_key == env.DEV_SECRET_KEY
        assert loom.secret_key_is_default is True
        assert loom.debug is True
        assert loom.allowed_hosts == ["127.0.0.1", "localhost"]
        assert loom.anthropic_api_key is None
        assert loom.anthropic_base_url is None
        assert loom.offline_delay == 4.0
        assert loom.model is None

    def test_empty_is_unset(self, load):
        loom = load(
            LOOM_DATA_DIR="",
            LOOM_DATABASE_URL="",
            LOOM_REDIS_URL=" ",
            LOOM_SECRET_KEY="",
            LOOM_DEBUG="1",
            ANTHROPIC_API_KEY="",
            ANTHROPIC_BASE_URL="",
            LOOM_OFFLINE_DELAY="",
            LOOM_MODEL="",
        )
        assert loom.data_dir == ROOT / "data"
        assert loom.database["NAME"] == str(ROOT / "data" / "loom.sqlite3")
        assert loom.channel_layer["BACKEND"].endswith("InMemoryChannelLayer")
        assert loom.secret_key_is_default is True
        assert (loom.anthropic_api_key, loom.anthropic_base_url) == (None, None)
        assert loom.offline_delay == 4.0
        assert loom.model is None

    def test_secret_key(self, load):
        loom = load(LOOM_SECRET_KEY="s" * 50)
        assert loom.secret_key == "s" * 50
        assert loom.secret_key_is_default is False

    def test_anthropic_api_key(self, load):
        assert load(ANTHROPIC_API_KEY="sk-x").anthropic_api_key == "sk-x"

    def test_names_are_exact(self, load):
        assert load(loom_debug="maybe").debug is False

    def test_https_and_trusted_origins(self, load):
        assert load().csrf_trusted_origins == [] and load().https is False
        loom = load(LOOM_HTTPS="1", LOOM_CSRF_TRUSTED_ORIGINS="https://a.example, http://b:8080")
        assert loom.https is True and loom.hsts_seconds == 31_536_000
        assert loom.csrf_trusted_origins == ["https://a.example", "http://b:8080"]

    @pytest.mark.parametrize("value", ["a.example", "ftp://a.example", "https://a.example/path"])
    def test_bad_trusted_origins(self, load, value):
        message = _error(load, LOOM_CSRF_TRUSTED_ORIGINS=value)
        assert message.startswith(f"LOOM_CSRF_TRUSTED_ORIGINS={value!r} lists")
        assert "not an origin" in message


class TestDatabaseUrl:
    def test_unset_is_sqlite_under_data_dir_with_wal_and_immediate(self, load, tmp_path):
        db = load(LOOM_DATA_DIR=str(tmp_path)).database
        assert db["ENGINE"] == "django.db.backends.sqlite3"
        assert db["NAME"] == str(tmp_path / "loom.sqlite3")
        assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
        assert db["OPTIONS"]["timeout"] == 20
        assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
        assert db["TEST"]["NAME"] == str(tmp_path / "test-loom.sqlite3")

    def test_sqlite_relative_path(self, load):
        db = load(LOOM_DATABASE_URL="sqlite:///rel.db").database
        assert (db["NAME"], db["TEST"]["NAME"]) == ("rel.db", "test-rel.db")
        assert db["OPTIONS"] == env.SQLITE_OPTIONS

    def test_sqlite_absolute_path(self, load):
        db = load(LOOM_DATABASE_URL="sqlite:////var/lib/loom/x.db").database
        assert db["NAME"] == "/var/lib/loom/x.db"
        assert db["TEST"]["NAME"] == "/var/lib/loom/test-x.db"
        assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"

    def test_sqlite_memory(self, load):
        db = load(LOOM_DATABASE_URL="sqlite://:memory:").database
        assert db["NAME"] == ":memory:"
        assert db["TEST"]["NAME"] is None

    def test_postgres_url(self, load):
        db = load(
            LOOM_DATABASE_URL="postgres://loom:s%40cret@db.example:6543/loomdb?sslmode=require"
        ).database
        assert db["ENGINE"] == "django.db.backends.postgresql"
        assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("loomdb", "loom", "s@cret")
        assert (db["HOST"], db["PORT"]) == ("db.example", "6543")
        assert db["OPTIONS"] == {"sslmode": "require"}
        assert (db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"]) == (600, True)

    def test_postgres_without_options_or_port(self, load):
        db = load(LOOM_DATABASE_URL="postgresql://db.example/loomdb").database
        assert (db["HOST"], db["PORT"], db["OPTIONS"]) == ("db.example", "", {})

    @pytest.mark.parametrize(
        "value, fragment",
        [
            ("mysql://root@localhost/x", "unknown scheme 'mysql'"),
            ("oracle://x/y", "unknown scheme 'oracle'"),
            ("postgres://localhost:notaport/x", "not a valid URL"),
            ("postgres://localhost", "without a database name"),
            ("sqlite://", "without a file path"),
        ],
    )
    def test_bad_values_name_the_variable(self, load, value, fragment):
        message = _error(load, LOOM_DATABASE_URL=value)
        assert message.startswith("LOOM_DATABASE_URL ")
        assert fragment in message

    def test_password_stays_out_of_the_message(self, load):
        message = _error(load, LOOM_DATABASE_URL="mysql://root:hunter2@localhost/x")
        assert "LOOM_DATABASE_URL" in message
        assert "hunter2" not in message


class TestRedisUrl:
    def test_unset_is_in_memory(self, load):
        assert load().channel_layer == {"BACKEND": "channels.layers.InMemoryChannelLayer"}

    def test_set_is_channels_redis(self, load):
        loom = load(LOOM_REDIS_URL="redis://127.0.0.1:6379/2")
        assert loom.redis_url == "redis://127.0.0.1:6379/2"
        layer = loom.channel_layer
        assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
        (host,) = layer["CONFIG"]["hosts"]
        assert host["address"] == "redis://127.0.0.1:6379/2"
        # Longer than channels-redis's 5 s blocking pop, or idle workers crash.
        assert host["socket_timeout"] == 30
        assert (layer["CONFIG"]["capacity"], layer["CONFIG"]["expiry"]) == (1000, 60)

    @pytest.mark.parametrize("value", ["rediss://cache.example:6380/0", "unix:///run/redis.sock"])
    def test_other_schemes(self, load, value):
        assert load(LOOM_REDIS_URL=value).channel_layer["CONFIG"]["hosts"][0]["address"] == value

    @pytest.mark.parametrize(
        "value, fragment",
        [
            ("http://x", "unknown scheme 'http'"),
            ("amqp://x", "unknown scheme 'amqp'"),
            ("redis://:99999999", "not a valid URL"),
            ("redis://", "without a host"),
        ],
    )
    def test_bad_values(self, load, value, fragment):
        message = _error(load, LOOM_REDIS_URL=value)
        assert message.startswith("LOOM_REDIS_URL ")
        assert fragment in message

    def test_parse_redis_url_names_its_variable(self):
        # For a Redis URL read outside LoomEnv (tests/teams/test_scaled_out.py).
        assert env.parse_redis_url(None, "X")["BACKEND"].endswith("InMemoryChannelLayer")
        layer = env.parse_redis_url("redis://127.0.0.1:6379/3", "LOOM_TEST_REDIS_URL")
        assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
        with pytest.raises(ImproperlyConfigured, match="LOOM_TEST_REDIS_URL"):
            env.parse_redis_url("amqp://x", "LOOM_TEST_REDIS_URL")


class TestScalars:
    @pytest.mark.parametrize(
        "value, expected",
        [
            ("1", True),
            ("true", True),
            ("Yes", True),
            (" on ", True),
            ("0", False),
            ("false", False),
            ("No", False),
            ("off", False),
            ("", False),
        ],
    )
    def test_debug(self, load, value, expected):
        assert load(LOOM_DEBUG=value).debug is expected

    @pytest.mark.parametrize("value", ["maybe", "2", "t", "y"])
    def test_debug_is_strict(self, load, value):
        message = _error(load, LOOM_DEBUG=value)
        assert message.startswith(f"LOOM_DEBUG={value!r} is not a boolean")

    def test_hosts(self, load):
        assert load(LOOM_ALLOWED_HOSTS="a.example, b.example").allowed_hosts == [
            "a.example",
            "b.example",
        ]
        assert load(LOOM_ALLOWED_HOSTS="loom.example,").allowed_hosts == ["loom.example"]

    @pytest.mark.parametrize(
        "value, fragment",
        [
            ("", "lists no host"),
            (" , ", "lists no host"),
            ("http://x/", "not a host name"),
            ("a.example, b example", "not a host name"),
        ],
    )
    def test_bad_hosts(self, load, value, fragment):
        message = _error(load, LOOM_ALLOWED_HOSTS=value)
        assert message.startswith("LOOM_ALLOWED_HOSTS")
        assert fragment in message

    @pytest.mark.parametrize("value", ["http://127.0.0.1:9", "https://api.example/v1/"])
    def test_anthropic_base_url(self, load, value):
        assert load(ANTHROPIC_BASE_URL=value).anthropic_base_url == value

    @pytest.mark.parametrize("value", ["ftp://x", "not a url", "http://", "http://h:port"])
    def test_bad_anthropic_base_url(self, load, value):
        assert _error(load, ANTHROPIC_BASE_URL=value).startswith(f"ANTHROPIC_BASE_URL={value!r}")

    def test_outbound_allow_private_and_webhook_concurrency(self, load):
        loom = load()
        assert (loom.outbound_allow_private, loom.webhook_concurrency) == (False, 4)
        loom = load(LOOM_OUTBOUND_ALLOW_PRIVATE="1", LOOM_WEBHOOK_CONCURRENCY="8")
        assert (loom.outbound_allow_private, loom.webhook_concurrency) == (True, 8)
        assert "is not a boolean" in _error(load, LOOM_OUTBOUND_ALLOW_PRIVATE="maybe")
        assert "must be at most 32" in _error(load, LOOM_WEBHOOK_CONCURRENCY="33")

    @pytest.mark.parametrize("value, seconds", [("0", 0.0), ("0.25", 0.25), ("60", 60.0)])
    def test_offline_delay(self, load, value, seconds):
        assert load(LOOM_OFFLINE_DELAY=value).offline_delay == seconds

    @pytest.mark.parametrize(
        "value, fragment",
        [("soon", "is not a number"), ("-1", "must be at least 0"), ("61", "must be at most 60")],
    )
    def test_bad_offline_delay(self, load, value, fragment):
        assert _error(load, LOOM_OFFLINE_DELAY=value) == f"LOOM_OFFLINE_DELAY={value!r} {fragment}."

    def test_model(self, load):
        assert load(LOOM_MODEL="claude-haiku-4-5").model == "claude-haiku-4-5"
        assert load(LOOM_MODEL=" loom-offline ").model == "loom-offline"
        assert load(LOOM_MODEL="claude-" + "m" * 93).model == "claude-" + "m" * 93
        assert load(LOOM_MODEL="ollama/qwen3:8b").model == "ollama/qwen3:8b"
        assert load(LOOM_MODEL="openrouter/meta-llama/llama-4-scout").model == (
            "openrouter/meta-llama/llama-4-scout"
        )

    @pytest.mark.parametrize(
        "value, fragment",
        [
            ("two words", "whitespace"),
            ("m" * 101, "longer than 100"),
            ("gpt-4", "a model no endpoint serves: write ENDPOINT/MODEL"),
            ("claude-", "a model no endpoint serves"),
            ("Open AI/gpt-5", "whitespace"),
            ("OpenAI/gpt-5", "'OpenAI' before the slash is no endpoint name"),
            ("ollama/", "no model follows the endpoint 'ollama'"),
        ],
    )
    def test_bad_model(self, load, value, fragment):
        message = _error(load, LOOM_MODEL=value)
        assert message.startswith(f"LOOM_MODEL={value!r} is ")
        assert fragment in message


def test_every_bad_variable_is_listed_in_one_message(load):
    message = _error(
        load,
        LOOM_DEBUG="maybe",
        LOOM_OFFLINE_DELAY="soon",
        LOOM_MODEL="a model",
        LOOM_DATABASE_URL="oracle://x/y",
    )
    for name in ("LOOM_DEBUG", "LOOM_OFFLINE_DELAY", "LOOM_MODEL", "LOOM_DATABASE_URL"):
        assert name in message
    assert "LOOM_DEBUG='maybe' is not a boolean" in message


def _start(extra_env):
    """Run `manage.py check` in a child with the given environment."""
    child_env = {k: v for k, v in os.environ.items() if not _is_ours(k)}
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
    assert f"ImproperlyConfigured: {name}" in result.stderr


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
    child_env = {k: v for k, v in os.environ.items() if not _is_ours(k)}
    child_env.update(
        {"LOOM_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "loomsite.settings"}
    )
    child_env.update(extra_env)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_secret_key_default_is_flagged_and_env_wins(tmp_path):
    assert _settings({"LOOM_DEBUG": "1"}, tmp_path, "SECRET_KEY_IS_DEFAULT") == ["True"]
    key = "s" * 50
    assert _settings({"LOOM_SECRET_KEY": key}, tmp_path, "SECRET_KEY", "SECRET_KEY_IS_DEFAULT") == [
        repr(key),
        "False",
    ]


def test_data_dir_holds_the_default_database(tmp_path):
    (name,) = _settings({"LOOM_DEBUG": "1"}, tmp_path, "DATABASES['default']['NAME']")
    assert name == repr(str(tmp_path / "loom.sqlite3"))


def test_unset_environment_reaches_settings(tmp_path):
    assert _settings(
        {"LOOM_DEBUG": "1"},  # and the development key: a laptop
        tmp_path,
        "DEBUG",
        "ALLOWED_HOSTS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "LOOM_MODEL",
        "LOOM_OFFLINE_DELAY",
        "REDIS_URL",
        "CHANNEL_LAYERS['default']['BACKEND']",
    ) == [
        "True",
        "['127.0.0.1', 'localhost']",
        "None",
        "None",
        "None",
        "4.0",
        "None",
        "'channels.layers.InMemoryChannelLayer'",
    ]


def test_environment_reaches_settings(tmp_path):
    values = _settings(
        {
            "LOOM_DEBUG": "false",
            "LOOM_SECRET_KEY": TEST_KEY,
            "LOOM_ALLOWED_HOSTS": "loom.example",
            "ANTHROPIC_API_KEY": "sk-x",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "LOOM_MODEL": "claude-haiku-4-5",
            "LOOM_OFFLINE_DELAY": "0.5",
            "LOOM_REDIS_URL": "redis://127.0.0.1:6379/1",
        },
        tmp_path,
        "DEBUG",
        "ALLOWED_HOSTS",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "LOOM_MODEL",
        "LOOM_OFFLINE_DELAY",
        "CHANNEL_LAYERS['default']['BACKEND']",
    )
    assert values == [
        "False",
        "['loom.example']",
        "'sk-x'",
        "'http://127.0.0.1:9'",
        "'claude-haiku-4-5'",
        "0.5",
        "'channels_redis.core.RedisChannelLayer'",
    ]
