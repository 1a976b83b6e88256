"""The fake MCP server over stdio, as a light program: `python tests/fakes/mcp_stdio.py`
(or `python -m tests.fakes.mcp_stdio`; arguments are ignored).

A hand-written JSON-RPC 2.0 server on stdin/stdout, one JSON message a line as MCP's
stdio transport has it, importing only the standard library. It does not use the
official SDK's server, as the HTTP fake does (McpHttpServer in tests.fakes.mcp_servers):
the tests start this process many times a run, and importing and running the SDK cost
about a second of CPU each start. Its tools and answers mirror `build()` in
mcp_servers.py, byte for byte where the SDK's client can tell (listing, results, tool
errors, the initialize handshake; tests/teams/engine/test_mcp_fakes_agree.py checks it):

- echo(text), add(a, b), pid(), env(names), image() (a PNG), whose results are text
  (with structuredContent {"result": text}, as the SDK gives a tool returning str) or
  an image;
- crash() (the process exits mid-call), hang(seconds=3600) (sleeps; other requests are
  answered meanwhile: each call runs in a thread of its own), huge() (a 5 MB text),
  fail() (a tool error, isError), broken(x=0) (listed with an input schema that is no
  JSON schema), grow() (adds the tool `grown` and says the tool list changed).

FAKE_MCP_MODE=garbage makes it print non-protocol lines and never answer."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time

HUGE_CHARS = 5 * 1024 * 1024
# A 1x1 PNG, and its size as the client should report it.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

# The versions the initialize handshake reaches (the SDK's HANDSHAKE_PROTOCOL_VERSIONS):
# the client's is answered if it is one of them, else the latest.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CAPABILITIES = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}
SERVER_INFO = {"name": "loom-fake", "version": ""}
METHOD_NOT_FOUND, INVALID_PARAMS = -32601, -32602
REQUIRED = object()

out_lock = threading.Lock()
tools_lock = threading.Lock()
cancelled: set = set()  # ids of calls the client gave up on: their answers are dropped
state = {"initialized": False}


def send(message: dict) -> None:
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
    with out_lock:
        sys.stdout.buffer.write(line.encode("utf-8"))
        sys.stdout.buffer.flush()


# --- the tools ----------------------------------------------------------------------


class ToolError(Exception):
    pass


def text_result(text: str) -> dict:
    content = [{"text": text, "type": "text"}]
    return {"content": content, "isError": False, "structuredContent": {"result": text}}


def error_result(text: str) -> dict:
    return {"content": [{"text": text, "type": "text"}], "isError": True}


class Tool:
    """A tool as the SDK's MCPServer lists and calls a decorated function: its input
    schema is the pydantic model of its parameters (`fields`: name -> (JSON type,
    default or REQUIRED)), and one returning text has an output schema."""

    def __init__(self, name, description, run, fields=(), *, text=True, schema=None):
        self.name, self.run, self.fields = name, run, dict(fields)
        properties = {}
        for field, (kind, default) in self.fields.items():
            prop = {"title": field.replace("_", " ").title(), "type": kind}
            if kind == "array":
                prop["items"] = {"type": "string"}
            if default is not REQUIRED:
                prop["default"] = default
            properties[field] = dict(sorted(prop.items()))
        required = [f for f, (_, default) in self.fields.items() if default is REQUIRED]
        generated = {"properties": properties, **({"required": required} if required else {})}
        self.entry = {
            "description": description,
            "inputSchema": schema or {**generated, "type": "object", "title": f"{name}Arguments"},
            "name": name,
        }
        if text:
            self.entry["outputSchema"] = {
                "properties": {"result": {"title": "Result", "type": "string"}},
                "required": ["result"],
                "type": "object",
                "title": f"{name}Output",
            }

    def call(self, arguments: dict) -> dict:
        values, errors = {}, []
        for field, (kind, default) in self.fields.items():
            if field not in arguments:
                if default is REQUIRED:
                    errors.append((field, "Field required", "missing", arguments))
                else:
                    values[field] = default
                continue
            try:
                values[field] = coerce(kind, arguments[field])
            except ValueError as exc:
                errors.append((field, *exc.args, arguments[field]))
        if errors:
            n = len(errors)
            lines = [f"{n} validation error{'s' if n > 1 else ''} for {self.name}Arguments"]
            for field, message, kind, value in errors:
                lines.append(field)
                lines.append(
                    f"  {message} [type={kind}, input_value={value!r}, "
                    f"input_type={type(value).__name__}]"
                )
            return error_result(f"Error executing tool {self.name}: " + "\n".join(lines))
        try:
            return self.run(**values)
        except ToolError as exc:
            return error_result(f"Error executing tool {self.name}: {exc}")


def coerce(kind: str, value):
    """A value as pydantic's lax mode takes it for the JSON type, or ValueError(message,
    error type) in pydantic's words."""
    if kind == "string":
        if isinstance(value, str):
            return value
        raise ValueError("Input should be a valid string", "string_type")
    if kind == "array":
        if not isinstance(value, list):
            raise ValueError("Input should be a valid list", "list_type")
        for item in value:
            coerce("string", item)
        return value
    integer = kind == "integer"
    if isinstance(value, str):
        try:
            value = int(value.strip()) if integer else float(value.strip())
        except ValueError:
            what = "an integer" if integer else "a number"
            raise ValueError(
                f"Input should be a valid {kind}, unable to parse string as {what}",
                "int_parsing" if integer else "float_parsing",
            ) from None
    if not isinstance(value, int | float):
        raise ValueError(f"Input should be a valid {kind}", "int_type" if integer else "float_type")
    if integer and value != int(value):
        raise ValueError(
            "Input should be a valid integer, got a number with a fractional part", "int_from_float"
        )
    return int(value) if integer else value


