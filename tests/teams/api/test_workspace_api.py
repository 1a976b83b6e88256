"""The workspace over the API: a folder's entries with who wrote each file last and in
which turn, a file's text or that it is binary; the same guards as the file tools."""

import os

import pytest

from teams.files import workspace
from teams.models import DEFAULT_PHASES, Team
from tests.helpers import make_turn
from tests.tools.test_workspace import HOSTILE_PATHS, hostile_workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def files(team, agents):
    """src/app.py written by the coder in turn 4, notes.md by the researcher outside any
    turn, a binary logo.png nobody recorded, and the canary secret.txt next to the
    workspace."""
    turn = make_turn(agents["coder"], status="done", number=4)
    workspace.file_write(
        team=team,
        agent=agents["coder"],
        turn=turn,
        path="src/app.py",
        content="print('<b>hi</b>')\n",
        writes_this_turn=0,
    )
    workspace.file_write(
        team=team,
        agent=agents["researcher"],
        turn=None,
        path="notes.md",
        content="# Notes\n",
        writes_this_turn=0,
    )
    root = workspace.workspace_root(team)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (root.parent / "secret.txt").write_text("TOP SECRET\n")
    return root


def test_the_top_folder_lists_entries_with_their_last_writer(api, files):
    response = api.get("/teams/alpha/files")
    assert response.status_code == 200
    body = response.json()
    assert (body["path"], body["total"], body["truncated"]) == ("", 3, False)
    entries = {e["name"]: e for e in body["entries"]}
    assert list(entries) == ["logo.png", "notes.md", "src"]
    assert entries["src"] == {
        "name": "src",
        "path": "src",
        "kind": "folder",
        "size": None,
        "written_by": None,
        "turn": None,
        "writes": 0,
        "updated_at": None,
    }
    notes = entries["notes.md"]
    assert (notes["kind"], notes["size"], notes["written_by"], notes["turn"]) == (
        "file",
        8,
        "researcher",
        None,
    )
    assert notes["writes"] == 1 and notes["updated_at"]
    assert entries["logo.png"]["written_by"] is None and entries["logo.png"]["size"] == 10


def test_a_folder_lists_its_files_with_the_turn_number(api, files):
    body = api.get("/teams/alpha/files", path="src").json()
    assert body["path"] == "src"
    [app] = body["entries"]
    assert (app["path"], app["size"], app["written_by"], app["turn"], app["writes"]) == (
        "src/app.py",
        19,
        "coder",
        4,
        1,
    )


def test_a_files_text_or_that_it_is_binary(api, coder_api, files):
    for client in (api, coder_api):  # an agent's token reads the team's files too
        response = client.get("/teams/alpha/files/content", path="src/app.py")
        assert response.status_code == 200
        body = response.json()
        assert body["text"] == "print('<b>hi</b>')\n"
        assert (body["binary"], body["truncated"], body["size"]) == (False, False, 19)
        assert (body["written_by"], body["turn"], body["writes"]) == ("coder", 4, 1)
    logo = api.get("/teams/alpha/files/content", path="logo.png").json()
    assert (logo["binary"], logo["text"], logo["size"], logo["written_by"]) == (
        True,
        None,
        10,
        None,
    )


def test_a_long_file_is_cut(api, files):
    (files / "big.txt").write_text("z" * (workspace.MAX_READ_BYTES + 10))
    body = api.get("/teams/alpha/files/content", path="big.txt").json()
    assert body["truncated"] and len(body["text"]) == workspace.MAX_READ_BYTES
    assert body["size"] == workspace.MAX_READ_BYTES + 10


def test_another_teams_token_finds_nothing(beta_api, files):
    for path, query in (("/teams/alpha/files", {}), ("/teams/alpha/files/content", {})):
        for params in (query, {"path": "src/app.py"}, {"path": "../secret.txt"}):
            response = beta_api.get(path, **params)
            assert response.status_code == 404
            assert response.json() == {"detail": "No team with slug 'alpha'."}


def test_missing_paths_are_404(api, files):
    response = api.get("/teams/alpha/files/content", path="src/nope.py")
    assert response.status_code == 404
    assert response.json() == {"detail": "No file 'src/nope.py' in the workspace."}
    assert api.get("/teams/alpha/files", path="nope").status_code == 404


def test_a_folder_is_not_content_and_a_file_is_not_a_folder(api, files):
    for url, path, says in (
        ("/teams/alpha/files/content", "src", "is a folder, not a file"),
        ("/teams/alpha/files/content", "", "is the workspace folder"),
        ("/teams/alpha/files", "notes.md", "is a file, not a folder"),
    ):
        response = api.get(url, path=path)
        assert response.status_code == 422
        assert says in response.json()["detail"][0]["msg"]


def test_hostile_paths_are_refused(api, team, files):
    Team.objects.filter(pk=team.pk).update(phase_index=DEFAULT_PHASES.index("implementation"))
    hostile_workspace(files, files.parent)
    canary = files.parent / "secret.txt"
    before = (canary.read_text(), canary.stat().st_mtime_ns, sorted(os.listdir(files.parent)))
    refused = 0
    for path, reason, _ in HOSTILE_PATHS:
        for url in ("/teams/alpha/files", "/teams/alpha/files/content"):
            response = api.get(url, path=path)
            assert response.status_code == 422, (path, response.content)
            [error] = response.json()["detail"]
            assert error["loc"] == ["query", "path"]
            assert workspace.shown(path) in error["msg"] and reason in error["msg"]
            assert "TOP SECRET" not in response.content.decode()
            refused += 1
    assert refused == 2 * len(HOSTILE_PATHS)
    after = (canary.read_text(), canary.stat().st_mtime_ns, sorted(os.listdir(files.parent)))
    assert after == before


def test_the_file_tools_run_over_the_api_with_their_rules(api, team, files):
    write = {"path": "src/cli.py", "content": "main()\n"}
    refused = api.post("/teams/alpha/agents/coder/tools/file_write", write)
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "file_write is only for implementation-like phases (their names contain implement, "
        "build, develop, coding, construct) and the review-like phases after one (their "
        "names contain review, test, verify, qa); the team is in refinement."
    )
    Team.objects.filter(pk=team.pk).update(phase_index=DEFAULT_PHASES.index("implementation"))
    response = api.post("/teams/alpha/agents/coder/tools/file_write", write)
    assert response.json() == {
        "result": "Wrote src/cli.py (7 bytes, new file).",
        "is_error": False,
        "outcome": None,
    }
    out = api.post(
        "/teams/alpha/agents/coder/tools/file_write", {"path": "../x.py", "content": ""}
    ).json()
    assert out["is_error"] and "recorded as a violation" in out["result"]
    assert not (files.parent / "x.py").exists()
    listed = api.post("/teams/alpha/agents/reviewer/tools/file_list", {"path": "src"}).json()
    assert listed["result"] == (
        "Folder 'src' (2 entries):\n  app.py  (19 bytes)\n  cli.py  (7 bytes)"
    )
