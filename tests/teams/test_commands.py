import pytest
from django.core.management import CommandError, call_command

from teams.conversation import pm_requests
from teams.models import Message, Team, Turn
from tests.helpers import drain


def run(*args, capsys):
    call_command("team", *args)
    return capsys.readouterr().out


def test_team_command_start_status_answer(team, agents, capsys):
    out = run("start", "alpha", capsys=capsys)
    assert "status: running" in out and "turns:  0 of 200" in out
    drain(team, limit=2)
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?", turn=None)
    out = run("status", "alpha", capsys=capsys)
    assert "status: awaiting_pm" in out and "turns:  2 of 200" in out
    assert "PM request #" in out and "from coach: Scope?" in out
    assert "cost:   $0.0000" in out
    out = run("answer", "alpha", "Small scope.", capsys=capsys)
    assert "status: running" in out and "PM request" not in out
    assert Message.objects.get(kind="pm").content == "Small scope."
    assert Turn.objects.filter(status="queued").count() == 1


def test_team_command_errors(team, capsys):
    with pytest.raises(CommandError, match="No team with slug 'nope'"):
        call_command("team", "status", "nope")
    with pytest.raises(CommandError, match="no open PM request"):
        call_command("team", "answer", "alpha", "x")
    run("start", "alpha", capsys=capsys)
    with pytest.raises(CommandError, match="is running, not paused"):
        call_command("team", "resume", "alpha")
    run("pause", "alpha", capsys=capsys)
    assert Team.objects.get(slug="alpha").status == "paused"
    assert "status: running" in run("resume", "alpha", capsys=capsys)


def test_sweep_command_once(team, capsys):
    call_command("sweep", "--once")
    assert (
        "re-queued 0, failed 0, re-woken 0, queries expired 0, stalled teams restarted 0"
        in capsys.readouterr().out
    )


def test_serve_refuses_a_port_in_use_with_a_clear_error():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"Cannot listen on 127.0.0.1:{port}.*--port"):
            call_command("serve", "--port", str(port))


def test_create_api_token_prints_the_token_alone_on_the_last_line(team, agents, capsys):
    from teams.models import ApiToken
    from tests.helpers import ApiClient, make_user

    call_command("create_api_token", "alpha", "--agent", "coder", "--label", "ci bot")
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    key = lines[-1]
    assert key.startswith("loom_") and " " not in key
    assert "team token of alpha, acting only as agent coder" in out
    token = ApiToken.objects.get(key_hash=ApiToken.hash_key(key))
    assert (token.team, token.agent, token.name) == (team, agents["coder"], "ci bot")
    assert key not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    reply = ApiClient(key).post("/teams/alpha/agents/coder/tools/pass_turn", {"reason": "ok"})
    assert reply.json()["outcome"]["kind"] == "pass"

    make_user("root", superuser=True)
    call_command("create_api_token", "--user", "root")
    account = capsys.readouterr().out.strip().splitlines()[-1]
    assert ApiClient(account).post("/teams", {"slug": "gamma"}).status_code == 201


def test_create_api_token_errors(team, capsys):
    from tests.helpers import make_user

    for args, message in (
        ((), "Give the team's slug, or --user NAME"),
        (("alpha", "--user", "x"), "not both"),
        (("nope",), "No team with slug 'nope'"),
        (("alpha", "--agent", "nobody"), "no agent named 'nobody'"),
        (("--user", "nobody"), "No user named 'nobody'"),
    ):
        with pytest.raises(CommandError, match=message):
            call_command("create_api_token", *args)
    make_user("eve", staff=False)
    with pytest.raises(CommandError, match="not active staff"):
        call_command("create_api_token", "--user", "eve")


def test_create_api_token_expires_in_and_read_only(team, capsys):
    """Issue 22: tokens may expire (30m, 12h, 90d) and be read-only."""
    from datetime import timedelta

    from django.utils import timezone

    from teams.models import ApiToken
    from tests.helpers import ApiClient

    call_command("create_api_token", "alpha", "--expires-in", "90d", "--read-only")
    out = capsys.readouterr().out
    key = out.strip().splitlines()[-1]
    token = ApiToken.objects.get(key_hash=ApiToken.hash_key(key))
    assert token.read_only
    left = token.expires_at - timezone.now()
    assert timedelta(days=89, hours=23) < left <= timedelta(days=90)
    assert "read-only (no writes, no tool calls), expiring at " in out
    reader = ApiClient(key)
    assert reader.get("/teams/alpha").status_code == 200
    refused = reader.post("/teams/alpha/messages", {"content": "Hi."})
    assert refused.status_code == 403 and "read-only" in refused.json()["detail"]

    for lifetime, hours in (("30m", 0.5), ("12h", 12), (" 2D ", 48)):
        call_command("create_api_token", "alpha", "--expires-in", lifetime)
        key = capsys.readouterr().out.strip().splitlines()[-1]
        token = ApiToken.objects.get(key_hash=ApiToken.hash_key(key))
        assert not token.read_only
        left = (token.expires_at - timezone.now()).total_seconds() / 3600
        assert hours - 0.05 < left <= hours


def test_create_api_token_refuses_a_bad_lifetime_and_makes_nothing(team):
    from teams.models import ApiToken

    for lifetime, message in (
        ("90", "a number and a unit: 30m, 12h or 90d"),
        ("1w", "a number and a unit"),
        ("-5d", "a number and a unit"),
        ("1.5h", "a number and a unit"),
        ("0m", "from 1m to 3650d"),
        ("9999999d", "from 1m to 3650d"),
    ):
        with pytest.raises(CommandError, match=message):
            call_command("create_api_token", "alpha", f"--expires-in={lifetime}")
    assert not ApiToken.objects.exists()
