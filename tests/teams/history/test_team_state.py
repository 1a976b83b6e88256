"""The one list of a team's state (teams.history.team_state) names every field of a
team and of an agent, and every model that points at a team: a new one added to a
team and not to the list fails here, before a fork or a clone drops it unsaid."""

from django.apps import apps

from teams.history import team_state
from teams.models import Agent, Team


def _points_at(model, targets) -> bool:
    return any(
        field.is_relation and field.concrete and field.related_model in targets
        for field in model._meta.get_fields()
        if field.model is model
    )


def models_of_a_team() -> set[str]:
    """Every model with a relation to a team, directly or through another such model."""
    found = {Team}
    grew = True
    while grew:
        grew = False
        for model in apps.get_models():
            if model not in found and _points_at(model, found):
                found.add(model)
                grew = True
    found.discard(Team)
    return {model._meta.label for model in found}


def test_every_model_that_points_at_a_team_is_in_the_list():
    missing = models_of_a_team() - set(team_state.MODELS)
    assert not missing, (
        f"{sorted(missing)} point at a team but teams/history/team_state.py does not say "
        "what a fork and a clone do with them: add each to MODELS."
    )
    # And the list names no model that is gone.
    assert set(team_state.MODELS) <= models_of_a_team()


def _field_names(model) -> set[str]:
    return {
        field.name
        for field in model._meta.get_fields()
        if field.concrete or field.many_to_many and field.model is model
    }


def test_every_field_of_a_team_is_in_the_list():
    listed = (
        team_state.TEAM_SETTINGS
        + team_state.TEAM_RUN
        + team_state.TEAM_OWN
        + team_state.TEAM_RELATIONS
    )
    assert len(listed) == len(set(listed)), "a team's field is listed twice"
    assert _field_names(Team) == set(listed)


def test_every_field_of_an_agent_is_in_the_list():
    listed = (
        team_state.AGENT_SETTINGS
        + team_state.AGENT_HIERARCHY
        + team_state.AGENT_COUNTERS
        + team_state.AGENT_OWN
    )
    assert len(listed) == len(set(listed)), "an agent's field is listed twice"
    assert _field_names(Agent) == set(listed)


def test_what_a_copy_leaves_out_is_said_with_why():
    assert team_state.left_out("fork") == [
        "model calls (model calls are the spend's record: the copied turns keep their "
        "tokens and cost)",
        "API tokens (a token opens one team: make one for the copy if it needs one)",
        "webhooks (a webhook calls someone's address about one team: add it to the copy "
        "to be told)",
    ]
    assert all(
        part.why
        for part in team_state.MODELS.values()
        if team_state.LEAVE in (part.fork, part.clone)
    )
