"""Exit 0 when the service at the URL answers within two seconds, 1 otherwise.

Usage: services_up.py postgres|redis URL
"""

import socket
import sys
from urllib.parse import urlsplit


def main() -> int:
    kind, url = sys.argv[1], sys.argv[2]
    parts = urlsplit(url)
    if kind == "postgres":
        try:
            import psycopg

            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("select 1")
            return 0
        except Exception:
            return 1
    if kind == "redis":
        try:
            with socket.create_connection((parts.hostname, parts.port or 6379), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return 0 if s.recv(16).startswith(b"+PONG") else 1
        except OSError:
            return 1
    raise SystemExit(f"unknown service kind {kind!r}")


if __name__ == "__main__":
    sys.exit(main())
