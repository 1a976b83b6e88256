"""The A2A face: a team its PM published (`Team.a2a`) served over the Agent2Agent
protocol with a2a-sdk's JSON-RPC routes at /a2a/{team}/ and its agent card at
/a2a/{team}/.well-known/agent-card.json (asgi), each request answered from the
database by one handler (handler). What a hire is lives in the domain
(teams.history.hiring).

May import: anything below the faces (the domain, the engine, tools) and the API's
auth and the MCP mount's helpers; no other face imports it."""