def env(names):
    values = {n: os.environ.get(n) for n in names}
    return text_result(
        "\n".join(
            f"{n}={v} ({len(v)} characters)" if v is not None else f"{n} is unset"
            for n, v in values.items()
        )
    )


def image():
    data = base64.b64encode(PNG).decode("ascii")
    return {"content": [{"data": data, "mimeType": "image/png", "type": "image"}], "isError": False}


def crash():
    os._exit(3)


def hang(seconds):
    time.sleep(seconds)
    return text_result("woke up")


def fail():
    raise ToolError("the fake tool failed on purpose")


def grow():
    with tools_lock:
        TOOLS.setdefault("grown", Tool("grown", "Added later.", lambda: text_result("grown")))
    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    return text_result("grew")


TOOLS = {
    tool.name: tool
    for tool in [
        Tool(
            "echo",
            "Say the text back.",
            lambda text: text_result(text),
            {"text": ("string", REQUIRED)},
        ),
        Tool(
            "add",
            "Add two integers.",
            lambda a, b: text_result(str(a + b)),
            {"a": ("integer", REQUIRED), "b": ("integer", REQUIRED)},
        ),
        Tool(
            "pid",
            "The server's process id (to tell a restarted server).",
            lambda: text_result(str(os.getpid())),
        ),
        Tool(
            "env",
            "The values of these environment variables, as the server sees them.",
            env,
            {"names": ("array", REQUIRED)},
        ),
        Tool("image", "A tiny PNG.", image, text=False),
        Tool("crash", "The process dies mid-call.", crash),
        Tool("hang", "Never answers in time.", hang, {"seconds": ("number", 3600)}),
        Tool("huge", "A 5 MB text.", lambda: text_result("x" * HUGE_CHARS)),
        Tool("fail", "A tool error (isError).", fail),
        Tool(
            "broken",
            "Listed with an invalid input schema.",
            lambda x: text_result("never offered"),
            {"x": ("integer", 0)},
            schema={"properties": {"x": {"type": 12}}, "type": "object"},
        ),
        Tool("grow", "Adds the tool `grown` and tells the client the list changed.", grow),
    ]
}


# --- the protocol -------------------------------------------------------------------


class Refused(Exception):
    """A JSON-RPC error answer: (code, message[, data])."""


def invalid_params():
    return Refused(INVALID_PARAMS, "Invalid request parameters", "")


def initialize(params: dict) -> dict:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise invalid_params()
    state["initialized"] = True
    return {
        "capabilities": CAPABILITIES,
        "protocolVersion": requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
        "serverInfo": SERVER_INFO,
    }


def unknown(what: str, code: int, data=None):
    def refuse(params: dict):
        name = params.get("uri" if what == "resource" else "name")
        raise Refused(code, f"Unknown {what}: {name}", *([data(name)] if data else []))

    return refuse


def list_tools(params: dict) -> dict:
    with tools_lock:
        return {"tools": [tool.entry for tool in TOOLS.values()]}


def call_tool(params: dict) -> dict:
    name, arguments = params.get("name"), params.get("arguments") or {}
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise invalid_params()
    with tools_lock:
        tool = TOOLS.get(name)
    return tool.call(arguments) if tool else error_result(f"Unknown tool: {name}")


METHODS = {
    "initialize": initialize,
    "ping": lambda params: {},
    "tools/list": list_tools,
    "tools/call": call_tool,
    "resources/list": lambda params: {"resources": []},
    "resources/templates/list": lambda params: {"resourceTemplates": []},
    "prompts/list": lambda params: {"prompts": []},
    "prompts/get": unknown("prompt", 0),
    "resources/read": unknown("resource", INVALID_PARAMS, lambda uri: {"uri": uri}),
}


def answer(request_id, method: str, params: dict) -> None:
    try:
        message = {"jsonrpc": "2.0", "id": request_id, "result": METHODS[method](params)}
    except Refused as exc:
        code, text, *data = exc.args
        error = {"code": code, "message": text, **({"data": data[0]} if data else {})}
        message = {"jsonrpc": "2.0", "id": request_id, "error": error}
    if request_id not in cancelled:
        send(message)


def handle(message) -> None:
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return  # an answer to a request of ours (there are none), or not a message
    method, params = message["method"], message.get("params")
    params = params if isinstance(params, dict) else {}
    if "id" not in message:  # a notification
        if method == "notifications/initialized":
            state["initialized"] = True
        elif method == "notifications/cancelled" and isinstance(params.get("requestId"), int | str):
            cancelled.add(params["requestId"])
        return
    request_id = message["id"]
    if method not in METHODS:
        error = {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": method}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})
    elif not state["initialized"] and method not in ("initialize", "ping"):
        error = {"code": INVALID_PARAMS, "message": "Invalid request parameters", "data": ""}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})
    elif method == "tools/call":  # in a thread: a hanging call holds up nothing else
        threading.Thread(target=answer, args=(request_id, method, params), daemon=True).start()
    else:
        answer(request_id, method, params)


def main() -> None:
    if os.environ.get("FAKE_MCP_MODE") == "garbage":
        for _ in range(5):
            print("this is not JSON-RPC", flush=True)
        sys.stdin.read()
        return
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # the SDK's server drops a line that is no JSON-RPC, answering nothing
        handle(message)
    # stdin closed: the client is gone. Calls still running (a hang) are not waited for.
    os._exit(0)


if __name__ == "__main__":
    main()
