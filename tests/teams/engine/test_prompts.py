"""What an agent sees: the prompt's rules (role, norms, anchors, @mentions, phases)."""

from teams import services
from teams.engine import prompts
from teams.engine import system_text as texts
from teams.models import DEFAULT_PHASES, Message
from teams.run import team_actions


def system_text(prompt):
    return "\n".join(block["text"] for block in prompt.system)


def test_coach_facilitation_mentions_ask_pm_in_every_phase():
    for phase in [*DEFAULT_PHASES, "a-custom-phase"]:
        text = texts.facilitation(phase)
        assert "use the ask_pm tool to pause and request input" in text
        assert "signal_phase_complete" in text


def test_system_prompts_by_role(team, agents):
    coach = system_text(prompts.build(agents["coach"], team))
    coder = system_text(prompts.build(agents["coder"], team))
    for text in (coach, coder):
        assert "use the pass_turn tool instead of restating agreement" in text
        assert "Be concise" in text
    assert "Phase: refinement." in coach and "ask_pm" in coach
    assert "ask_pm" not in coder and "Your name is coder and your role is coder." in coder


def test_history_is_the_phase_plus_summaries_minus_pass_notes(team, agents):
    services.message_add(team=team, author=agents["coder"], content="Old phase chatter.")
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="We agreed on X.")
    team.refresh_from_db()
    services.message_add(team=team, author=agents["reviewer"], content="New phase point.")
    services.message_add(
        team=team, author=agents["researcher"], kind="pass_note", content="(researcher passes: ok)"
    )
    prompt = prompts.build(agents["coder"], team)
    sent = str(prompt.messages)
    assert "We agreed on X." in sent and "New phase point." in sent
    assert "Old phase chatter." not in sent and "passes" not in sent
    assert prompt.messages[0]["role"] == "user" and prompt.messages[-1]["role"] == "user"
    assert prompt.messages[-1]["content"].endswith("It is your turn, coder.")


def test_own_messages_are_assistant_turns(team, agents):
    services.message_add(team=team, author=agents["coder"], content="My proposal.")
    services.message_add(team=team, author=agents["reviewer"], content="Looks good.")
    roles = [(m["role"], m["content"]) for m in prompts.build(agents["coder"], team).messages]
    assert roles[1] == ("assistant", "My proposal.")
    assert roles[2][0] == "user" and roles[2][1].startswith("[reviewer]: Looks good.")


def test_mention_only_from_the_last_three_others(team, agents):
    services.message_add(team=team, author=agents["reviewer"], content="@coder what now?")
    for i in range(3):
        services.message_add(team=team, author=agents["researcher"], content=f"note {i}")
    assert prompts.build(agents["coder"], team).mention_note == ""
    services.message_add(team=team, author=agents["coach"], content="@coder please answer")
    note = prompts.build(agents["coder"], team).mention_note
    assert note.startswith("Note: coach specifically addressed you with @coder")
    assert prompts.build(agents["reviewer"], team).mention_note == ""


def test_mention_note_only_when_addressed_since_the_agent_last_spoke(team, agents):
    coder, coach = agents["coder"], agents["coach"]
    services.message_add(team=team, author=agents["reviewer"], content="@coder tabs too?")
    assert prompts.build(coder, team).mention_note.startswith("Note: reviewer specifically")
    services.message_add(team=team, author=coder, content="Yes: tabs are spaces.")  # acted
    assert prompts.build(coder, team).mention_note == ""
    not_addressed = [
        ('The reviewer asked "@coder tabs too?" and it is settled.', Message.Kind.CHAT),
        ("> @coder tabs too?\nSettled.", Message.Kind.CHAT),
        ("Owners: @researcher, @coder and @reviewer.", Message.Kind.CHAT),
        ("[Phase refinement complete] @coder owns the lexer.", Message.Kind.PHASE_SUMMARY),
    ]
    for content, kind in not_addressed:
        services.message_add(team=team, author=coach, content=content, kind=kind)
        assert prompts.build(coder, team).mention_note == "", content
    services.message_add(team=team, author=coach, content="@coder, add a test for tabs.")
    assert prompts.build(coder, team).mention_note.startswith("Note: coach specifically")
