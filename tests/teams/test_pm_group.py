"""The PM group's permissions are real ones of the teams app (a typo would grant
nothing), and editing a team's managers or prices is not among them."""

from django.contrib.auth.models import Permission

from teams.pm_group import PM_PERMISSIONS


def test_every_pm_permission_exists(db):
    known = set(
        Permission.objects.filter(content_type__app_label="teams").values_list(
            "codename", flat=True
        )
    )
    assert set(PM_PERMISSIONS) <= known
    assert len(set(PM_PERMISSIONS)) == len(PM_PERMISSIONS)


def test_the_site_wide_catalog_is_not_the_pms():
    assert not {p for p in PM_PERMISSIONS if p.endswith(("modelprice", "consultantprofile"))}
