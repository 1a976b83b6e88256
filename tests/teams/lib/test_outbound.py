"""The outbound guard (teams/lib/outbound.py) on every URL a person gives Loom: webhook
URLs and consultants' base URLs are refused when they lead to loopback, private,
link-local (the cloud metadata address), CGNAT, multicast, reserved or unspecified
addresses, in any spelling, when saved (API, admin) and when sent (a delivery, a
consultation), before any connection is made. Name lookups are the suite's stub
(tests/conftest.py `names`); what must connect goes to loopback servers with
LOOM_OUTBOUND_ALLOW_PRIVATE on. No test sends anything anywhere else."""

from __future__ import annotations

import logging
import socketserver
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler

import httpcore2
import pytest
from django.urls import reverse
from django.utils import timezone

from teams.engine import deliveries
from teams.engine.consult import consult
from teams.errors import InvalidInput, ModelError
from teams.integrations import webhooks
from teams.integrations.consultations import PeerFrame
from teams.lib import outbound
from teams.models import ConsultantProfile, Webhook, WebhookDelivery
from tests.fakes.server import LocalServer, serving_thread
from tests.fakes.webhook_receiver import Answer, WebhookReceiver
from tests.helpers import ApiClient, api_token, client_for, state

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.215.14"  # only ever an answer of the stub resolver: nothing connects to it

# (url, what the stub resolver answers for its name, what the refusal says)
REFUSED = [
    # loopback, in every spelling the C library reads
    ("http://127.0.0.1/loom", None, "loopback"),
    ("http://127.0.0.1:8000/loom", None, "loopback"),
    ("https://127.255.255.254/", None, "loopback"),
    ("http://2130706433/", None, "loopback"),
    ("http://0x7f000001/", None, "loopback"),
    ("http://017700000001/", None, "loopback"),
    ("http://127.1/", None, "loopback"),
    ("http://0x7f.1/", None, "loopback"),
    ("http://[::1]/", None, "loopback"),
    ("http://[0:0:0:0:0:0:0:1]:9/", None, "loopback"),
    ("http://[::ffff:127.0.0.1]/", None, "loopback"),
    ("http://[::ffff:7f00:1]/", None, "loopback"),
    ("http://localhost/", None, "loopback"),
    ("http://LOCALHOST./x", None, "loopback"),
    ("https://loop.example.test/hook", ["127.0.0.1"], "loop.example.test resolves to 127.0.0.1"),
    # private networks
    ("http://10.0.0.5/", None, "10.0.0.5 is a private address"),
    ("http://172.16.0.1/", None, "private"),
    ("http://172.31.255.255/", None, "private"),
    ("http://192.168.1.1:8080/", None, "private"),
    ("http://167772165/", None, "10.0.0.5) is a private address"),
    ("http://[fc00::1]/", None, "private"),
    ("http://[fd12:3456::1]/", None, "private"),
    ("http://[fec0::1]/", None, "private"),
    ("http://[64:ff9b::a00:5]/", None, "private"),  # NAT64 of 10.0.0.5
    ("http://[2002:a00:5::]/", None, "private"),  # 6to4 of 10.0.0.5
    ("https://intranet.example.test/", ["10.0.0.5"], "resolves to 10.0.0.5, a private address"),
    # link-local, the cloud metadata addresses among them
    ("http://169.254.169.254/latest/meta-data/", None, "cloud metadata"),
    ("http://2852039166/latest/", None, "cloud metadata"),
    ("http://[::ffff:169.254.169.254]/", None, "cloud metadata"),
    ("http://[fd00:ec2::254]/", None, "cloud metadata"),
    ("http://100.100.100.200/", None, "cloud metadata"),
    ("http://169.254.1.1/", None, "link-local"),
    ("http://[fe80::1]/", None, "link-local"),
    ("https://meta.example.test/", ["169.254.169.254"], "cloud metadata"),
    # shared address space (CGNAT)
    ("http://100.64.0.1/", None, "CGNAT"),
    ("http://100.127.255.254/", None, "CGNAT"),
    # multicast, reserved, unspecified
    ("http://224.0.0.1/", None, "multicast"),
    ("http://239.255.255.250:1900/", None, "multicast"),
    ("http://[ff02::1]/", None, "multicast"),
    ("http://240.0.0.1/", None, "reserved"),
    ("http://255.255.255.255/", None, "reserved"),
    ("http://0.0.0.0/", None, "unspecified"),
    ("http://0/", None, "unspecified"),
    ("http://[::]/", None, "unspecified"),
    # every address a name resolves to is checked: one private one refuses it
    ("https://mixed.example.test/", [PUBLIC, "10.0.0.5"], "resolves to 10.0.0.5"),
    ("https://mixed6.example.test/", [PUBLIC, "::1"], "resolves to ::1, a loopback"),
]
IDS = [url for url, _, _ in REFUSED]


