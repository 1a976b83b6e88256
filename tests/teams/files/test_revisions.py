"""File revisions: every workspace write keeps its content (stored once per content)
with the agent and turn that wrote it; a file's history and any revision's text are
read through the API and the files page; hostile paths are refused as before."""

import pytest

from teams.files import revisions, workspace
from teams.models import FileBlob, FileRevision
from tests.helpers import ApiClient, api_token, client_for, make_turn
from tests.tools.test_workspace import HOSTILE_PATHS, hostile_workspace

pytestmark = pytest.mark.django_db


def write(team, agent, path, content, turn=None):
    return workspace.file_write(
        team=team, agent=agent, turn=turn, path=path, content=content, writes_this_turn=0
    )


@pytest.fixture
def history(team, agents):
    """notes.md written, overwritten, then written back with its first text: three
    revisions, two contents."""
    first = make_turn(agents["coder"], number=3, status="done")
    second = make_turn(agents["reviewer"], number=5, status="done")
    write(team, agents["coder"], "docs/notes.md", "# Notes\nv1\n", turn=first)
    write(team, agents["reviewer"], "docs/notes.md", "# Notes\nv2 <b>bold</b>\n", turn=second)
    write(team, agents["coder"], "docs/notes.md", "# Notes\nv1\n")
    return team


def test_each_write_is_a_revision_and_the_same_content_is_stored_once(history, agents):
    rows = list(FileRevision.objects.filter(team=history).order_by("number"))
    assert [(r.number, r.agent.name, r.turn.number if r.turn else None) for r in rows] == [
        (1, "coder", 3),
        (2, "reviewer", 5),
        (3, "coder", None),
    ]
    assert rows[0].blob_id == rows[2].blob_id != rows[1].blob_id
    assert FileBlob.objects.count() == 2
    assert bytes(rows[1].blob.content) == b"# Notes\nv2 <b>bold</b>\n"
    # The file itself holds the last write.
    assert workspace.file_read(history, "docs/notes.md").text == "# Notes\nv1\n"


def test_the_same_content_in_another_team_is_the_same_blob(history, other_team):
    write(other_team, other_team.agents.first(), "copy.md", "# Notes\nv1\n")
    assert FileBlob.objects.count() == 2
    assert FileRevision.objects.filter(team=other_team).get().blob_id == (
        FileRevision.objects.get(team=history, number=1).blob_id
    )


def test_a_deleted_teams_blobs_go_when_no_one_uses_them(
    history, other_team, django_capture_on_commit_callbacks
):
    write(other_team, other_team.agents.first(), "copy.md", "# Notes\nv1\n")
    with django_capture_on_commit_callbacks(execute=True):
        history.delete()
    assert list(FileBlob.objects.values_list("size", flat=True)) == [len(b"# Notes\nv1\n")]


def test_history_and_an_old_revision_through_the_api(history, pm):
    api = ApiClient(api_token(team=history))
    body = api.get("/teams/alpha/files/history", path="docs/notes.md").json()
    assert body["path"] == "docs/notes.md"
    assert [(r["number"], r["agent"], r["turn"], r["size"]) for r in body["revisions"]] == [
        (3, "coder", None, 11),
        (2, "reviewer", 5, 23),
        (1, "coder", 3, 11),
    ]
    assert body["revisions"][0]["sha256"] == body["revisions"][2]["sha256"]
    old = api.get("/teams/alpha/files/revision", path="docs/notes.md", number=2)
    assert old.status_code == 200
    assert (old.json()["text"], old.json()["agent"]) == ("# Notes\nv2 <b>bold</b>\n", "reviewer")
    missing = api.get("/teams/alpha/files/revision", path="docs/notes.md", number=9)
    assert missing.status_code == 404
    assert missing.json() == {"detail": "'docs/notes.md' has no revision 9 in team 'alpha'."}
    never = api.get("/teams/alpha/files/history", path="nothing.md")
    assert never.status_code == 404


def test_history_and_an_old_revision_on_the_files_page(history, pm):
    browser = client_for(pm)
    page = browser.get("/teams/alpha/files/view/", {"path": "docs/notes.md"}).content.decode()
    assert 'id="file-history-link"' in page and "files/history/?path=docs%2Fnotes.md" in page
    page = browser.get("/teams/alpha/files/history/", {"path": "docs/notes.md"}).content.decode()
    assert "docs/notes.md: 3 revisions" in page
    assert page.count('<tr class="revision') == 3
    assert "Revision 3" in page and "v1" in page
    old = browser.get("/teams/alpha/files/history/", {"path": "docs/notes.md", "revision": 2})
    text = old.content.decode()
    assert "Revision 2" in text and "v2 &lt;b&gt;bold&lt;/b&gt;" in text  # escaped
    assert (
        browser.get(
            "/teams/alpha/files/history/", {"path": "docs/notes.md", "revision": "x"}
        ).status_code
        == 400
    )


def test_hostile_paths_are_refused_as_before(team, agents, tmp_path, pm):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    hostile_workspace(workspace.workspace_root(team), outside)
    api = ApiClient(api_token(team=team))
    browser = client_for(pm)
    # A FIFO's and a socket's names pass the path check: they have no history (404).
    no_history = {"fifo", "sock"}
    for path, reason, leaves in HOSTILE_PATHS:
        for op in ("history", "revision"):
            response = api.get(f"/teams/alpha/files/{op}", path=path, number=1)
            expected = 404 if path in no_history else 422
            assert response.status_code == expected, (path, response.content)
            assert "TOP SECRET" not in response.content.decode()
            if leaves:
                assert response.status_code == 422, path
                assert reason in response.json()["detail"][0]["msg"], path
        page = browser.get("/teams/alpha/files/history/", {"path": path})
        assert page.status_code == (404 if path in no_history else 400), path
        assert "TOP SECRET" not in page.content.decode()
    assert not FileRevision.objects.exists()


def test_a_file_keeps_its_newest_revisions(team, agents, monkeypatch):
    monkeypatch.setattr(revisions, "MAX_REVISIONS_PER_FILE", 3)
    for n in range(5):
        write(team, agents["coder"], "log.md", f"line {n}\n")
    assert list(
        FileRevision.objects.filter(team=team).order_by("number").values_list("number", flat=True)
    ) == [3, 4, 5]
