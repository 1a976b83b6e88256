"""run_command against a hostile command: each case runs through the tool as a coder's
call would, asserts the command was contained (what it tried did not happen, nothing of
the host was read or changed) and that Loom kept serving (the site answers on its port,
the database answers, the host can start processes). Skipped, saying why, only where
bwrap cannot run. Run on SQLite and on PostgreSQL (LOOM_DATABASE_URL)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from teams.files import workspace
from teams.models import Team
from tests.helpers import make_team
from tests.tools.test_workspace import in_implementation
from tools import registry

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("sandbox_ready")]

SECRET = "sandbox-hostile-suite-secret-value"
CANARY = "TOP SECRET: outside the workspace\n"


@pytest.fixture
def host(team, live_server, monkeypatch, tmp_path):
    """What a command must not reach: Loom's site, its secret, another team's files, a
    canary next to the workspace and one in the host's /tmp."""
    monkeypatch.setenv("LOOM_SECRET_KEY", SECRET)
    in_implementation(team)
    root = workspace.workspace_root(team)
    beta = make_team("beta")
    beta_root = workspace.workspace_root(beta)
    (beta_root / "plans.txt").write_text(CANARY)
    canary = root.parent / "secret.txt"
    canary.write_text(CANARY)
    host_tmp = Path("/tmp") / f"loom-hostile-{os.getpid()}"
    return {
        "root": root,
        "beta": beta_root,
        "canary": canary,
        "host_tmp": host_tmp,
        "port": int(live_server.url.rsplit(":", 1)[1]),
        "url": live_server.url,
    }


def run(ctx_for, command: str, timeout: int = 30) -> str:
    result = registry.execute(
        "run_command", {"command": command, "timeout_seconds": timeout}, ctx_for("coder")
    )
    assert not result.is_error, result.text
    return result.text


def loom_serves(host) -> None:
    try:  # /healthz answers 200 or 503 (no worker runs here): either way, it answers
        with urllib.request.urlopen(host["url"] + "/healthz", timeout=10) as answer:
            status = answer.status
    except urllib.error.HTTPError as error:
        status = error.code
    assert status in (200, 503)
    assert Team.objects.filter(slug="alpha").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert host["canary"].read_text() == CANARY
    assert (host["beta"] / "plans.txt").read_text() == CANARY


def connect(address: str, port: int, family: str = "AF_INET") -> str:
    return (
        f"python3 -c \"import socket; s = socket.socket(socket.{family}); s.settimeout(3); "
        f"s.connect(('{address}', {port})); print('CONNECTED')\""
    )


NO_NETWORK = ("Network is unreachable", "Connection refused", "Cannot assign requested")


def no_network(output: str) -> None:
    output = output.split("\n", 1)[1]  # not the command line itself
    assert "CONNECTED" not in output
    assert any(said in output for said in NO_NETWORK), output


# --- the network -------------------------------------------------------------------


def test_loom_s_own_port(host, ctx_for):
    no_network(run(ctx_for, connect("127.0.0.1", host["port"])))
    loom_serves(host)


@pytest.mark.parametrize("port", [5432, 6379], ids=["postgresql", "redis"])
def test_database_and_redis_on_loopback(port, host, ctx_for):
    no_network(run(ctx_for, connect("127.0.0.1", port)))
    loom_serves(host)


def test_loopback_over_ipv6(host, ctx_for):
    no_network(run(ctx_for, connect("::1", host["port"], "AF_INET6")))
    loom_serves(host)


def test_a_dns_name(host, ctx_for):
    lookup = "import socket; print(socket.getaddrinfo('example.com', 80))"
    output = run(ctx_for, f'python3 -c "{lookup}"')
    assert "gaierror" in output and "exit code 1" in output
    loom_serves(host)


def test_the_cloud_metadata_address(host, ctx_for):
    no_network(run(ctx_for, connect("169.254.169.254", 80)))
    loom_serves(host)


def test_an_address_on_the_internet(host, ctx_for):
    no_network(run(ctx_for, connect("1.1.1.1", 443)))
    loom_serves(host)


def test_only_a_loopback_interface_is_there(host, ctx_for):
    output = run(ctx_for, "cat /proc/net/dev")
    interfaces = re.findall(r"^\s*(\S+):\s+\d", output, re.M)
    assert interfaces == ["lo"], output
    loom_serves(host)