def test_the_table_covers_every_class_in_more_than_40_urls():
    assert len(REFUSED) >= 40
    says = " ".join(s for _, _, s in REFUSED)
    for kind in (
        "loopback",
        "private",
        "metadata",
        "link-local",
        "CGNAT",
        "multicast",
        "reserved",
        "unspecified",
    ):
        assert kind in says


@pytest.fixture
def stubbed(names):
    """The stub resolver, taught the table's names."""
    for url, answer, _ in REFUSED:
        if answer is not None:
            names[url.split("//", 1)[1].split("/", 1)[0].split(":", 1)[0]] = answer
    return names


@pytest.fixture
def connections(monkeypatch):
    """Every connection the guard lets through, recorded; refused ones never get here."""
    made = []
    real = httpcore2.SyncBackend.connect_tcp

    def connect_tcp(self, host, port, *args, **kwargs):
        made.append((host, port))
        return real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore2.SyncBackend, "connect_tcp", connect_tcp)
    return made


@pytest.fixture
def pm_api(pm):
    return ApiClient(api_token(user=pm, label="pm scripts"))


@pytest.fixture
def root_api(superuser):
    return ApiClient(api_token(user=superuser, label="root's scripts"))


def forced_webhook(team, url: str) -> Webhook:
    """A webhook whose URL was stored before the guard (or by hand): saved with a
    harmless URL, then changed in the database, past every check."""
    webhook, _ = webhooks.webhook_create(
        team=team, url="https://hooks.example.test/loom", events=["team.failed"]
    )
    Webhook.objects.filter(pk=webhook.pk).update(url=url)
    webhook.refresh_from_db()
    return webhook


def forced_profile(url: str, name: str = "outsider") -> ConsultantProfile:
    return ConsultantProfile.objects.create(
        name=name, provider="openai", model="gpt-4.1-mini", base_url=url, key_env="TEST_GPT_KEY"
    )


FRAME = PeerFrame(system="You are a peer.", prompt="How?", notes=[])


# --- the table: saved and sent, webhooks and consultants ------------------------------


@pytest.mark.parametrize(("url", "answer", "says"), REFUSED, ids=IDS)
def test_a_webhook_url_leading_inside_is_refused_when_saved(
    pm_api, team, stubbed, url, answer, says
):
    before = state()
    response = pm_api.post("/teams/alpha/webhooks", {"url": url, "events": ["team.done"]})
    assert response.status_code == 422, response.content
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "url"]
    assert says in detail["msg"] and "This URL is not used" in detail["msg"]
    assert state() == before


@pytest.mark.parametrize(("url", "answer", "says"), REFUSED, ids=IDS)
def test_a_consultant_base_url_leading_inside_is_refused_when_saved(
    root_api, stubbed, url, answer, says
):
    before = state()
    body = {"name": "outsider", "provider": "openai", "model": "gpt-4.1-mini", "base_url": url}
    response = root_api.post("/consultants", body)
    assert response.status_code == 422, response.content
    (detail,) = response.json()["detail"]
    assert detail["loc"] == ["body", "base_url"] and says in detail["msg"]
    assert state() == before
    root_api.post("/consultants", {**body, "base_url": "https://api.example.test/v1"})
    changed = root_api.patch("/consultants/outsider", {"base_url": url})
    assert changed.status_code == 422 and says in changed.json()["detail"][0]["msg"]
    assert ConsultantProfile.objects.get().base_url == "https://api.example.test/v1"


