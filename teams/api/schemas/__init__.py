"""The API's request (In) and response (Out) schemas, one module per router and a
common one, each field explicit.

Out schemas of rows the live events also carry (messages, PM requests, queries,
turns) come from teams.live.event_payloads, so a program reads the same shapes over HTTP
and over the socket. Limits here are the models' rules, so the OpenAPI document says
what is accepted; the models' own validation runs behind them all the same."""
