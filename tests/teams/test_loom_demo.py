import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from teams.models import ConsultantProfile, Team


def test_loom_demo_twice_leaves_one_demo_team(db, capsys, monkeypatch):
    monkeypatch.delenv("LOOM_ADMIN_PASSWORD", raising=False)
    call_command("loom_demo")
    first = capsys.readouterr().out
    call_command("loom_demo")
    second = capsys.readouterr().out
    assert Team.objects.filter(slug="demo").count() == 1
    team = Team.objects.get(slug="demo")
    assert sorted(a.name for a in team.agents.all()) == ["coach", "coder", "researcher", "reviewer"]
    assert team.goal
    assert "password" in first and "password" not in second
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and team.managers.filter(pk=admin.pk).exists()
    # Two offline consultants with different strengths: the demo consults with no key.
    profiles = list(ConsultantProfile.objects.values_list("name", "provider", "strengths"))
    assert profiles == [
        ("architect", "offline", "architecture, patterns, scalability"),
        ("critic", "offline", "correctness, logic, edge cases"),
    ]
    assert "Created the offline consultant 'critic'" in first and "consultant" not in second


def test_loom_demo_uses_admin_password_from_env(db, monkeypatch):
    monkeypatch.setenv("LOOM_ADMIN_PASSWORD", "correct horse battery")
    call_command("loom_demo")
    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password("correct horse battery")


@pytest.mark.parametrize("weak", ["a", "password", "12345678901"])
def test_a_weak_admin_password_is_refused_and_no_account_is_made(db, monkeypatch, weak):
    from django.core.management.base import CommandError

    monkeypatch.setenv("LOOM_ADMIN_PASSWORD", weak)
    with pytest.raises(CommandError, match="LOOM_ADMIN_PASSWORD is too weak: "):
        call_command("loom_demo")
    assert not get_user_model().objects.filter(username="admin").exists()


def test_loom_demo_makes_the_pm_group_with_exactly_its_permissions(db, monkeypatch):
    from django.contrib.auth.models import Group, Permission

    from teams.pm_group import PM_GROUP, PM_PERMISSIONS

    monkeypatch.setenv("LOOM_ADMIN_PASSWORD", "correct horse")
    call_command("loom_demo")
    group = Group.objects.get(name=PM_GROUP)
    group.permissions.add(Permission.objects.get(codename="delete_team"))  # drifted
    call_command("loom_demo")
    assert Group.objects.filter(name=PM_GROUP).count() == 1
    codenames = set(group.permissions.values_list("codename", flat=True))
    assert codenames == set(PM_PERMISSIONS)
    assert {"view_team", "change_team", "change_pmrequest", "view_apitoken"} <= codenames
    # Their teams' tokens: made (shown once) and revoked; their teams' webhooks made and
    # deleted; their teams' MCP servers (HTTP ones) added and deleted; nothing else.
    added_or_deleted = {c for c in codenames if c.startswith(("add_", "delete_"))}
    assert added_or_deleted == {
        "add_apitoken",
        "add_webhook",
        "delete_webhook",
        "add_mcpserver",
        "delete_mcpserver",
    }
    assert "change_apitoken" in codenames and "view_consultantprofile" not in codenames


def test_loom_demo_lists_its_mcp_servers_tools_as_the_server_itself_does(db, capsys):
    """The demo's MCP tools are listed in process (no child started at set-up), and the
    listing is exactly what the server answers over stdio when a turn starts it."""
    from teams.engine import mcp_client
    from teams.models import McpServer

    call_command("loom_demo")
    assert "Registered the demo MCP server 'demo' (outline, word_count; ask)." in (
        capsys.readouterr().out
    )
    server = McpServer.objects.get(team__slug="demo", name="demo")
    assert server.listed_at is not None and server.error == ""
    assert [t["name"] for t in server.tools] == ["outline", "word_count"]
    assert "not a file path" in server.tools[0]["input_schema"]["properties"]["text"]["description"]
    over_stdio = mcp_client.refresh(server)
    assert over_stdio.error == "" and over_stdio.tools == server.tools
