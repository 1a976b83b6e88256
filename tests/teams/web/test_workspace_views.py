"""The PM's view of the team's output without a browser: the workspace pages (a
folder's files with who wrote each last and in which turn, a file's text, binary
files, refused paths) and the live view's consultations, side by side."""

import uuid
from decimal import Decimal

import pytest

from teams.files import workspace
from teams.models import ConsultantProfile
from tests.helpers import client_for, make_consultation, make_turn
from tests.tools.test_workspace import CANARY, HOSTILE_PATHS, hostile_workspace, tree


@pytest.fixture
def manager(pm):
    return client_for(pm)


@pytest.fixture
def written(team, agents):
    """notes/plan.md written by the coder in turn 7, a README.md nobody recorded and a
    binary file."""
    turn = make_turn(agents["coder"], number=7, phase="implementation")
    workspace.file_write(
        team=team,
        agent=agents["coder"],
        turn=turn,
        path="notes/plan.md",
        content="# Plan\n<script>alert(1)</script>\n",
        writes_this_turn=0,
    )
    root = workspace.workspace_root(team)
    (root / "README.md").write_text("hello\n")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x01\x02")
    return root


def test_the_top_folder_lists_files_and_folders_with_sizes(manager, written):
    response = manager.get("/teams/alpha/files/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-path="notes"' in html and "?path=notes" in html
    assert 'data-path="README.md"' in html and "6 bytes" in html
    assert "/teams/alpha/files/view/?path=README.md" in html
    assert "(not written by an agent)" in html


def test_a_folder_shows_who_wrote_each_file_and_in_which_turn(manager, written):
    response = manager.get("/teams/alpha/files/", {"path": "notes"})
    assert response.status_code == 200
    html = response.content.decode()
    row = html[html.index('data-path="notes/plan.md"') :]
    row = row[: row.index("</tr>")]
    assert "plan.md" in row and '<td class="writer">coder</td>' in row and "turn 7" in row
    assert "?path=notes%2Fplan.md" in row
    assert ".. (up)" in html


def test_a_file_is_shown_escaped_with_who_wrote_it(manager, written):
    response = manager.get("/teams/alpha/files/view/", {"path": "notes/plan.md"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert '<pre class="file-text"' in html
    assert '<span class="writer">coder</span>' in html and '<span class="turn">7</span>' in html


def test_a_binary_file_is_named_with_its_size(manager, written):
    response = manager.get("/teams/alpha/files/view/", {"path": "logo.png"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "binary, 7 bytes" in html and "file-text" not in html


def test_a_long_file_says_it_is_cut(manager, team, written):
    (written / "big.txt").write_text("x" * (workspace.MAX_READ_BYTES + 10))
    response = manager.get("/teams/alpha/files/view/", {"path": "big.txt"})
    assert response.status_code == 200
    assert "Only the first 100 KB of this file" in response.content.decode()


def test_a_missing_file_or_folder_is_a_404_saying_so(manager, written):
    for url in ("/teams/alpha/files/view/", "/teams/alpha/files/"):
        response = manager.get(url, {"path": "nope.md"})
        assert response.status_code == 404
        assert "nope.md" in response.content.decode()


def test_a_folder_is_not_viewed_as_a_file_nor_a_file_listed(manager, written):
    response = manager.get("/teams/alpha/files/view/", {"path": "notes"})
    assert response.status_code == 400 and "is a folder" in response.content.decode()
    response = manager.get("/teams/alpha/files/", {"path": "README.md"})
    assert response.status_code == 400 and "is a file" in response.content.decode()


@pytest.fixture
def furnished(team):
    """Alpha's workspace furnished for HOSTILE_PATHS, the canary secret.txt next to it."""
    root = workspace.workspace_root(team)
    (root.parent / "secret.txt").write_text(CANARY)
    hostile_workspace(root, root.parent)
    return root


@pytest.mark.parametrize(
    ("path", "reason", "leaves"), HOSTILE_PATHS, ids=[repr(p[0])[:40] for p in HOSTILE_PATHS]
)
def test_hostile_paths_are_refused_with_the_reason_and_nothing_is_read(
    manager,
    team,
    furnished,
    path,
    reason,
    leaves,  # noqa: F811
):
    root = furnished
    before = tree(root.parent)
    for url in ("/teams/alpha/files/view/", "/teams/alpha/files/"):
        response = manager.get(url, {"path": path})
        assert 400 <= response.status_code < 500, (url, response.status_code)
        html = response.content.decode()
        assert 'id="workspace-refused"' in html
        assert CANARY.strip() not in html and "root:x:0:0" not in html
        if url.endswith("view/"):  # the file tools' own reason, escaped
            assert reason.replace("'", "&#x27;") in html
    assert tree(root.parent) == before


def test_another_teams_workspace_is_a_404(other_pm, written):
    client = client_for(other_pm)
    assert client.get("/teams/alpha/files/").status_code == 404
    assert client.get("/teams/alpha/files/view/", {"path": "README.md"}).status_code == 404


@pytest.mark.parametrize("url", ["/teams/alpha/files/", "/teams/alpha/files/view/?path=README.md"])
def test_non_staff_and_anonymous_users_are_sent_to_log_in(client, outsider, written, url):
    for someone in (client, client_for(outsider)):
        response = someone.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_live_view_links_the_workspace_with_its_file_count(manager, written):
    html = manager.get("/teams/alpha/").content.decode()
    assert 'href="/teams/alpha/files/"' in html and "Workspace (1 file)" in html


# --- consultations ------------------------------------------------------------------


def consultation(team, agent, profile, batch, **fields):
    return make_consultation(
        agent,
        team=team,
        profile=profile,
        batch=batch,
        prompt="Is the parser design sound?",
        model=profile.model,
        **fields,
    )


def peer_output(answer, **more):
    return {
        "responder": "x",
        "timestamp": "2025-01-01T00:00:00+00:00",
        "answer": answer,
        "confidence": 0.75,
        "key_points": ["Keep the grammar small"],
        "suggested_actions": [
            {"action": "Add edge-case tests", "priority": "high", "file": None, "rationale": "r"}
        ],
        "file_references": [],
        **more,
    }


def test_the_consultants_of_one_ask_are_shown_side_by_side(manager, team, agents):
    critic = ConsultantProfile.objects.create(
        name="critic", provider="offline", model="loom-offline"
    )
    architect = ConsultantProfile.objects.create(
        name="architect", provider="offline", model="loom-offline"
    )
    consultation(
        team, agents["coder"], critic, uuid.uuid4(), status="done", output=peer_output("Older")
    )
    batch = uuid.uuid4()
    consultation(
        team,
        agents["coach"],
        critic,
        batch,
        status="done",
        output=peer_output("<b>Mind the edge cases</b>"),
        cost_usd=Decimal("0.0123"),
        duration_seconds=1.5,
        flagged_files=[{"path": "../etc/passwd", "reason": "goes up with '..'"}],
    )
    consultation(team, agents["coach"], architect, batch, status="failed", error="key missing")
    html = manager.get("/teams/alpha/").content.decode()
    panel = html[html.index('id="consultations"') :]
    batches = panel.split('class="consult-batch"')[1:]
    assert len(batches) == 2
    newest = batches[0]
    assert newest.count('class="consultant ') == 2
    assert newest.index('data-consultant="critic"') < newest.index('data-consultant="architect"')
    assert "&lt;b&gt;Mind the edge cases&lt;/b&gt;" in newest and "<b>Mind" not in newest
    assert '<span class="consult-confidence">0.75</span>' in newest
    assert "Keep the grammar small" in newest and "Add edge-case tests" in newest
    assert '<span class="consult-cost">0.0123</span>' in newest and "1.5 s" in newest
    assert "../etc/passwd" in newest and "Dropped file references" in newest
    assert "key missing" in newest and "Failed" in newest
    assert "Older" in batches[1] and "coder" in batches[1]


def test_no_consultations_yet(manager, team):
    assert "No consultations yet." in manager.get("/teams/alpha/").content.decode()