# --- what must not be read ---------------------------------------------------------------


def test_the_sqlite_database_and_loom_s_data_folder(host, ctx_for):
    paths = [str(settings.DATA_DIR), str(Path(settings.BASE_DIR) / "data")]
    name = str(connection.settings_dict["NAME"])
    if name.startswith("/"):
        paths.append(name)
    output = run(ctx_for, "; ".join(f"ls -la '{p}'" for p in paths))
    assert output.count("No such file or directory") == len(paths), output
    loom_serves(host)


def test_another_team_s_workspace(host, ctx_for):
    output = run(ctx_for, f"cat '{host['beta']}/plans.txt'; ls '{host['beta'].parent}'")
    assert CANARY.strip() not in output
    assert output.count("No such file or directory") == 2, output
    loom_serves(host)


def test_proc_1_environ_holds_nothing_of_loom_s(host, ctx_for):
    output = run(ctx_for, "tr '\\0' '\\n' < /proc/1/environ; cat /proc/*/environ")
    assert SECRET not in output and "LOOM_" not in output
    loom_serves(host)


def test_the_environment_holds_no_secret(host, ctx_for):
    output = run(ctx_for, "env; echo \"key=[$LOOM_SECRET_KEY]\"")
    assert SECRET not in output and "key=[]" in output
    assert "LOOM_" not in output.replace("LOOM_SECRET_KEY", "")
    loom_serves(host)


def test_loom_s_settings_and_source(host, ctx_for):
    settings_file = Path(settings.BASE_DIR) / "loomsite" / "settings.py"
    output = run(ctx_for, f"cat '{settings_file}'; ls '{settings.BASE_DIR}'")
    assert "SECRET_KEY" not in output.split("\n", 1)[1]
    assert output.count("No such file or directory") == 2, output
    loom_serves(host)


def test_the_host_s_home_folders(host, ctx_for):
    output = run(ctx_for, "ls -a /root/.ssh /home/*/.ssh 2>&1; cat /etc/shadow")
    assert "id_" not in output and "root:" not in output
    loom_serves(host)


def test_a_symlink_planted_to_a_file_outside(host, ctx_for):
    (host["root"] / "link.txt").symlink_to(host["canary"])
    output = run(ctx_for, "cat link.txt; echo overwritten > link.txt")
    assert CANARY.strip() not in output
    assert "No such file or directory" in output
    loom_serves(host)  # the canary is unchanged


def test_a_relative_symlink_up_and_out(host, ctx_for):
    (host["root"] / "up").symlink_to("../")
    output = run(ctx_for, "ls up/; cat up/secret.txt")
    assert CANARY.strip() not in output
    loom_serves(host)


def test_a_symlink_the_command_makes_is_not_followed_when_recording(host, ctx_for):
    output = run(ctx_for, f"ln -s '{host['canary']}' made.txt; ln -s /etc/hostname host.txt")
    assert "Created" not in output  # links are not recorded, their targets never read
    assert CANARY.strip() not in output
    loom_serves(host)


def test_a_hard_link_to_a_system_file(host, ctx_for):
    output = run(ctx_for, "ln /etc/passwd passwd-link; ln /usr/bin/env env-link")
    assert output.count("Invalid cross-device link") == 2, output
    loom_serves(host)


# --- what must not be written ------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["/usr/local/loom-hostile", "/etc/loom-hostile", "/loom-hostile"]
)
def test_writing_outside_the_workspace(target, host, ctx_for):
    output = run(ctx_for, f"echo x > {target}")
    assert "Read-only file system" in output, output
    assert not Path(target).exists()
    loom_serves(host)


def test_tmp_and_home_are_private(host, ctx_for):
    name = host["host_tmp"].name
    output = run(ctx_for, f"echo x > /tmp/{name} && echo y > $HOME/{name} && cat /tmp/{name}")
    assert "exit code 0" in output
    assert not host["host_tmp"].exists()
    assert not (Path.home() / name).exists()
    loom_serves(host)


def test_the_workspace_parent_is_not_the_host_s(host, ctx_for):
    output = run(ctx_for, "echo x > ../secret.txt; echo y > /workspace/../secret.txt; ls ..")
    assert "workspace" in output
    loom_serves(host)  # the real secret.txt beside the workspace is untouched


