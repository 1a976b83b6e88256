"""Consultant profiles and the consultations asked of them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.models import (
    AGENT_NAME_PATTERN,
    HUMAN_TEXT_LIMIT,
    ConsultantProfile,
    Consultation,
    ProviderKind,
)


class ConsultantIn(In):
    name: str = Field(
        pattern=AGENT_NAME_PATTERN, description="How agents name it when they ask it."
    )
    provider: ProviderKind = ProviderKind.OFFLINE
    model: str = Field(min_length=1, max_length=100)
    base_url: str = Field("", max_length=300, description="Empty: the provider's default.")
    a2a_url: str = Field(
        "",
        max_length=300,
        description="Provider a2a: the agent card's URL (or the agent's base URL); "
        "the outbound guard must allow it. Empty for any other provider.",
    )
    key_env: str = Field(
        "",
        pattern=r"^([A-Z_][A-Z0-9_]{0,99})?$",
        description="The NAME of the environment variable holding the key, or an A2A "
        "agent's bearer token (never the key).",
    )
    strengths: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    extra_prompt: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    enabled: bool = True


class ConsultantPatch(In):
    """Only the fields given change."""

    provider: ProviderKind = None
    model: str = Field(None, min_length=1, max_length=100)
    base_url: str = Field(None, max_length=300)
    a2a_url: str = Field(None, max_length=300)
    key_env: str = Field(None, pattern=r"^([A-Z_][A-Z0-9_]{0,99})?$")
    strengths: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    extra_prompt: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    enabled: bool = None


SUPERUSER_ONLY = "Superusers only (null for anyone else)."


class ConsultantOut(BaseModel):
    """Anyone sees a consultant's name, strengths and whether it can be asked now;
    how it is reached (provider, model, endpoint, agent card URL, key variable, extra
    prompt) is a superuser's, as in the admin."""

    name: str
    strengths: str
    available: bool = Field(description="Enabled, and its key is there: it can be asked now.")
    provider: str | None = Field(description=SUPERUSER_ONLY)
    model: str | None = Field(description=SUPERUSER_ONLY)
    base_url: str | None = Field(description=SUPERUSER_ONLY)
    a2a_url: str | None = Field(
        None, description="An A2A consultant's agent card URL. " + SUPERUSER_ONLY
    )
    key_env: str | None = Field(description=SUPERUSER_ONLY)
    key_status: str | None = Field(
        description='"ready", or why it cannot be asked now. ' + SUPERUSER_ONLY
    )
    extra_prompt: str | None = Field(description=SUPERUSER_ONLY)
    enabled: bool | None = Field(description=SUPERUSER_ONLY)

    @classmethod
    def of(cls, profile: ConsultantProfile, problem: str, *, details: bool) -> ConsultantOut:
        public = {
            "name": profile.name,
            "strengths": profile.strengths,
            "available": profile.enabled and not problem,
        }
        if not details:
            return cls(
                **public,
                provider=None,
                model=None,
                base_url=None,
                key_env=None,
                key_status=None,
                extra_prompt=None,
                enabled=None,
            )
        return cls(
            **public,
            provider=profile.provider,
            model=profile.model,
            base_url=profile.base_url,
            a2a_url=profile.a2a_url,
            key_env=profile.key_env,
            key_status=problem or "ready",
            extra_prompt=profile.extra_prompt,
            enabled=profile.enabled,
        )


class ConsultationOut(BaseModel):
    id: int
    batch: str = Field(description="Shared by the consultations of one ask of several.")
    agent: str | None
    consultant: str | None
    model: str
    status: str
    prompt: str
    task_type: str
    relevant_files: list[str]
    output: dict | None = Field(description="The structured PeerOutput.")
    dropped_files: list[dict] = Field(description="File references dropped, with why.")
    input_tokens: int
    output_tokens: int
    cost_usd: str
    duration_seconds: float | None
    error: str
    created_at: datetime

    @classmethod
    def of(cls, c: Consultation) -> ConsultationOut:
        return cls(
            id=c.id,
            batch=str(c.batch),
            agent=c.agent.name if c.agent_id else None,
            consultant=c.profile.name if c.profile_id else None,
            model=c.model,
            status=c.status,
            prompt=c.prompt,
            task_type=c.task_type,
            relevant_files=c.relevant_files,
            output=c.output,
            dropped_files=c.flagged_files,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            cost_usd=str(c.cost_usd),
            duration_seconds=c.duration_seconds,
            error=c.error,
            created_at=c.created_at,
        )
