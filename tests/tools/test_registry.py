import pytest

from tools import registry
from tools.base import MAX_RESULT_CHARS, Params, Tool, ToolContext, truncate


@pytest.fixture
def ctx(team, agents):
    return ToolContext(team=team, agent=agents["coder"])


def test_definitions_render_anthropic_tools(team, agents):
    defs = {d["name"]: d for d in registry.definitions(registry.toolset(agents["coach"], team))}
    assert defs["pass_turn"]["input_schema"]["required"] == ["reason"]
    assert defs["pass_turn"]["description"].startswith("Call this when you have nothing new")
    assert defs["ask_pm"]["input_schema"]["properties"]["question"]["type"] == "string"
    assert "title" not in defs["ask_pm"]["input_schema"]
    peer = defs["peer_discovery"]["input_schema"]
    assert "role" in peer["properties"] and "required" not in peer


def test_toolsets_by_role(team, agents):
    coach = {t.name for t in registry.toolset(agents["coach"], team)}
    coder = {t.name for t in registry.toolset(agents["coder"], team)}
    assert {"ask_pm", "signal_phase_complete", "pass_turn"} <= coach
    assert "pass_turn" in coder and "ask_pm" not in coder


def test_validation_problem_is_friendly_error(ctx):
    result = registry.execute("peer_message", {"to": "reviewer"}, ctx)
    assert result.is_error
    assert result.text.startswith("Error: Invalid arguments for peer_message: content")


def test_unknown_keys_and_bad_json_refused(ctx):
    assert registry.execute("pass_turn", {"reason": "x", "team_id": 3}, ctx).is_error
    assert "JSON object" in registry.execute("pass_turn", "{not json", ctx).text
    assert registry.execute("pass_turn", '{"reason": "ok"}', ctx).text == "Turn passed."


def test_tool_outside_the_toolset_is_refused(ctx, team, agents):
    allowed = registry.toolset(agents["coder"], team)
    result = registry.execute("ask_pm", {"question": "q"}, ctx, allowed)
    assert result.is_error and "not available" in result.text


class Boom(Tool):
    name = "boom_test"
    description = "Fails."

    class Params(Params):
        size: int = 10

    def run(self, params, ctx):
        if params.size < 0:
            raise RuntimeError("secret internals")
        return "x" * params.size


@pytest.fixture
def boom(monkeypatch):
    monkeypatch.setitem(registry._load(), "boom_test", Boom)


def test_unexpected_exception_is_logged_and_reported(ctx, boom, caplog):
    result = registry.execute("boom_test", {"size": -1}, ctx)
    assert result.is_error
    assert result.text == "Error: boom_test failed unexpectedly (RuntimeError)."
    assert "secret internals" in caplog.text


def test_long_results_are_truncated_with_a_note(ctx, boom):
    result = registry.execute("boom_test", {"size": 20_000}, ctx)
    assert len(result.text) < 20_000
    assert result.text.startswith("x" * MAX_RESULT_CHARS)
    assert "truncated" in result.text and "20,000" in result.text
    assert truncate("short") == "short"


def test_peer_tools(ctx, agents):
    assert registry.execute("peer_message", {"to": "ghost", "content": "hi"}, ctx).text.startswith(
        "No agent named 'ghost'"
    )
    assert "yourself" in registry.execute("peer_message", {"to": "coder", "content": "x"}, ctx).text
    assert registry.execute("peer_message", {"to": "@reviewer", "content": "hi"}, ctx).text == (
        "Message sent to reviewer."
    )
    listing = registry.execute("peer_discovery", {}, ctx).text
    assert "- coach (coach)" in listing and "coder (coder)" not in listing
    assert registry.execute("peer_discovery", {"role": "reviewer"}, ctx).text.endswith(
        "- reviewer (reviewer)"
    )
    assert "Unknown role" in registry.execute("peer_discovery", {"role": "x"}, ctx).text


def test_a_text_over_its_cap_is_a_friendly_error_and_nothing_is_stored(ctx_for):
    from teams.models import HUMAN_TEXT_LIMIT, Message, Query

    over = "x" * (HUMAN_TEXT_LIMIT + 1)
    result = registry.execute("peer_ask_question", {"question": over}, ctx_for("coder"))
    assert result.is_error
    assert result.text == "Error: question is 20,001 characters; the limit is 20,000."
    assert not Query.objects.exists() and not Message.objects.filter(kind="query").exists()
    many = registry.execute(
        "ask_multi", {"prompt": "?", "relevant_files": ["a"] * 11}, ctx_for("coder")
    )
    assert many.text == "Error: relevant_files has 11 items; the limit is 10."


def test_a_call_of_a_tool_that_cannot_work_says_why_and_is_no_violation(ctx, team, agents):
    """ask_peer is not offered while no consultant is enabled; a call of it anyway (a
    model remembering an earlier request) is told why, and the agent is not blamed."""
    offered = registry.toolset(agents["coder"], team)
    assert "ask_peer" not in {t.name for t in offered}
    result = registry.execute("ask_peer", {"prompt": "Check the lexer."}, ctx, offered)
    assert result.is_error and result.text == (
        "Error: ask_peer needs a consultant, and team alpha has none enabled; a PM can "
        "enable one in the admin (Consultant profiles)."
    )
    agents["coder"].refresh_from_db()
    assert agents["coder"].violations == 0
