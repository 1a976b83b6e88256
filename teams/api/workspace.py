"""The team's workspace: its files with who wrote each last, and a file's text. Paths
go through teams/files/workspace.py's guards, as the agents' file tools do: a path that is
refused there is a 422 naming it and why, a missing one a 404."""

from contextlib import contextmanager

from ninja import Query, Router
from ninja.errors import ValidationError

from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.workspace import WorkspaceEntryOut, WorkspaceFileOut, WorkspaceListOut
from teams.errors import InvalidInput
from teams.files import workspace

router = Router(tags=["workspace"])

PATH_HELP = (
    "Relative to the workspace, folders separated by '/'. Refused (422): '..', absolute "
    "paths, '~', backslashes, percent-escapes (the query string is decoded once, as any "
    "is; a path is never decoded again), control characters, empty or dots-only names, "
    f"names over {workspace.MAX_NAME_BYTES} bytes, paths over "
    f"{workspace.MAX_PATH_CHARS} characters, symbolic links leading out, FIFOs, sockets "
    "and devices."
)


@contextmanager
def query_path():
    """A refused path is a 422 located at the query's `path`."""
    try:
        yield
    except InvalidInput as exc:
        error = {"loc": ["query", "path"], "msg": exc.message, "type": exc.code}
        raise ValidationError([error]) from None


@router.get(
    "/teams/{team}/files",
    response=responses({200: WorkspaceListOut}, 404),
    operation_id="files_list",
)
def files_list(request, team: str, path: str = Query("", description=PATH_HELP)):
    """A folder of the team's workspace (its top by default): each entry's kind and
    size, and for files who wrote it last and in which turn."""
    row = caller(request).team(team)
    with query_path():
        listing, entries = workspace.folder_entries(row, path)
    return WorkspaceListOut(
        path=listing.path,
        entries=[
            WorkspaceEntryOut(name=e.name, path=e.path, kind=e.kind, size=e.size, **written)
            for e, written in entries
        ],
        total=listing.total,
        truncated=listing.truncated,
    )


@router.get(
    "/teams/{team}/files/content",
    response=responses({200: WorkspaceFileOut}, 404),
    operation_id="files_content",
)
def files_content(request, team: str, path: str = Query("", description=PATH_HELP)):
    """A file's text (its first 100 KB), or that it is binary, with who wrote it last."""
    row = caller(request).team(team)
    with query_path():
        found = workspace.file_read(row, path)
    return WorkspaceFileOut(
        path=found.path,
        size=found.size,
        binary=found.binary,
        text=None if found.binary else found.text,
        truncated=found.truncated,
        **workspace.file_written(row, found.path),
    )
