"""A team's status machine: one table that the services enforce and the pages read.

People ask for START, PAUSE and RESUME (buttons, admin actions, the shell, the API);
the engine and the services cause the others. A person's action the status does
not allow is refused with the reason; an internal one is simply not taken (a
paused team that hits its budget stays paused)."""

from __future__ import annotations

from django.db import models

from teams.models import TeamStatus as S


class TeamAction(models.TextChoices):
    START = "start", "Start"
    PAUSE = "pause", "Pause"
    RESUME = "resume", "Resume"
    AWAIT_PM = "await_pm", "Wait for the PM"  # the coach called ask_pm
    PM_ANSWERED = "pm_answered", "The PM answered"
    HALT = "halt", "Halt"  # a budget reached, no agents, a failed turn
    FINISH = "finish", "Finish"  # the last phase is complete
    # Steering (teams.run.steering): the PM acts inside the run; the status stays.
    NEXT_SPEAKER = "next_speaker", "Choose the next speaker"
    NUDGE = "nudge", "Nudge an agent"
    SEAT = "seat", "Take an agent's seat"


A = TeamAction

TRANSITIONS: dict[TeamAction, dict[S, S]] = {
    A.START: {S.IDLE: S.RUNNING},
    A.RESUME: {S.PAUSED: S.RUNNING},
    A.PAUSE: {S.RUNNING: S.PAUSED, S.AWAITING_PM: S.PAUSED},
    A.AWAIT_PM: {S.RUNNING: S.AWAITING_PM},
    A.PM_ANSWERED: {S.AWAITING_PM: S.RUNNING},
    A.HALT: {S.RUNNING: S.PAUSED, S.AWAITING_PM: S.PAUSED},
    A.FINISH: {status: S.DONE for status in S if status != S.DONE},
    **{
        steer: {status: status for status in S if status != S.DONE}
        for steer in (A.NEXT_SPEAKER, A.NUDGE, A.SEAT)
    },
}

# The steering actions: allowed while the team is not done, leaving its status as is.
STEERING = (A.NEXT_SPEAKER, A.NUDGE, A.SEAT)

# What people may ask for, in the order the pages show the buttons.
PM_ACTIONS = (A.START, A.PAUSE, A.RESUME)

# Why a person's action is refused in a status, completing "Team 'x' ...".
REFUSALS: dict[tuple[S, TeamAction], str] = {
    (S.RUNNING, A.START): "is already running.",
    (S.AWAITING_PM, A.START): "is waiting for the PM: answer its request first.",
    (S.PAUSED, A.START): "is paused: resume it instead.",
    (S.DONE, A.START): "is done.",
    (S.IDLE, A.RESUME): "has not started yet: start it instead.",
    (S.RUNNING, A.RESUME): "is running, not paused.",
    (S.AWAITING_PM, A.RESUME): "is waiting for the PM: answer its request to resume.",
    (S.DONE, A.RESUME): "is done.",
    (S.IDLE, A.PAUSE): "is idle, not running.",
    (S.PAUSED, A.PAUSE): "is already paused.",
    (S.DONE, A.PAUSE): "is done, not running.",
    (S.DONE, A.NEXT_SPEAKER): "is done: nobody speaks again. Run it again to go on.",
    (S.DONE, A.NUDGE): "is done: no agent will read a nudge. Run it again to go on.",
    (S.DONE, A.SEAT): "is done: no turn is left to take. Run it again to go on.",
}


def next_status(status: str, action: TeamAction) -> S | None:
    """The status `action` leads to from `status`, or None when it is not allowed."""
    return TRANSITIONS[action].get(S(status))


def pm_actions(status: str) -> list[str]:
    """The actions a page offers a person for a team in this status."""
    return [action.value for action in PM_ACTIONS if next_status(status, action) is not None]


def refusal(status: str, action: TeamAction) -> str:
    return REFUSALS.get((S(status), action), f"cannot {action.label.lower()} now.")
