"""Watching the domain from above: traces over OpenTelemetry (telemetry), the
Prometheus metrics of /metrics (metrics), and what /healthz reads (health).

May import: the base and the domain. The domain never imports it (it publishes what
happened; observability subscribes). The engine and the faces may."""
