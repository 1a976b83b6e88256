"""The REST API end to end, as a program uses it: real HTTP against `manage.py serve`
(a child process on the test database), the real anthropic client talking to the
fake Messages API server of this process, a token made with `create_api_token`.

A program creates a team (a coach, a coder and an external agent "bot"), starts
it, asks the coder a question as bot through bot's tool endpoint, reads the
coder's answer from bot's context, answers the coach's PM request and sees the
team resume and finish. A second test listens on the team's WebSocket with a token."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from teams.lib.catalog import CLAUDE_DEFAULT_MODEL
from tests import live_site
from tests.fakes.messages_api import FakeMessagesAPI, Recorded, text, tool
from tests.helpers import api_token, make_team, make_user

WAIT_SECONDS = 30
API_KEY = "sk-test"
MODEL = CLAUDE_DEFAULT_MODEL
QUESTION = "Which port does the staging database listen on?"
ANSWER = "Port 6543, behind the bastion."
PM_QUESTION = "May we pin the staging database port in the deploy config?"
PM_ANSWER = "Yes, pin it; note it in the runbook."
SUMMARY = "Bot knows the staging port; the PM approved pinning it."

# No proxy from the environment between the test and its own child process.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def sites(transactional_db, request):
    sites = live_site.Sites(request.node.name)
    yield sites
    sites.close()


# --- the fake model's side -------------------------------------------------------


def _after_tool_result(request: Recorded) -> bool:
    """Is this the model call that follows a tool result in the same turn?"""
    last = request.body["messages"][-1]["content"]
    return isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)


class TeamScript:
    """What the model replies, by agent and by what its request shows (never by
    order alone: how many turns pass before bot's question lands is up to timing).

    The coder answers each of bot's questions once; the coach asks the PM once the
    coder has answered, and completes the (only) phase once it sees the PM's answer.
    Anything else is a calm pass."""

    def __init__(self):
        self.answered: list[str] = []  # query keys, in the order the coder answered
        self.asked_pm = False
        self.finished = False
        self.greeted = False

    def __call__(self, request: Recorded):
        if _after_tool_result(request):  # after a tool that does not end the turn
            return text("Done.")
        if request.agent == "coder":
            return self.coder(request)
        if request.agent == "coach":
            return self.coach(request)
        return text("OK.")

    def coder(self, request: Recorded):
        keys = re.findall(r"\[Query from bot \| ID: (q-[0-9a-f]+)\]", request.dump)
        new = [key for key in keys if key not in self.answered]
        if new:
            self.answered.append(new[0])
            return tool("peer_answer_question", {"query_id": new[0], "answer": ANSWER})
        return tool("pass_turn", {"reason": "nothing in my inbox yet"})

    def coach(self, request: Recorded):
        if PM_ANSWER in request.dump and not self.finished:
            self.finished = True
            return tool("signal_phase_complete", {"summary": SUMMARY})
        if self.answered and not self.asked_pm:
            self.asked_pm = True
            return tool("ask_pm", {"question": PM_QUESTION})
        if not self.greeted:
            self.greeted = True
            return text("Welcome. @coder, bot will ask you about staging.")
        return tool("pass_turn", {"reason": "waiting for the coder"})


# --- the program's side ----------------------------------------------------------


class Program:
    """A program calling the API: JSON over HTTP with `Authorization: Bearer`."""

    def __init__(self, site: live_site.Site, token: str | None, explain=lambda: ""):
        self.site, self.token, self.explain = site, token, explain

    def call(self, method: str, path: str, body=None, expect: int = 200):
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"{self.site.url}/api{path}", data=data, method=method, headers=headers
        )
        try:
            with OPENER.open(request, timeout=15) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        if status != expect:
            raise AssertionError(
                f"{method} {path} answered {status}, not {expect}: {raw[:2000]!r}\n{self.explain()}"
            )
        return json.loads(raw) if raw else None

    def get(self, path, **kwargs):
        return self.call("GET", path, **kwargs)

    def post(self, path, body=None, **kwargs):
        return self.call("POST", path, {} if body is None else body, **kwargs)

    def wait_for(self, what: str, probe, timeout: float = WAIT_SECONDS):
        """Poll `probe` until it returns something true; fail saying what was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"Not seen within {timeout} s: {what}.\n{self.explain()}")
            time.sleep(0.1)


