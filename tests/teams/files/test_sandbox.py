"""teams.files.sandbox: one command in a bwrap sandbox, its result, its limits. The
hostile cases (network, secrets, escapes, bombs) are in tests/tools/test_commands_hostile.py."""

import os
import threading
import time

import pytest

from teams.errors import InvalidInput
from teams.files import sandbox
from teams.files.sandbox import SandboxUnavailable, bounded, sandbox_run

pytestmark = pytest.mark.usefixtures("sandbox_ready")


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_a_command_runs_in_the_folder_and_reports_its_exit_code(folder):
    (folder / "given.txt").write_text("from the host\n")
    result = sandbox_run(
        directory=folder,
        command="cat given.txt; pwd; echo made > made.txt; exit 3",
        timeout_seconds=30,
    )
    assert result.exit_code == 3
    assert result.stdout == "from the host\n/workspace\n"
    assert result.status().startswith("exit code 3 after ")
    assert (folder / "made.txt").read_text() == "made\n"


def test_python_and_pytest_are_inside(folder):
    (folder / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    result = sandbox_run(directory=folder, command="python3 -m pytest -q", timeout_seconds=60)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert not (folder / "__pycache__").exists()  # PYTHONDONTWRITEBYTECODE


def test_the_environment_is_clean(folder, monkeypatch):
    monkeypatch.setenv("LOOM_SECRET_KEY", "sandbox-test-not-visible")
    result = sandbox_run(directory=folder, command="env | sort", timeout_seconds=30)
    names = sorted(line.split("=", 1)[0] for line in result.stdout.splitlines())
    assert names == ["HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE"]


def test_stderr_is_kept_apart(folder):
    result = sandbox_run(directory=folder, command="echo out; echo err >&2", timeout_seconds=30)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")


def test_a_timeout_kills_the_command_and_says_so(folder):
    started = time.monotonic()
    result = sandbox_run(directory=folder, command="sleep 60", timeout_seconds=2)
    assert time.monotonic() - started < 15
    assert result.timed_out and result.exit_code is None
    assert result.status() == "timed out after 2 s"


def test_the_timeout_is_capped_by_the_setting(folder, settings):
    settings.LOOM_SANDBOX_TIMEOUT = 1
    result = sandbox_run(directory=folder, command="sleep 30", timeout_seconds=600)
    assert result.status() == "timed out after 1 s"


def test_long_output_keeps_head_and_tail(folder):
    result = sandbox_run(
        directory=folder, command="seq 1 200000; echo LAST", timeout_seconds=30, output_chars=3000
    )
    assert result.stdout.startswith("1\n2\n3\n")
    assert result.stdout.endswith("LAST\n")
    assert " characters cut ...\n" in result.stdout
    assert len(result.stdout) < 3100


def test_bounded_marks_the_cut_with_its_size():
    text = "a" * 600 + "b" * 400
    assert bounded(text, "", 0, 300) == "a" * 200 + "\n... 700 characters cut ...\n" + "b" * 100
    assert bounded("short", "", 0, 300) == "short"
    # What was never kept between head and tail counts as cut.
    assert bounded("h" * 500, "t" * 500, 48_000, 300).count("\n... 48,700 characters cut ...\n")


def test_an_empty_command_is_refused(folder):
    with pytest.raises(InvalidInput, match="empty"):
        sandbox_run(directory=folder, command="   ", timeout_seconds=5)


def test_commands_beyond_the_concurrency_wait_for_a_slot(folder, settings, monkeypatch):
    settings.LOOM_SANDBOX_CONCURRENCY = 1
    monkeypatch.setattr(sandbox, "_slots", None)
    ends = []

    def one():
        sandbox_run(directory=folder, command="sleep 1", timeout_seconds=10)
        ends.append(time.monotonic())

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(ends) - started >= 2  # one after the other
    monkeypatch.setattr(sandbox, "_slots", None)


def test_without_bwrap_no_command_runs_and_the_reason_is_given(folder, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.forget()
    assert sandbox.sandbox_unavailable().startswith("no bwrap")
    with pytest.raises(SandboxUnavailable, match="Commands cannot run here: no bwrap"):
        sandbox_run(directory=folder, command="true", timeout_seconds=5)
    assert os.listdir(folder) == []


@pytest.mark.django_db
def test_check_and_healthz_say_why_commands_are_not_offered(client, monkeypatch):
    from django.core.management import call_command

    assert client.get("/healthz").json()["commands"] == {"offered": True, "reason": None}
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sandbox.forget()
    said = client.get("/healthz").json()["commands"]
    assert said["offered"] is False and said["reason"].startswith("no bwrap: install")
    with pytest.raises(Exception) as raised:
        call_command("check", fail_level="WARNING")
    assert "teams.W101" in str(raised.value)
    assert "Agents cannot run commands (the tool is not offered): no bwrap" in str(raised.value)


def test_sandbox_paths_are_shown_read_only_with_their_bin_on_path(folder, settings, tmp_path):
    extra = tmp_path / "node"
    (extra / "bin").mkdir(parents=True)
    tool = extra / "bin" / "hello-tool"
    tool.write_text("#!/bin/sh\necho hello from the extra folder\n")
    tool.chmod(0o755)
    settings.LOOM_SANDBOX_PATHS = [str(extra)]
    result = sandbox_run(
        directory=folder, command=f"hello-tool; touch {extra}/x", timeout_seconds=30
    )
    assert result.stdout == "hello from the extra folder\n"
    assert "Read-only file system" in result.stderr
    assert not (extra / "x").exists()


def test_a_sandbox_path_that_would_show_loom_s_data_is_refused(folder, settings):
    settings.LOOM_SANDBOX_PATHS = [str(settings.DATA_DIR)]
    assert sandbox.sandbox_unavailable() == (
        f"LOOM_SANDBOX_PATHS names {str(settings.DATA_DIR)!r}, which would show Loom's data "
        "folder to commands."
    )
    with pytest.raises(SandboxUnavailable, match="which would show Loom's data folder"):
        sandbox_run(directory=folder, command="true", timeout_seconds=5)
