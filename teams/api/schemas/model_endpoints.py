"""Model endpoints: where `ENDPOINT/MODEL` ids are served."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.integrations.model_endpoints import EndpointView
from teams.lib.endpoints import ENDPOINT_NAME_PATTERN
from teams.models import ENV_NAME_PATTERN, EndpointApi

KEY_ENV = r"^([A-Z_][A-Z0-9_]{0,99})?$"
# Extra headers: header name -> the NAME of the variable holding its value.
HeaderVars = dict[
    Annotated[str, Field(max_length=64)],
    Annotated[str, Field(max_length=100, pattern=ENV_NAME_PATTERN)],
]
SUPERUSER_ONLY = "Superusers only (null for anyone else)."


class ModelEndpointIn(In):
    name: str = Field(
        pattern=ENDPOINT_NAME_PATTERN,
        description="What model ids start with: `<name>/<model>` (a-z, 0-9 and -, up to 32).",
    )
    api: EndpointApi = EndpointApi.OPENAI
    base_url: str = Field(
        "", max_length=300, description="Empty: the SDK's default (api.openai.com; Anthropic's)."
    )
    key_env: str = Field(
        "",
        pattern=KEY_ENV,
        description="The NAME of the environment variable holding the key (never the key); "
        "empty: no key.",
    )
    header_vars: HeaderVars = Field(
        default_factory=dict,
        max_length=20,
        description="Extra headers: header name -> the NAME of the variable holding its value.",
    )
    local: bool = Field(
        False,
        description="A server of this machine or network: loopback and private addresses are "
        "allowed, and its models cost nothing unless they have a price.",
    )


class ModelEndpointPatch(In):
    """Only the fields given change; the name stays (model ids name it)."""

    api: EndpointApi = None
    base_url: str = Field(None, max_length=300)
    key_env: str = Field(None, pattern=KEY_ENV)
    header_vars: HeaderVars = Field(None, max_length=20)
    local: bool = None


class ModelEndpointOut(BaseModel):
    """Anyone sees an endpoint's name and whether models on it can be called now; how it
    is reached is a superuser's, as in the admin."""

    name: str
    usable: bool = Field(description="Its key (and header variables) are set: it can be called.")
    api: str | None = Field(description=SUPERUSER_ONLY)
    base_url: str | None = Field(description=SUPERUSER_ONLY)
    key_env: str | None = Field(description=SUPERUSER_ONLY)
    header_vars: dict[str, str] | None = Field(description=SUPERUSER_ONLY)
    local: bool | None = Field(description=SUPERUSER_ONLY)
    builtin: bool | None = Field(description="Shipped with Loom. " + SUPERUSER_ONLY)
    changed: bool | None = Field(
        description="A superuser added it or changed the built-in one. " + SUPERUSER_ONLY
    )
    problem: str | None = Field(description='Why it cannot be called now, or "". ' + SUPERUSER_ONLY)

    @classmethod
    def of(cls, view: EndpointView, *, details: bool) -> ModelEndpointOut:
        endpoint = view.endpoint
        if not details:
            hidden = dict.fromkeys(
                ("api", "base_url", "key_env", "header_vars", "local", "builtin", "changed")
            )
            return cls(name=endpoint.name, usable=view.usable, problem=None, **hidden)
        return cls(
            name=endpoint.name,
            usable=view.usable,
            api=endpoint.api,
            base_url=endpoint.url(),
            key_env=endpoint.key_env,
            header_vars=dict(endpoint.header_vars),
            local=endpoint.local,
            builtin=view.builtin,
            changed=view.changed,
            problem=view.problem,
        )