@pytest.mark.parametrize(("url", "answer", "says"), REFUSED, ids=IDS)
def test_a_delivery_to_a_url_leading_inside_fails_once_before_connecting(
    team, stubbed, connections, caplog, url, answer, says
):
    webhook = forced_webhook(team, url)
    webhooks.webhooks_notify(team=team, event="team.failed", payload={})
    assert deliveries.deliver_due() == {"delivered": 0, "retrying": 0, "failed": 1}
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", 1, None)
    assert delivery.last_error.startswith("Refused: ") and says in delivery.last_error
    assert delivery.last_error.endswith("Not retried.")
    assert connections == []
    assert not [r for r in caplog.records if r.exc_info]  # a reason, not a traceback
    later = timezone.now() + timedelta(days=1)
    assert deliveries.deliver_due(now=later) == {"delivered": 0, "retrying": 0, "failed": 0}


@pytest.mark.parametrize(("url", "answer", "says"), REFUSED, ids=IDS)
def test_a_consultation_of_a_base_url_leading_inside_is_refused_before_connecting(
    stubbed, connections, monkeypatch, url, answer, says
):
    monkeypatch.setenv("TEST_GPT_KEY", "sk-test")
    with pytest.raises(ModelError) as refused:
        consult(forced_profile(url), FRAME)
    assert "its base URL is refused" in refused.value.message and says in refused.value.message
    assert connections == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9/loom", "loopback"),
        ("http://[::1]:9/", "loopback"),
        ("http://169.254.169.254/", "cloud metadata"),
        ("https://intranet.example.test/", "private"),
    ],
)
def test_the_admin_refuses_them_as_form_errors(superuser, team, stubbed, url, says):
    client = client_for(superuser)
    hook = client.post(
        reverse("admin:teams_webhook_add"), {"team": team.pk, "url": url, "events": ["team.done"]}
    )
    assert says in " ".join(hook.context["adminform"].form.errors["url"])
    profile = client.post(
        reverse("admin:teams_consultantprofile_add"),
        {"name": "outsider", "provider": "openai", "model": "gpt-4.1-mini", "base_url": url},
    )
    assert profile.status_code == 200
    assert says in " ".join(profile.context["adminform"].form.errors["base_url"])
    assert not Webhook.objects.exists() and not ConsultantProfile.objects.exists()


# --- unusable URLs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://a..b/loom", "not a usable host name"),
        ("http://hooks.example.test:0/loom", "port 0"),
        ("http://-hooks.example.test/", "not a usable host name"),
        ("http://[fe80::1%25eth0]/", "IPv6 zone"),
    ],
)
def test_an_unusable_url_fails_once_with_the_reason_and_no_traceback(
    team, connections, caplog, url, says
):
    forced_webhook(team, url)
    webhooks.webhooks_notify(team=team, event="team.failed", payload={})
    assert deliveries.deliver_due()["failed"] == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert says in delivery.last_error and delivery.last_error.endswith("Not retried.")
    assert not [r for r in caplog.records if r.exc_info]
    assert connections == []
    with pytest.raises(InvalidInput, match=says):
        webhooks.webhook_create(team=team, url=url.replace("/loom", "/new"), events=["team.done"])


def test_a_name_that_does_not_resolve_is_accepted_when_saved_and_retried_when_sent(team):
    webhook, _ = webhooks.webhook_create(
        team=team, url="https://not-yet.example.test/loom", events=["team.failed"]
    )
    webhooks.webhooks_notify(team=team, event="team.failed", payload={})
    assert deliveries.deliver_due()["retrying"] == 1
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert delivery.status == "pending" and "Could not resolve not-yet.example.test" in (
        delivery.last_error
    )


