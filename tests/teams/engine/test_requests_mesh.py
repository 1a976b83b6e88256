"""The mesh as a real model reads it: each test runs turns through the real anthropic
client against the fake Messages API and asserts on the requests it received. A new
phase's trajectory is that phase's work, and the agent is told once when it replaced
its own; an anchor's attribution stands apart from its value, and saving one does not
repeat it."""

from teams import services
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain
from tools.conversation import SignalPhaseComplete
from tools.mesh import DeclareIntent, SaveAnchor

REPLACED = "[Loom] The planning phase began, and Loom set your trajectory for it (above)."


def scripted(scripts: dict):
    """Each agent's replies in order, then "Ok." (a teammate with nothing to add)."""

    def reply(request):
        queue = scripts.get(request.agent) or []
        return queue.pop(0) if queue else text("Ok.")

    return reply


def cue(request) -> str:
    """The text of the request's last message: the cue."""
    content = request.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n\n".join(block.get("text", "") for block in content)


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def test_a_new_phase_gives_its_own_trajectory_and_says_once_it_replaced_the_agents(
    team, messages_api
):
    api = messages_api(
        scripted(
            {
                "coach": [
                    text("Go."),
                    tool(SignalPhaseComplete.name, {"summary": "Scope agreed."}),
                ],
                "coder": [
                    tool(DeclareIntent.name, {"trajectory": "Write wordfreq.py with its tests"}),
                    text("I will write it."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=13)  # refinement (the coach closes it on its second turn), planning
    coder = of(api, "coder")
    planning = [r for r in coder if "Current phase: planning" in r.dump]
    assert len(planning) >= 2, [r.dump[:80] for r in coder]
    first = cue(planning[0])
    assert (
        "Your intent (trajectory → tactic → action): As coder in planning: break the work "
        "into tasks you can build and estimate them → (not set) → (not set)\n" + REPLACED
    ) in first
    assert (
        'Your own, "Write wordfreq.py with its tests", was for refinement: declare it again '
        "with declare_intent if it still fits."
    ) in first
    assert "Write wordfreq.py" not in cue(planning[1])  # said once
    assert all(REPLACED not in r.dump for r in api.requests if r.agent != "coder")


SPEC = "wordfreq.count(text) -> dict[str, int]\nWords are lowercased.\nPunctuation is dropped."


def test_an_anchors_attribution_stands_before_its_value_and_the_result_is_short(team, messages_api):
    services.anchor_save(team=team, key="OUTPUT", value="JSON only.")
    api = messages_api(
        scripted({"coach": [tool(SaveAnchor.name, {"key": "WORDFREQ_SPEC", "value": SPEC})]})
    )
    team_actions.team_start(team=team)
    drain(team, limit=2)  # the coach pins the spec; the researcher reads it
    coach, researcher = of(api, "coach")[1], of(api, "researcher")[0]
    result = coach.body["messages"][-1]["content"][0]
    assert result["content"] == "Anchor WORDFREQ_SPEC saved (2 of 30)."  # no echo of the value
    for request in (coach, researcher):
        block = request.system_text[request.system_text.index("<immutable-anchors>") :]
        assert block == (
            "<immutable-anchors>\n"
            "These are IMMUTABLE ANCHORS. Override any chat history that conflicts with them:\n"
            "  [OUTPUT] (pinned by the PM): JSON only.\n"
            f"  [WORDFREQ_SPEC] (pinned by coach in refinement): {SPEC}\n"
            "</immutable-anchors>"
        )
