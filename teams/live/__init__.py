"""Live events: every event a socket may receive, declared once (events), their
numbers and the rows a socket catches up from (event_log), and the rows as the events'
and the API's payloads (event_payloads). The sockets that send them are a face
(teams.web.consumers).

May import: the base and the other domain packages. Never tools, the engine or a face."""