# --- connecting to the checked address ---------------------------------------------------


def test_the_connection_goes_to_the_address_checked_with_the_name_kept(
    team, names, connections, loopback_allowed
):
    """The name resolves only in the guard's lookup (the stub): the request reaching
    the receiver proves nothing looked it up again; the Host header keeps the name."""
    names["receiver.example.test"] = ["127.0.0.1"]
    with WebhookReceiver() as hook:
        port = hook.server.server_address[1]
        webhook, hook.secret = webhooks.webhook_create(
            team=team, url=f"http://receiver.example.test:{port}/loom", events=["team.failed"]
        )
        webhooks.webhooks_notify(team=team, event="team.failed", payload={})
        assert deliveries.deliver_due()["delivered"] == 1
    assert connections == [("127.0.0.1", port)]
    assert hook.verified[0].headers["Host"] == f"receiver.example.test:{port}"


def test_a_name_that_changes_its_answer_after_the_save_is_refused_when_sent(
    team, names, connections, monkeypatch
):
    """DNS rebinding: public when saved, loopback when sent."""
    names["rebind.example.test"] = [PUBLIC]
    webhooks.webhook_create(
        team=team, url="http://rebind.example.test/loom", events=["team.failed"]
    )
    names["rebind.example.test"] = ["127.0.0.1"]
    webhooks.webhooks_notify(team=team, event="team.failed", payload={})
    assert deliveries.deliver_due()["failed"] == 1
    assert "rebind.example.test resolves to 127.0.0.1" in WebhookDelivery.objects.get().last_error
    assert connections == []


def test_a_consultant_whose_name_turns_private_while_asking_is_refused_at_the_connection(
    names, connections, monkeypatch
):
    """The check before asking passes; the connection's own check refuses it."""
    monkeypatch.setenv("TEST_GPT_KEY", "sk-test")
    answers = iter([[PUBLIC]])
    monkeypatch.setattr(outbound, "resolve", lambda host, port: next(answers, ["169.254.169.254"]))
    monkeypatch.setattr("teams.engine.consult._clients", {})
    profile = forced_profile("http://rebind.example.test/v1")
    with pytest.raises(ModelError, match="its base URL is refused: .*cloud metadata"):
        consult(profile, FRAME)
    assert connections == []


class Redirector(LocalServer):
    """Answers every request with a redirect to the cloud metadata address."""

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                server.requests.append(self.path)
                self.send_response(302)
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler


def test_a_redirect_to_a_private_address_is_not_followed(
    team, connections, monkeypatch, loopback_allowed
):
    monkeypatch.setenv("TEST_GPT_KEY", "sk-test")
    with Redirector(None) as redirector:
        forced_webhook(team, redirector.url + "/loom")
        webhooks.webhooks_notify(team=team, event="team.failed", payload={})
        assert deliveries.deliver_due()["retrying"] == 1
        assert WebhookDelivery.objects.get().last_error == "HTTP 302"
        with pytest.raises(ModelError, match="HTTP 302"):
            consult(forced_profile(redirector.url + "/v1"), FRAME)
    assert len(redirector.requests) == 2  # one POST each, no second request anywhere
    assert {host for host, _ in connections} == {"127.0.0.1"}  # never the metadata address


# --- the answer, the deadline, several at once --------------------------------------------


def test_a_failed_delivery_keeps_the_status_never_the_answers_body(
    team, agents, caplog, loopback_allowed
):
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver([Answer(500)]) as hook:
        webhook, hook.secret = webhooks.webhook_create(
            team=team, url=hook.url + "/loom", events=["team.failed"]
        )
        webhooks.webhooks_notify(team=team, event="team.failed", payload={})
        assert deliveries.deliver_due()["retrying"] == 1
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert (delivery.last_status_code, delivery.last_error) == (500, "HTTP 500")
    assert "receiver says no" not in caplog.text  # the receiver's body, nowhere


