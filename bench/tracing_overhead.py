"""Per-turn cost of tracing: bench/turn_overhead.py run three times, with tracing off
(no OTEL endpoint), on (exporting over OTLP/HTTP to a local receiver that accepts
everything), and on with the collector down (nothing listens on the endpoint). Prints
each run's median orchestration time and SQL statements per turn, and the ratios.

Run: .venv/bin/python bench/tracing_overhead.py [--turns 300]"""

import argparse
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Accept(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(turns: int, **env) -> tuple[float, float]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "bench/turn_overhead.py", "--turns", str(turns)],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    median = re.search(r"all turns: median ([\d.]+) ms orchestration", done.stdout)
    statements = re.search(r"SQL statements per turn: ([\d.]+)", done.stdout)
    return float(median[1]), float(statements[1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{receiver.server_address[1]}"
    off = run(args.turns)
    on = run(args.turns, OTEL_EXPORTER_OTLP_ENDPOINT=up)
    down = run(args.turns, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    receiver.shutdown()
    for label, (median, statements) in (("off", off), ("on", on), ("collector down", down)):
        print(f"tracing {label:15} median {median:.2f} ms/turn, {statements:.1f} SQL/turn")
    print(f"ratio on/off: {on[0] / off[0]:.2f}; collector down/off: {down[0] / off[0]:.2f}")


if __name__ == "__main__":
    main()