def test_a_file_over_the_size_limit(host, ctx_for):
    output = run(ctx_for, "head -c 200000000 /dev/zero > big.bin; echo status $?")
    assert "status 1" in output or "File size limit exceeded" in output, output
    assert (host["root"] / "big.bin").stat().st_size <= 100 * 1024 * 1024
    assert "big.bin (over 200 KB)" in output  # not kept as a revision
    loom_serves(host)


def test_setuid_bits_are_dropped(host, ctx_for):
    output = run(ctx_for, "cp /bin/sh shell && chmod 6755 shell && ls -l shell")
    assert "rwsr-sr-x" in output  # it could set them inside...
    mode = (host["root"] / "shell").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID)  # ...Loom took them off
    loom_serves(host)


def test_device_files(host, ctx_for):
    output = run(ctx_for, "mknod null-copy c 1 3; mknod disk b 8 0; ls")
    assert output.count("Operation not permitted") == 2, output
    assert not (host["root"] / "null-copy").exists() and not (host["root"] / "disk").exists()
    loom_serves(host)


def test_mounting_and_new_namespaces(host, ctx_for):
    output = run(
        ctx_for,
        "mount -t tmpfs none /tmp 2>&1 | head -1; unshare -U true 2>&1 | head -1; "
        "unshare -n true 2>&1 | head -1",
    )
    assert "Operation not permitted" in output or "permission denied" in output.lower(), output
    assert output.count("\n") >= 3
    loom_serves(host)


# --- resources and processes -------------------------------------------------------------


def test_a_fork_bomb(host, ctx_for):
    # A name of this test process's own: make test's other run bombs at the same time.
    bomb = f"bomb{os.getpid()}"
    command = f"{bomb}() {{ {bomb} | {bomb} & }}; {bomb}; sleep 3; echo survived"
    output = run(ctx_for, command, timeout=15)
    assert "timed out" in output or "exit code" in output
    loom_serves(host)
    assert not _host_processes(bomb.encode())


def test_a_process_flood_hits_the_process_limit(host, ctx_for):
    output = run(ctx_for, "for i in $(seq 400); do sleep 30 & done; echo launched", timeout=20)
    assert "Cannot fork" in output or "Resource temporarily unavailable" in output, output
    loom_serves(host)


def test_a_memory_hog(host, ctx_for):
    output = run(ctx_for, "python3 -c \"x = bytearray(8 * 1024 ** 3)\"")
    assert "killed: memory limit (1,024 MB)" in output
    loom_serves(host)


def test_an_infinite_loop(host, ctx_for):
    output = run(ctx_for, "while :; do :; done", timeout=2)
    assert output.split("\n")[1] == "timed out after 2 s"
    loom_serves(host)


def test_fifty_megabytes_of_output(host, ctx_for):
    output = run(ctx_for, "head -c 50000000 /dev/zero | tr '\\0' 'x'; echo; echo END")
    assert len(output) < 9000
    assert " characters cut ..." in output and output.rstrip().endswith("END")
    loom_serves(host)


def test_a_background_process_does_not_outlive_the_command(host, ctx_for):
    marker = f"3{os.getpid() % 1000}17"
    output = run(
        ctx_for,
        f"sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
        f"setsid sleep {marker} & (sleep {marker} &); echo started",
    )
    assert "started" in output and "exit code 0" in output
    assert not _host_processes(marker.encode())
    loom_serves(host)


def test_host_processes_are_neither_seen_nor_signalled(host, ctx_for):
    output = run(ctx_for, f"ls /proc | grep -c '^[0-9]'; kill -9 {os.getpid()}; echo done")
    assert int(output.split("\n")[3]) < 10  # its own few processes only
    assert "No such process" in output or "kill" in output
    loom_serves(host)  # this process (the site's) is alive to check


def test_the_kernel_s_sys_and_terminal_are_out_of_reach(host, ctx_for):
    output = run(ctx_for, "ls /sys; echo 1 > /proc/sys/kernel/sysrq; tty")
    assert "No such file or directory" in output and "not a tty" in output
    loom_serves(host)


def _host_processes(word: bytes) -> list[int]:
    """Host processes whose command line holds `word`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if word in cmdline and b"pytest" not in cmdline:
                found.append(int(entry))
    return found
