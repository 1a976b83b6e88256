"""Consultants (the profiles agents ask for second opinions) and a team's consultations."""

from ninja import Router, Status

from teams.api.auth import caller
from teams.api.paging import Limit, within_chars
from teams.api.schemas.common import responses
from teams.api.schemas.consultants import (
    ConsultantIn,
    ConsultantOut,
    ConsultantPatch,
    ConsultationOut,
)
from teams.errors import NotFound
from teams.integrations import consultations
from teams.models import ConsultantProfile, Consultation

router = Router(tags=["consultants"])


def _out(profile: ConsultantProfile, *, details: bool = True) -> ConsultantOut:
    return ConsultantOut.of(profile, consultations.key_problem(profile), details=details)


def _superuser(request, doing: str) -> None:
    caller(request).require_superuser(f"{doing} (consultants serve every team)")


@router.get(
    "/consultants", response=responses({200: list[ConsultantOut]}), operation_id="consultants_list"
)
def consultants_list(request):
    """Every consultant profile: its name, strengths and whether it can be asked now;
    for a superuser also how it is reached and whether its key is there (never the
    key)."""
    who = caller(request)
    details = who.user is not None and who.user.is_superuser
    return [_out(p, details=details) for p in ConsultantProfile.objects.order_by("name")]


@router.post(
    "/consultants",
    response=responses({201: ConsultantOut}, 400, 409),
    operation_id="consultants_create",
)
def consultants_create(request, payload: ConsultantIn):
    _superuser(request, "add consultants")
    profile = ConsultantProfile(**payload.model_dump())
    saved = consultations.consultant_profile_save(
        profile=profile, fields=list(consultations.PROFILE_SETTINGS)
    )
    return Status(201, _out(saved))


@router.patch(
    "/consultants/{name}",
    response=responses({200: ConsultantOut}, 400, 404),
    operation_id="consultants_update",
)
def consultants_update(request, name: str, payload: ConsultantPatch):
    _superuser(request, "change consultants")
    profile = ConsultantProfile.objects.filter(name=name[:60]).first()
    if profile is None:
        raise NotFound(f"No consultant named {name!r}.")
    fields = list(payload.model_dump(exclude_unset=True))
    for field in fields:
        value = getattr(payload, field)
        setattr(profile, field, value.value if hasattr(value, "value") else value)
    consultations.consultant_profile_save(profile=profile, fields=fields)
    return _out(profile)


@router.get(
    "/teams/{team}/consultations",
    response=responses({200: list[ConsultationOut]}, 404),
    operation_id="consultations_list",
)
def consultations_list(request, team: str, limit: int = Limit):
    """The team's consultations, newest first; the answers to one ask share a batch."""
    row = caller(request).team(team)
    rows = (
        Consultation.objects.filter(team=row)
        .select_related("agent", "profile")
        .order_by("-id")[:limit]
    )
    found = [ConsultationOut.of(c) for c in consultations.with_batch_requests(list(rows))]
    return within_chars(found, False, size=lambda out: len(out.model_dump_json()))[0]