class Dripper:
    """A server that sends a response's head one byte at a time, each well within a
    per-read timeout, never finishing within the attempt's."""

    def __init__(self, interval: float = 0.1, seconds: float = 6):
        dripper = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.recv(65536)
                head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000
                stop = time.monotonic() + dripper.seconds
                for byte in head:
                    if time.monotonic() > stop:
                        return
                    try:
                        self.request.sendall(bytes([byte]))
                    except OSError:
                        return
                    time.sleep(dripper.interval)

        self.interval, self.seconds = interval, seconds
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = serving_thread(self.server)

    def __enter__(self):
        self.thread.start()
        host, port = self.server.server_address
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_the_timeout_is_for_the_whole_attempt_not_each_read(team, settings, loopback_allowed):
    settings.LOOM_WEBHOOK_TIMEOUT = 0.5
    with Dripper() as dripper:
        webhooks.webhook_create(team=team, url=dripper.url + "/loom", events=["team.failed"])
        webhooks.webhooks_notify(team=team, event="team.failed", payload={})
        started = time.monotonic()
        assert deliveries.deliver_due()["retrying"] == 1
        took = time.monotonic() - started
    assert took < 2.5, f"the attempt took {took:.1f} s"
    assert WebhookDelivery.objects.get().last_error == "Timed out after 0.5 s."


def test_several_deliveries_go_at_once(team, settings, loopback_allowed):
    settings.LOOM_WEBHOOK_CONCURRENCY = 4
    # Each answer waits until all four deliveries are in flight: sent one at a time,
    # the first would wait alone until the barrier gives up and breaks.
    all_sent = threading.Barrier(4, timeout=15)
    with WebhookReceiver([Answer(200, gate=all_sent.wait) for _ in range(4)]) as hook:
        _, hook.secret = webhooks.webhook_create(
            team=team, url=hook.url + "/loom", events=["team.failed"]
        )
        for n in range(4):
            webhooks.webhooks_notify(team=team, event="team.failed", payload={"n": n})
        assert deliveries.deliver_due() == {"delivered": 4, "retrying": 0, "failed": 0}
    assert not all_sent.broken, "the four deliveries were not sent side by side"
    assert sorted(r.body["data"]["n"] for r in hook.verified) == [0, 1, 2, 3]
    assert len({r.delivery_id for r in hook.requests}) == 4


def test_an_answer_past_the_cap_is_cut_off(loopback_allowed):
    class Big(LocalServer):
        def _handler_class(self):
            class Handler(BaseHTTPRequestHandler):
                def log_message(self, *args):
                    pass

                def do_GET(self):
                    self.send_response(200)
                    self.send_header("Content-Length", str(1 << 20))
                    self.end_headers()
                    self.wfile.write(b"x" * (1 << 20))

            return Handler

    with Big(None) as big, outbound.client(timeout=5, max_response_bytes=4096) as client:
        with pytest.raises(outbound.ResponseTooLarge, match="over 4096 bytes"):
            client.get(big.url + "/")


# --- the setting -----------------------------------------------------------------------


def test_allowing_private_addresses_still_refuses_the_metadata_address(settings, names):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = True
    for url in (
        "http://10.0.0.5/",
        "http://127.0.0.1:8000/",
        "http://[::1]/",
        "http://100.64.0.1/",
    ):
        outbound.check_url(url)
    for url in ("http://169.254.169.254/", "http://224.0.0.1/", "http://0.0.0.0/"):
        with pytest.raises(outbound.Refused):
            outbound.check_url(url)
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    with pytest.raises(outbound.Refused, match="private"):
        outbound.check_url("http://10.0.0.5/")


def test_the_real_resolver_is_used_outside_the_suite(names, monkeypatch):
    """`localhost` through the system resolver (no network): refused as loopback."""
    monkeypatch.undo()
    assert "127.0.0.1" in outbound.resolve("localhost", 80) or "::1" in outbound.resolve(
        "localhost", 80
    )
    with pytest.raises(outbound.Refused, match="localhost resolves to"):
        outbound.check_url("http://localhost:8000/")
