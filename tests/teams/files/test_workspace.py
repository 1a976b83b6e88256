"""A team's files belong to the team, not to its slug (teams/files/workspace.py; issue 22).

The default folder is named by the team's own UUID: a rename keeps the files, a team
later given the old slug starts empty, a deleted team's folder goes with it, and no
message shows where a folder is on the server."""

from pathlib import Path

import pytest
from django.urls import reverse

from teams import services
from teams.errors import Conflict, InvalidInput, NotFound
from teams.files import workspace
from teams.history import cloning
from teams.models import Team
from tests.helpers import ApiClient, api_token, client_for, make_team, make_user


def write(team, path="notes.md", content="Alpha's secret plan.\n"):
    workspace.file_write(
        team=team,
        agent=team.agents.get(name="coder"),
        turn=None,
        path=path,
        content=content,
        writes_this_turn=0,
    )


def test_a_renamed_teams_files_stay_its_own_and_the_old_slug_starts_empty(team, pm):
    write(team)
    # Alpha's PM renames it through the API...
    renamed = ApiClient(api_token(user=pm)).patch("/teams/alpha", {"slug": "alpha-archive"})
    assert renamed.status_code == 200, renamed.content
    team.refresh_from_db()
    assert workspace.file_read(team, "notes.md").text == "Alpha's secret plan.\n"
    # ...and another PM's team is given the old slug: it sees none of alpha's files.
    mallory = make_user("mallory", manages=[make_team("mallory-team")])
    theirs = Team.objects.get(slug="mallory-team")
    api = ApiClient(api_token(user=mallory))
    assert api.patch("/teams/mallory-team", {"slug": "alpha"}).status_code == 200
    theirs.refresh_from_db()
    assert workspace.file_list(theirs).total == 0
    with pytest.raises(NotFound, match="No file 'notes.md' in the workspace"):
        workspace.file_read(theirs, "notes.md")
    listing = api.get("/teams/alpha/files")
    assert listing.status_code == 200 and listing.json()["entries"] == []
    assert api.get("/teams/alpha/files/content", path="notes.md").status_code == 404


def test_a_team_made_with_a_deleted_teams_slug_never_gets_its_files(
    team, django_capture_on_commit_callbacks
):
    write(team)
    folder = workspace.workspace_root(team)
    with django_capture_on_commit_callbacks(execute=True):
        team.delete()
    assert not folder.exists()
    again = make_team("alpha")
    assert workspace.file_list(again).total == 0
    assert workspace.workspace_root(again) != folder


def test_deleting_a_team_in_the_admin_removes_its_default_folder(
    team, superuser, django_capture_on_commit_callbacks
):
    # Put there by hand (a file the tools wrote has a row, which the admin keeps).
    folder = workspace.workspace_root(team)
    (folder / "notes.md").write_text("Alpha's secret plan.\n")
    url = reverse("admin:teams_team_delete", args=[team.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(superuser).post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Team.objects.filter(slug="alpha").exists()
    assert not folder.exists()
    assert list(workspace.workspaces_folder().iterdir()) == []


def test_a_custom_folder_is_never_removed(team, tmp_path, django_capture_on_commit_callbacks):
    custom = tmp_path / "checkout"
    custom.mkdir()
    (custom / "README.md").write_text("Kept.\n")
    Team.objects.filter(pk=team.pk).update(workspace=str(custom))
    team.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        team.delete()
    assert (custom / "README.md").read_text() == "Kept.\n"


def test_a_rolled_back_deletion_keeps_the_folder(team, django_capture_on_commit_callbacks):
    from django.db import transaction

    write(team)
    folder = workspace.workspace_root(team)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            Team.objects.get(pk=team.pk).delete()
            raise RuntimeError("changed my mind")
    assert callbacks == [] and (folder / "notes.md").exists()


def test_a_copy_gets_a_folder_of_its_own_never_a_leftover(team, settings):
    write(team)
    # Whatever waits under the new slug's name (an old install's folder) is nobody's.
    leftover = Path(settings.DATA_DIR) / "workspaces" / "alpha-2"
    leftover.mkdir(parents=True)
    (leftover / "old.txt").write_text("someone else's")
    clone = cloning.team_clone(team=team, slug="alpha-2")
    assert workspace.workspace_root(clone) == workspace.default_root(clone).resolve()
    assert [e.name for e in workspace.file_list(clone)] == ["notes.md"]
    assert clone.folder != team.folder


def no_server_path(message: str, *places) -> None:
    for place in places:
        assert str(place) not in message, message
    assert "/workspaces/" not in message, message


def test_clone_refusals_name_no_place_on_the_server(team, other_team, settings, monkeypatch):
    write(team)
    with pytest.raises(Conflict) as taken:
        cloning.team_clone(team=team, slug="beta")
    no_server_path(taken.value.message, settings.DATA_DIR)
    monkeypatch.setattr(cloning, "MAX_COPY_BYTES", 5)
    with pytest.raises(Conflict, match="too big to copy") as too_big:
        cloning.team_clone(team=team, slug="alpha-2")
    no_server_path(too_big.value.message, settings.DATA_DIR)


def test_a_folder_that_cannot_be_made_is_refused_without_its_path(team, tmp_path, settings):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    Team.objects.filter(pk=team.pk).update(workspace=str(blocker / "inside"))
    team.refresh_from_db()
    with pytest.raises(InvalidInput, match="custom workspace folder cannot be made") as made:
        workspace.workspace_root(team)
    no_server_path(made.value.message, tmp_path, blocker)
    Team.objects.filter(pk=team.pk).update(workspace=str(blocker))
    team.refresh_from_db()
    with pytest.raises(InvalidInput) as not_folder:
        workspace.workspace_root(team)
    no_server_path(not_folder.value.message, tmp_path, blocker)


def test_the_api_answers_a_broken_workspace_without_its_path(team, pm, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    Team.objects.filter(pk=team.pk).update(workspace=str(blocker / "inside"))
    response = ApiClient(api_token(user=pm)).get("/teams/alpha/files")
    assert response.status_code == 422
    no_server_path(response.content.decode(), tmp_path)


def test_services_keep_the_folder_through_a_rename(team):
    write(team)
    team.slug = "renamed"
    services.team_update(team=team, fields=["slug"])
    assert workspace.file_read(team, "notes.md").text == "Alpha's secret plan.\n"
