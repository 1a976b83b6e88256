"""The trace context of HTTP requests: with tracing on (teams.observability.telemetry), a request's
W3C `traceparent` (and `tracestate`) becomes the parent of the work it starts: the
turns it queues (start, answer, post: across the channel layer to the worker) and
the model calls of a tool run through the API. Without tracing, or without the
header, the request passes straight through."""

from teams.observability import telemetry


class TraceContextMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not telemetry.enabled():
            return self.get_response(request)
        with telemetry.origin(telemetry.carrier_of(request.META)):
            return self.get_response(request)
