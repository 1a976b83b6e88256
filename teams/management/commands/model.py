"""`manage.py model endpoint add|list|remove`: the model endpoints from the shell."""

import json

from django.core.management.base import BaseCommand, CommandError

from teams.errors import LoomError
from teams.integrations import model_endpoints
from teams.models import EndpointApi


class Command(BaseCommand):
    help = (
        "Model endpoints (where ENDPOINT/MODEL ids are served): "
        "model endpoint list; "
        "model endpoint add NAME --api openai|anthropic [--base-url URL] [--key-env VAR] "
        "[--header NAME=VAR ...] [--local]; "
        "model endpoint remove NAME."
    )

    def add_arguments(self, parser):
        parser.add_argument("what", choices=["endpoint"])
        parser.add_argument("action", choices=["add", "list", "remove"])
        parser.add_argument("name", nargs="?", default="", help="The endpoint, for add/remove.")
        parser.add_argument(
            "--api", choices=EndpointApi.values, default=EndpointApi.OPENAI, help="For add."
        )
        parser.add_argument("--base-url", default="", help="For add: empty, the SDK's default.")
        parser.add_argument(
            "--key-env", default="", help="For add: the NAME of the variable holding the key."
        )
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="NAME=VAR",
            help="For add: a header sent with every call, its value from variable VAR.",
        )
        parser.add_argument(
            "--local",
            action="store_true",
            help="For add: a server of this machine or network (private addresses allowed, "
            "its models free unless priced).",
        )
        parser.add_argument("--json", action="store_true", help="For list: JSON lines.")

    def handle(self, *args, what, action, name, **options):
        if action != "list" and not name:
            raise CommandError(f"model endpoint {action} needs the endpoint's NAME.")
        try:
            if action == "list":
                self._list(as_json=options["json"])
            elif action == "add":
                self._add(name, options)
            else:
                self.stdout.write(model_endpoints.model_endpoint_remove(name=name))
        except LoomError as exc:
            raise CommandError(exc.message) from None

    def _add(self, name: str, options) -> None:
        headers = {}
        for pair in options["header"]:
            header, sep, var = pair.partition("=")
            if not sep or not header or not var:
                raise CommandError(f"--header {pair!r}: write NAME=VAR (e.g. X-Org=MY_ORG_ID).")
            headers[header] = var
        row = model_endpoints.model_endpoint_add(
            name=name,
            api=options["api"],
            base_url=options["base_url"],
            key_env=options["key_env"],
            header_vars=headers,
            local=options["local"],
        )
        view = model_endpoints.endpoint_get(row.name)
        state = "ready" if view.usable else f"not usable yet: {view.problem}"
        self.stdout.write(f"Endpoint {row.name!r} added ({state}). Models: {row.name}/MODEL.")

    def _list(self, *, as_json: bool) -> None:
        for view in model_endpoints.endpoint_list():
            endpoint = view.endpoint
            if as_json:
                row = {
                    "name": endpoint.name,
                    "api": endpoint.api,
                    "base_url": endpoint.url(),
                    "key_env": endpoint.key_env,
                    "header_vars": dict(endpoint.header_vars),
                    "local": endpoint.local,
                    "builtin": view.builtin,
                    "usable": view.usable,
                    "problem": view.problem,
                }
                self.stdout.write(json.dumps(row))
                continue
            marks = [endpoint.api] + (["local"] if endpoint.local else [])
            marks += ["built in" if not view.changed else "changed"] if view.builtin else []
            state = "ready" if view.usable else view.problem
            url = endpoint.url() or "(SDK default)"
            self.stdout.write(f"{endpoint.name:<12} {url:<58} {', '.join(marks):<28} {state}")
