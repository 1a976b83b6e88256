"""What a process pays at start: the SDKs of the protocol ends and the eval scorer are
imported when first used, not by every web process, worker and management command."""

import json
import subprocess
import sys

from tests.live_site import ROOT, child_env

# The MCP SDK, pydantic-evals (with pydantic-ai) and a2a-sdk: about 2 s of CPU together.
LOADED_WHEN_USED = ("mcp", "pydantic_evals", "pydantic_ai", "a2a")
PROBE = """
import json, sys
import django
django.setup()
import loomsite.asgi, loomsite.urls, teams.engine.worker
from django.urls import get_resolver
get_resolver().url_patterns  # every face's module: the admin, the API, the pages
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))))
"""


def test_the_site_and_the_workers_start_without_the_sdks_they_load_when_used(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *LOADED_WHEN_USED],
        cwd=ROOT,
        env=child_env(LOOM_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