def _story(site: live_site.Site, api: FakeMessagesAPI | None = None) -> str:
    """What a failure message shows: the model calls made and the site's log."""
    lines = []
    if api is not None:
        lines.append(f"--- {len(api.requests)} model calls (agent: last message) ---")
        for request in list(api.requests):
            last = json.dumps(request.body["messages"][-1]["content"])
            lines.append(f"{request.agent or '?'}: {last[-200:]}")
    log = site.log()
    lines.append(f"--- site log ({site.log_path}), last 6000 characters ---")
    lines.append(log[-6000:])
    return "\n".join(lines)


def _header(request: Recorded, name: str) -> str | None:
    return next((v for k, v in request.headers.items() if k.lower() == name), None)


# --- the tests -------------------------------------------------------------------


def test_a_program_runs_a_team_with_an_external_agent_over_http(sites):
    make_user("root", superuser=True)
    script = TeamScript()
    with FakeMessagesAPI(script) as api:
        site = sites.start(
            ANTHROPIC_API_KEY=API_KEY,
            ANTHROPIC_BASE_URL=api.url,
            LOOM_MODEL=MODEL,
            LOOM_OFFLINE_DELAY="0",
            LOOM_SECRET_KEY="program-e2e-secret-key",
            LOOM_API_RATE="100000/min",
        )

        # The token, as an operator makes it: printed alone on the last line.
        made = live_site.manage("create_api_token", "--user", "root", "--label", "e2e program")
        token = made.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r"loom_[A-Za-z0-9_-]{20,}", token), made.stdout
        assert token not in made.stdout.strip().splitlines()[0]

        def explain():
            return _story(site, api)

        program = Program(site, token, explain)
        Program(site, None, explain).get("/teams", expect=401)
        Program(site, "loom_not-a-real-token", explain).get("/teams", expect=401)

        # Create the team with two agents and an external one, then start it.
        team = program.post(
            "/teams",
            {
                "slug": "e2e",
                "name": "End to end",
                "goal": "Find out how to reach the staging database.",
                "phases": ["discovery"],
                "max_turns": 30,
                "agents": [
                    {"name": "coach", "role": "coach"},
                    {"name": "coder", "role": "coder"},
                    {"name": "bot", "role": "external"},
                ],
            },
            expect=201,
        )
        assert team["status"] == "idle" and team["actions"] == ["start"]
        assert {a["name"]: a["role"] for a in team["agents"]} == {
            "coach": "coach",
            "coder": "coder",
            "bot": "external",
        }
        assert {a["effective_model"] for a in team["agents"]} == {MODEL}
        started = program.post("/teams/e2e/start")
        assert started["status"] == "running"

        # Bot's program reads its context, then asks the coder through bot's tool.
        cursor = program.get("/teams/e2e/agents/bot/context")["next_after"]
        asked = program.post(
            "/teams/e2e/agents/bot/tools/peer_ask_question",
            {"question": QUESTION, "target": "coder"},
        )
        assert not asked["is_error"] and asked["outcome"] is None, asked
        key = re.search(r"Query ID: (q-[0-9a-f]+)", asked["result"]).group(1)

        # The coder answers on its turn (on the fake server); bot reads the answer.
        seen = []

        def answer_in_context():
            nonlocal cursor
            page = program.get(f"/teams/e2e/agents/bot/context?after={cursor}")
            seen.extend(page["messages"])
            cursor = page["next_after"]
            return next(
                (m for m in seen if m["to_you"] and m["content"].startswith("[Answer from")), None
            )

        answer = program.wait_for(
            f"the coder's answer to {key} in bot's context", answer_in_context
        )
        assert answer["content"].startswith(f"[Answer from coder | Query: {key}]"), answer
        assert ANSWER in answer["content"]
        assert (answer["kind"], answer["speaker"], answer["query"]) == ("answer", "coder", key)
        assert script.answered == [key]
        query = program.get(f"/teams/e2e/queries/{key}")
        assert (query["status"], query["answered_by"], query["answer"]) == (
            "answered",
            "coder",
            ANSWER,
        )

        # The coach asks the PM; the team waits for the answer.
        def open_request():
            return program.get("/teams/e2e/pm-requests?status=open")

        [request] = program.wait_for("the coach's open PM request", open_request)
        assert (request["agent"], request["question"]) == ("coach", PM_QUESTION)
        waiting = program.get("/teams/e2e")
        assert waiting["status"] == "awaiting_pm", waiting
        last_turn = program.get("/teams/e2e/turns?limit=500")["next_after"]

        # The PM answers through the API; the team resumes, the coach reads the
        # answer and completes the only phase.
        answered = program.post(
            f"/teams/e2e/pm-requests/{request['id']}/answer", {"answer": PM_ANSWER}
        )
        assert (answered["status"], answered["answer"]) == ("answered", PM_ANSWER)
        assert program.get("/teams/e2e")["status"] in ("running", "done")
        assert program.get("/teams/e2e/pm-requests?status=open") == []
        program.post(f"/teams/e2e/pm-requests/{request['id']}/answer", {"answer": "x"}, expect=409)

        def finished():
            # The phase completes (the team is done) before the coach's turn is logged.
            team = program.get("/teams/e2e")
            later = program.get(f"/teams/e2e/turns?after={last_turn}")["turns"]
            settled = later and all(t["status"] == "done" for t in later)
            return team["status"] == "done" and settled and (team, later)

        done, later = program.wait_for("the team done after the PM's answer", finished)
        assert done["turn_count"] <= 30 and done["actions"] == []
        assert all(t["model"] == MODEL for t in later), later
        assert (later[-1]["agent"], later[-1]["outcome"]) == ("coach", "phase_complete"), later
        conversation = program.get("/teams/e2e/messages?limit=500")["messages"]
        assert any(m["kind"] == "pm" and m["content"] == PM_ANSWER for m in conversation)
        assert any(m["kind"] == "phase_summary" and SUMMARY in m["content"] for m in conversation)

        # The coach's model call after the answer carried it.
        coach_calls = [r for r in api.requests if r.agent == "coach"]
        assert PM_ANSWER in coach_calls[-1].dump
        # The real anthropic client made every call, with the configured key and model.
        assert api.requests
        for call in api.requests:
            assert call.path.startswith("/v1/messages"), call.path
            # The SDK sends the key as x-api-key or (newer versions) as a Bearer token.
            assert API_KEY in (
                _header(call, "x-api-key"),
                (_header(call, "authorization") or "").removeprefix("Bearer "),
            ), call.headers
            assert _header(call, "anthropic-version"), call.headers
            assert (_header(call, "user-agent") or "").startswith("Anthropic/Python")
            assert call.body["model"] == MODEL
        # Bot is driven by its program: it never had a turn or a model call.
        assert {r.agent for r in api.requests} == {"coach", "coder"}
        assert program.get("/teams/e2e/turns?agent=bot")["turns"] == []


