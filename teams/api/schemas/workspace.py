"""The team's workspace: a folder listing and a file."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class WorkspaceEntryOut(BaseModel):
    name: str
    path: str = Field(description="Relative to the workspace.")
    kind: Literal["file", "folder", "link", "other"] = Field(
        description="link: a symbolic link (never followed in a listing); other: a FIFO, "
        "socket or device, never read."
    )
    size: int | None = Field(description="Bytes, for files.")
    written_by: str | None = Field(description="The agent that wrote the file last.")
    turn: int | None = Field(description="The team's turn number of that write.")
    writes: int = Field(description="How many times agents wrote it.")
    updated_at: datetime | None = Field(description="When it was last written by an agent.")


class WorkspaceListOut(BaseModel):
    path: str = Field(description="The folder listed, relative to the workspace ('' the top).")
    entries: list[WorkspaceEntryOut] = Field(description="By name, at most 500.")
    total: int = Field(description="How many entries the folder has.")
    truncated: bool


class WorkspaceFileOut(BaseModel):
    path: str
    size: int
    binary: bool = Field(description="A NUL byte or not UTF-8: the text is not sent.")
    text: str | None = Field(description="The text (its first 100 KB); null when binary.")
    truncated: bool
    written_by: str | None
    turn: int | None
    writes: int
    updated_at: datetime | None
