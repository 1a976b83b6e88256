"""A turn's span, `invoke_agent <agent>`: one per attempt, linked to the attempt before
it and to the attempt that asked the PM when it resumes after an answer."""

from __future__ import annotations

from contextlib import contextmanager

from teams.observability.telemetry.state import (
    _error,
    _off,
    _origin,
    _remember,
    _remembered,
    _span_context,
    _state,
    _trace_hint,
    _wakes,
    _wakes_lock,
    enabled,
    log,
)


def _pm_request_resumed(turn, remembered: dict):
    """The answered PM request this attempt resumes after, and the span context of
    the attempt that asked; (None, None) when it resumes after none."""
    from teams.models import PMRequest, Turn

    answered = PMRequest.objects.filter(status=PMRequest.Status.ANSWERED, turn__isnull=False)
    if turn.attempts > 1:  # an approval: this turn's previous attempt asked
        request = (
            answered.filter(turn=turn, kind=PMRequest.Kind.APPROVAL)
            .order_by("-answered_at")
            .first()
        )
        if request is None or request.pk in remembered.get("pm_requests", []):
            return None, None
        return request, remembered.get("attempts", {}).get(str(turn.attempts - 1))
    request = (
        answered.filter(team_id=turn.team_id, answered_at__lte=turn.queued_at)
        .exclude(kind=PMRequest.Kind.APPROVAL)
        .order_by("-answered_at")
        .first()
    )
    if request is None:
        return None, None
    first_after = (
        Turn.objects.filter(team_id=turn.team_id, pk__gt=request.turn_id)
        .filter(queued_at__gte=request.answered_at)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if first_after != turn.pk:
        return None, None
    asking = _remembered(request.turn_id).get("attempts", {})
    attempts = Turn.objects.filter(pk=request.turn_id).values_list("attempts", flat=True).first()
    return request, asking.get(str(attempts))


class TurnRecorder:
    def __init__(self, span):
        self.span = span

    def finish(self, turn) -> None:
        """The turn's end as the database has it."""
        outcome = turn.outcome or turn.status
        self.span.set_attribute("loom.turn.outcome", outcome)
        self.span.set_attribute("loom.turn.status", turn.status)
        if turn.status == "failed":
            _error(self.span, "turn_failed", turn.error)

    def crashed(self, exc: BaseException) -> None:
        _error(self.span, type(exc).__name__, str(exc))


def turn_span(turn):
    """The span of one attempt of a turn, `invoke_agent <agent>`; the turns queued
    while it runs start in the same trace context as this one."""
    if not enabled():
        return _off()
    return _turn_span(turn)


@contextmanager
def _turn_span(turn):
    from opentelemetry import trace

    with _wakes_lock:
        woken = _wakes.pop(turn.id, None)
    remembered = _remembered(turn.id)
    parent = woken or remembered.get("parent")
    attributes = _turn_attributes(turn)
    links = _turn_links(turn, remembered, attributes)
    span = _turn_start(turn, parent, remembered, attributes, links)
    own = span.get_span_context()
    remembered["parent"] = parent
    remembered.setdefault("attempts", {})[str(turn.attempts)] = [
        format(own.trace_id, "032x"),
        format(own.span_id, "016x"),
    ]
    _remember(turn.id, remembered)
    origin_token = _origin.set(parent)
    try:
        with trace.use_span(span, end_on_exit=True, record_exception=False):
            yield TurnRecorder(span)
    finally:
        _origin.reset(origin_token)


def _turn_attributes(turn) -> dict:
    agent, team = turn.agent, turn.team
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent.name,
        "gen_ai.agent.id": str(agent.id),
        "gen_ai.request.model": turn.model or agent.effective_model,
        "loom.team": team.slug,
        "loom.team.id": team.id,
        "loom.turn.id": turn.id,
        "loom.turn.number": turn.number,
        "loom.turn.purpose": turn.purpose,
        "loom.phase": turn.phase,
        "loom.turn.attempt": turn.attempts,
    }


def _turn_links(turn, remembered: dict, attributes: dict) -> list:
    """The attempt's links (to the attempt that asked the PM, to the attempt before);
    the PM request it resumes after goes into `attributes` and `remembered`."""
    from opentelemetry.trace import Link

    links = []
    previous = remembered.get("attempts", {}).get(str(turn.attempts - 1))
    try:
        request, asked = _pm_request_resumed(turn, remembered)
    except Exception:  # never fail a turn over its trace
        log.warning("Could not find what turn %s resumes after", turn.id, exc_info=True)
        request, asked = None, None
    if request is not None:
        waited = (request.answered_at - request.created_at).total_seconds()
        about = {
            "loom.pm_request.id": request.pk,
            "loom.pm_request.kind": request.kind,
            "loom.pm_request.wait_seconds": round(waited, 3),
        }
        attributes.update(about)
        if asked:
            links.append(Link(_span_context(asked), about))
            if asked == previous:
                previous = None
        remembered.setdefault("pm_requests", []).append(request.pk)
    if previous:
        links.append(Link(_span_context(previous), {"loom.link": "previous_attempt"}))
    return links


def _turn_start(turn, parent, remembered: dict, attributes: dict, links: list):
    """Start the attempt's span: under `parent`, or a root that a later attempt keeps
    in the first attempt's trace."""
    from opentelemetry import context as otel_context
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if parent:
        context = TraceContextTextMapPropagator().extract(parent)
        hint = None
    else:
        context = otel_context.Context()
        first = remembered.get("attempts", {}).get("1")
        hint = int(first[0], 16) if first and turn.attempts > 1 else None
    hinted = _trace_hint.set(hint)
    try:
        return _state.tracer.start_span(
            f"invoke_agent {turn.agent.name}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
    finally:
        _trace_hint.reset(hinted)