def _receive_until(ws, predicate, limit=50) -> list[dict]:
    """Events from the socket until one matches; all of them, in order."""
    seen = []
    for _ in range(limit):
        seen.append(json.loads(ws.recv(timeout=WAIT_SECONDS)))
        if predicate(seen[-1]):
            return seen
    raise AssertionError(f"not seen in {seen}")


def test_a_program_listens_on_the_team_socket_with_its_token(sites):
    team = make_team("live")
    key = api_token(team=team, label="listener")
    site = sites.start(LOOM_SECRET_KEY="program-ws-secret-key", LOOM_API_RATE="100000/min")
    program = Program(site, key, lambda: _story(site))
    url = f"{site.ws_url}/ws/teams/live/"

    # A program's handshake: its token, no Origin (websockets sends none unless asked).
    with connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, proxy=None, open_timeout=10
    ) as ws:
        catch_up = _receive_until(ws, lambda e: e["event"] == "team.status")
        assert catch_up[-1]["status"] == "idle"
        posted = program.post(
            "/teams/live/messages", {"content": "Hello from a program."}, expect=201
        )
        events = _receive_until(ws, lambda e: e["event"] == "message.created")
        message = events[-1]["message"]
        assert (message["id"], message["kind"], message["content"]) == (
            posted["id"],
            "pm",
            "Hello from a program.",
        )

    # A bad token is refused with 4403 (accepted, then closed, so a client can tell).
    with connect(
        url, additional_headers={"Authorization": "Bearer loom_wrong"}, proxy=None, open_timeout=10
    ) as ws:
        with pytest.raises(ConnectionClosed) as refused:
            ws.recv(timeout=WAIT_SECONDS)
    assert refused.value.rcvd is not None and refused.value.rcvd.code == 4403

    # No token and no Origin: not a page of this site, not a program; refused at once.
    with pytest.raises(InvalidStatus) as denied:
        connect(url, proxy=None, open_timeout=10)
    assert denied.value.response.status_code == 403
