"""The eval pages: the runs, one run with its teams and failing checks, two runs
compared; a person sees the runs they started."""

import pytest
from django.core.management import call_command

from teams.models import EvalRun
from tests.helpers import client_for
from tests.teams.evals.helpers import case, suite_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_runs(tmp_path):
    """Run 1 passes both cases; run 2 (max_turns=3) stops them at the turn budget."""
    suite = suite_file(tmp_path, [case("steady"), case("fragile", checks=[{"max_turns": 40}])])
    call_command("eval", "run", str(suite), "--concurrency", "1")
    call_command("eval", "run", str(suite), "--concurrency", "1", "--set", "max_turns=3")
    return list(EvalRun.objects.order_by("id"))


def test_a_run_page_links_each_team_and_shows_the_failing_checks(two_runs, superuser):
    first, second = two_runs
    page = client_for(superuser).get(f"/evals/{second.pk}/")

    html = page.content.decode()
    assert page.status_code == 200
    team = second.cases.get(case="steady").team
    assert f'href="/teams/{team.slug}/"' in html
    assert "0 of 2 passed" in html
    assert '<pre class="check-detail">Budget reached:' in html


def test_the_compare_page_shows_the_changed_verdicts(two_runs, superuser):
    first, second = two_runs
    page = client_for(superuser).get(f"/evals/{first.pk}/compare/{second.pk}")

    html = page.content.decode()
    assert page.status_code == 200
    assert "<strong>passed → failed</strong>" in html
    assert "Changed verdict: steady, fragile" in html


def test_the_list_and_a_run_are_for_the_person_who_started_it(two_runs, pm, superuser):
    first, _ = two_runs
    assert client_for(pm).get(f"/evals/{first.pk}/").status_code == 404
    listing = client_for(pm).get("/evals/").content.decode()
    assert "No eval runs yet" in listing
    everything = client_for(superuser).get("/evals/").content.decode()
    assert f'href="/evals/{first.pk}/"' in everything


def test_an_eval_team_is_marked_in_its_live_view_and_the_admin(two_runs, superuser, team):
    first, _ = two_runs
    eval_team = first.cases.get(case="steady").team
    browser = client_for(superuser)

    live = browser.get(f"/teams/{eval_team.slug}/").content.decode()
    assert f'case steady #1 of <a href="/evals/{first.pk}/">eval run {first.pk}</a>' in live
    assert 'id="eval-note"' not in browser.get(f"/teams/{team.slug}/").content.decode()
    made = browser.get("/admin/teams/team/?eval=yes").content.decode()
    others = browser.get("/admin/teams/team/?eval=no").content.decode()
    assert eval_team.slug in made and team.slug not in made
    assert team.slug in others and eval_team.slug not in others
