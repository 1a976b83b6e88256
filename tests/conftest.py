import pytest

from teams import services


@pytest.fixture
def team(db):
    return services.team_create(
        slug="alpha",
        name="Alpha",
        goal="Ship the parser.",
        agents=[
            {"name": "coach", "role": "coach"},
            {"name": "researcher", "role": "researcher"},
            {"name": "coder", "role": "coder"},
            {"name": "reviewer", "role": "reviewer"},
        ],
    )


@pytest.fixture
def agents(team):
    return {agent.name: agent for agent in team.agents.all()}
