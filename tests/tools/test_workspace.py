"""The workspace and its file tools (teams/files/workspace.py, tools/workspace.py).

HOSTILE_PATHS is the table of paths that must never reach outside the workspace (or
anything but a regular file or folder inside it), with `hostile_workspace`, which
builds the links, FIFO and socket some of them name; both are for any code that takes
a path from an agent (the consultation's file references too). Every row is run
against every file tool: each is refused with a message naming the path, nothing
outside is read or changed and nothing is created anywhere.

Then the role, phase, per-turn and size limits, and bounded and binary reads, each
through the agent loop (the real anthropic client and the fake Messages API)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from teams.errors import InvalidInput
from teams.files import workspace
from teams.models import DEFAULT_PHASES, Agent, Team, WorkspaceFile
from teams.run import team_actions
from tests.fakes.messages_api import Reply, text, tool
from tests.helpers import drain, make_turn, per_agent
from tools import registry

pytestmark = pytest.mark.django_db

FILE_TOOLS = ("file_list", "file_read", "file_write")
CANARY = "TOP SECRET: outside the workspace\n"
IMPLEMENTATION = DEFAULT_PHASES.index("implementation")

# (path, what its refusal says, whether it tries to leave the workspace: a refused
# write of those is recorded as a violation). The links, FIFO and socket are made by
# hostile_workspace; secret.txt is the canary next to the workspace folder.
HOSTILE_PATHS = [
    # parent segments, anywhere
    ("..", "goes up with '..'", True),
    ("../secret.txt", "goes up with '..'", True),
    ("../../../../../../etc/passwd", "goes up with '..'", True),
    ("a/../../secret.txt", "goes up with '..'", True),
    ("docs/../notes.txt", "goes up with '..'", True),  # would stay inside: refused anyway
    # encoded, doubled and backslashed forms
    ("..%2fsecret.txt", "spells a way out", True),
    ("%2e%2e/secret.txt", "spells a way out", True),
    ("%2E%2E%2Fsecret.txt", "spells a way out", True),
    ("%252e%252e%252fsecret.txt", "spells a way out", True),
    ("%2fetc%2fpasswd", "spells a way out", True),
    ("..\\secret.txt", "spells a way out", True),
    ("a\\..\\..\\secret.txt", "spells a way out", True),
    ("C:\\Windows\\win.ini", "contains a backslash", False),
    ("notes%41.txt", "percent-escape", False),
    ("....//secret.txt", "made only of dots", False),
    ("....", "made only of dots", False),
    ("...", "made only of dots", False),
    ("./notes.txt", "made only of dots", False),
    # absolute and home
    ("/etc/passwd", "is absolute", True),
    ("//etc/passwd", "is absolute", True),
    ("~/x", "starts with '~'", True),
    ("~root/.ssh/authorized_keys", "starts with '~'", True),
    ("file:///etc/passwd", "empty segment", False),
    # symbolic links out, at the leaf and on the way, dangling, looping
    ("out-link", "is a symbolic link that leads outside the workspace", True),
    ("out-dir", "leads outside the workspace", True),
    ("out-dir/secret.txt", "goes through 'out-dir', a symbolic link that leads out", True),
    ("docs/up/secret.txt", "goes through 'docs/up', a symbolic link that leads out", True),
    ("dangling", "leads outside the workspace", True),
    ("devnull", "leads outside the workspace", True),
    ("loop", "is a symbolic link in a loop", False),
    ("loop/x", "goes through 'loop', a symbolic link in a loop", False),
    # what is not a regular file or folder
    ("fifo", "FIFO", False),
    ("sock", "socket", False),
    ("fifo/x", "not a folder", False),
    ("notes.txt/x", "not a folder", False),
    # malformed
    ("notes.txt/", "empty segment", False),
    ("docs//notes.txt", "empty segment", False),
    ("bad\x00name.txt", "NUL byte", False),
    ("line\nbreak.txt", "control character", False),
    ("a" * 5000, "too long", False),
    ("n" * 256, "longer than 255 bytes", False),
    ("é" * 130, "longer than 255 bytes", False),  # 130 characters, 260 bytes
]


def hostile_workspace(root: Path, outside: Path) -> None:
    """The workspace `root` furnished for HOSTILE_PATHS: links out of it (to `outside`,
    a folder holding secret.txt), a link loop, a FIFO, a unix socket, and a plain
    notes.txt and docs/ folder."""
    (root / "notes.txt").write_text("notes\n")
    (root / "docs").mkdir()
    (root / "out-link").symlink_to(outside / "secret.txt")
    (root / "out-dir").symlink_to(outside)
    (root / "docs" / "up").symlink_to("../..")  # relative, in the middle of a path
    (root / "dangling").symlink_to(outside / "made-by-a-write.txt")
    (root / "devnull").symlink_to("/dev/null")
    (root / "loop").symlink_to("loop2")
    (root / "loop2").symlink_to("loop")
    os.mkfifo(root / "fifo")
    here = os.getcwd()
    os.chdir(root)  # a relative name: socket paths are short (108 bytes)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind("sock")
    finally:
        os.chdir(here)


def tree(folder: Path) -> dict:
    """Every name under `folder` (links not followed) with its size and mtime."""
    found = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(Path(base) / name)
            found[str(Path(base, name).relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return found


def in_implementation(team) -> Team:
    Team.objects.filter(pk=team.pk).update(phase_index=IMPLEMENTATION)
    team.refresh_from_db()
    return team


@pytest.fixture
def hostile(team):
    """Alpha's workspace furnished with hostile_workspace, and the canary secret.txt
    next to it (its mtime set in the past, so a write would show)."""
    root = workspace.workspace_root(team)
    canary = root.parent / "secret.txt"
    canary.write_text(CANARY)
    os.utime(canary, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    hostile_workspace(root, root.parent)
    return root, canary


def arguments(tool_name: str, path: str) -> dict:
    return {"path": path, "content": "pwned\n"} if tool_name == "file_write" else {"path": path}


@pytest.mark.parametrize("tool_name", FILE_TOOLS)
@pytest.mark.parametrize(
    ("path", "reason", "leaves"), HOSTILE_PATHS, ids=[repr(p[0])[:40] for p in HOSTILE_PATHS]
)
def test_hostile_paths_are_refused_by_every_file_tool(
    tool_name, path, reason, leaves, hostile, team, agents, ctx_for
):
    root, canary = hostile
    data = root.parent.parent
    in_implementation(team)
    coder = agents["coder"]
    allowed = registry.toolset(coder, team)
    assert registry.get(tool_name) in allowed  # refused for the path, not the role
    before = tree(data)
    result = registry.execute(tool_name, arguments(tool_name, path), ctx_for("coder"), allowed)
    assert result.is_error, result.text
    if len(path) > workspace.MAX_PATH_CHARS:  # over the tool's cap: refused before the service
        limit = f"the limit is {workspace.MAX_PATH_CHARS}."
        assert result.text == f"Error: path is {len(path):,} characters; {limit}"
    else:
        assert result.text.startswith("Error: Path ")
        assert workspace.shown(path) in result.text  # names the path...
        assert reason in result.text  # ...and why
    assert CANARY not in result.text and "pwned" not in result.text
    # Nothing outside was read or changed; nothing was made, inside or out.
    assert canary.read_text() == CANARY
    assert canary.stat().st_mtime_ns == 1_000_000_000_000_000_000
    assert tree(data) == before
    assert not WorkspaceFile.objects.exists()
    coder.refresh_from_db()
    assert coder.files_touched == []
    assert coder.violations == (1 if leaves and tool_name == "file_write" else 0)
    if leaves and tool_name == "file_write":
        assert "recorded as a violation" in result.text


def test_text_that_is_not_utf8_is_refused_by_the_domain_too(team):
    # The tools never see it (their parameters refuse it first): the domain's own check.
    with pytest.raises(InvalidInput, match=r"Path '\\ud800.txt' is not valid UTF-8 text."):
        workspace.resolve(team, "\ud800.txt")
    with pytest.raises(InvalidInput, match="content for 'a.txt' is not valid UTF-8"):
        workspace.file_write(
            team=team,
            agent=team.agents.first(),
            turn=None,
            path="a.txt",
            content="\ud800",
            writes_this_turn=0,
        )


def test_the_table_is_big_enough():
    assert len(HOSTILE_PATHS) >= 25
    assert len({path for path, _, _ in HOSTILE_PATHS}) == len(HOSTILE_PATHS)


# --- what the workspace allows --------------------------------------------------------


def run(ctx, name, **arguments) -> str:
    result = registry.execute(name, arguments, ctx)
    assert not result.is_error, result.text
    return result.text


def test_the_default_workspace_is_made_private_under_the_data_dir(team, private_data_dir):
    root = workspace.workspace_root(team)
    assert root == (private_data_dir / "workspaces" / str(team.folder)).resolve()
    assert root.stat().st_mode & 0o777 == 0o700
    assert (root.parent.stat().st_mode & 0o777) == 0o700


def test_a_teams_own_workspace_folder(team, tmp_path):
    Team.objects.filter(pk=team.pk).update(workspace=str(tmp_path / "site"))
    team.refresh_from_db()
    assert workspace.workspace_root(team) == (tmp_path / "site").resolve()


def test_write_list_read_round_trip(team, agents, ctx_for):
    in_implementation(team)
    coder = ctx_for("coder")
    assert run(coder, "file_list") == "The workspace is empty."
    content = "  def parse():\n      return 1\n\n"  # whitespace kept as written
    assert run(coder, "file_write", path="src/parser.py", content=content) == (
        f"Wrote src/parser.py ({len(content)} bytes, new file)."
    )
    assert (workspace.workspace_root(team) / "src" / "parser.py").read_text() == content
    assert run(coder, "file_write", path="src/parser.py", content="x = 2\n") == (
        "Wrote src/parser.py (6 bytes, write 2 of this file)."
    )
    assert run(ctx_for("reviewer"), "file_list") == "The workspace (1 entry):\n  src/  (folder)"
    assert run(ctx_for("reviewer"), "file_list", path="src") == (
        "Folder 'src' (1 entry):\n  parser.py  (6 bytes)"
    )
    assert run(ctx_for("reviewer"), "file_read", path="src/parser.py") == (
        "src/parser.py (6 bytes), lines 1-1 of 1:\nx = 2"
    )
    row = WorkspaceFile.objects.get(team=team)
    assert (row.path, row.size, row.writes, row.agent.name, row.turn) == (
        "src/parser.py",
        6,
        2,
        "coder",
        None,
    )
    assert Agent.objects.get(pk=agents["coder"].pk).files_touched == ["src/parser.py"]
    # The folder made for it is private; no temporary file is left behind.
    src = workspace.workspace_root(team) / "src"
    assert src.stat().st_mode & 0o777 == 0o700
    assert sorted(os.listdir(src)) == ["parser.py"]


def test_odd_names_that_stay_inside_are_plain_names(team, ctx_for):
    in_implementation(team)
    coder = ctx_for("coder")
    for path in ("100%.txt", "a..b", ".hidden", "..x", "x..", "%zz", "dir.d/f~", "é.md"):
        assert run(coder, "file_write", path=path, content=path).startswith(f"Wrote {path} ")
        assert (workspace.workspace_root(team) / path).read_text() == path
    assert workspace.resolve(team, ".") == workspace.workspace_root(team)


def test_links_that_stay_inside_are_followed_and_recorded_by_their_target(team, ctx_for):
    in_implementation(team)
    root = workspace.workspace_root(team)
    (root / "src").mkdir()
    (root / "code").symlink_to("src")
    run(ctx_for("coder"), "file_write", path="code/app.py", content="print(1)\n")
    assert (root / "src" / "app.py").read_text() == "print(1)\n"
    assert list(WorkspaceFile.objects.values_list("path", flat=True)) == ["src/app.py"]
    assert "code  (symbolic link)" in run(ctx_for("coder"), "file_list")


def test_a_read_is_bounded_and_a_cut_character_is_not_binary(team):
    root = workspace.workspace_root(team)
    (root / "big.txt").write_bytes(b"x" * (workspace.MAX_READ_BYTES - 1) + "é!".encode())
    text, truncated = workspace.file_read(team, "big.txt")
    assert truncated and text == "x" * (workspace.MAX_READ_BYTES - 1)
    found = workspace.file_read(team, "big.txt", limit=10)
    assert (found.text, found.truncated, found.binary) == ("x" * 10, True, False)
    assert found.size == workspace.MAX_READ_BYTES + 2


def test_a_listing_is_bounded(team, ctx_for):
    root = workspace.workspace_root(team)
    for n in range(workspace.MAX_LIST_ENTRIES + 5):
        (root / f"f{n:04d}.txt").write_text("")
    listing = workspace.file_list(team)
    assert (len(listing), listing.total, listing.truncated) == (500, 505, True)
    assert listing.entries[-1].name == "f0499.txt"
    result = registry.execute("file_list", {}, ctx_for("coach")).text
    assert result.startswith("The workspace (505 entries):\n  f0000.txt  (0 bytes)")


def test_files_touched_stay_unique_and_bounded(team, agents):
    coder = agents["coder"]
    Agent.objects.filter(pk=coder.pk).update(
        files_touched=[f"old{n}" for n in range(workspace.MAX_FILES_TOUCHED)]
    )
    coder.refresh_from_db()
    for _ in range(2):
        workspace.file_write(
            team=team, agent=coder, turn=None, path="new.txt", content="", writes_this_turn=0
        )
    touched = Agent.objects.get(pk=coder.pk).files_touched
    assert len(touched) == workspace.MAX_FILES_TOUCHED
    assert touched[-1] == "new.txt" and touched.count("new.txt") == 1 and "old0" not in touched


def test_the_domain_refuses_the_write_limits_itself(team, agents):
    coder = agents["coder"]
    turn = make_turn(coder, status="running", number=7)
    with pytest.raises(InvalidInput, match="limit is 20 writes per turn"):
        workspace.file_write(
            team=team, agent=coder, turn=turn, path="a.txt", content="", writes_this_turn=20
        )
    written = workspace.file_write(
        team=team, agent=coder, turn=turn, path="a.txt", content="", writes_this_turn=19
    )
    assert written.writes_this_turn == 20
    assert WorkspaceFile.objects.get(path="a.txt").turn == turn


# --- through the agent loop -------------------------------------------------------------


def tool_results(api) -> dict:
    """Every tool result the model was sent, by tool_use id: (text, is_error)."""
    found = {}
    for request in api.requests:
        for message in request.body["messages"]:
            if isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "tool_result":
                        found[block["tool_use_id"]] = (
                            block["content"],
                            bool(block.get("is_error")),
                        )
    return found


def writes(*paths, content="x\n", prefix="w") -> Reply:
    """One model reply calling file_write once per path."""
    blocks = [
        {
            "type": "tool_use",
            "id": f"toolu_{prefix}{n}",
            "name": "file_write",
            "input": {"path": path, "content": content},
        }
        for n, path in enumerate(paths)
    ]
    return Reply(blocks, stop_reason="tool_use")


def quiet(n=1) -> list:
    return [text("Nothing to add.") for _ in range(n)]


def test_a_coder_in_implementation_writes_a_file(team, messages_api):
    in_implementation(team)
    api = messages_api(
        per_agent(
            {
                "coach": quiet(),
                "researcher": quiet(),
                "coder": [
                    tool(
                        "file_write",
                        {"path": "src/app.py", "content": "print('hi')\n"},
                        "toolu_write",
                    ),
                    text("Wrote the app."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)
    assert tool_results(api)["toolu_write"] == (
        "Wrote src/app.py (12 bytes, new file). 1 of 20 writes used this turn.",
        False,
    )
    assert (workspace.workspace_root(team) / "src/app.py").read_text() == "print('hi')\n"
    row = WorkspaceFile.objects.select_related("agent", "turn").get(team=team)
    assert (row.agent.name, row.turn.number, row.writes) == ("coder", 3, 1)
    coder = Agent.objects.get(team=team, name="coder")
    assert coder.files_touched == ["src/app.py"] and coder.violations == 0
    # Offered to the coder, not to the others; reads to everyone.
    for request in api.requests:
        names = set(request.tool_names)
        assert {"file_list", "file_read"} <= names
        assert ("file_write" in names) == (request.agent in ("coder", "reviewer")), request.agent


@pytest.mark.parametrize("who", ["researcher in implementation", "coder in refinement"])
def test_file_write_is_refused_outside_its_role_and_phase(who, team, messages_api):
    if who.endswith("implementation"):
        in_implementation(team)
    name = who.split()[0]
    scripts = {"coach": quiet(), "researcher": quiet(), "coder": quiet(), "reviewer": quiet()}
    scripts[name] = [
        tool("file_write", {"path": "x.txt", "content": "x"}, "toolu_write"),
        text("Tried."),
    ]
    api = messages_api(per_agent(scripts))
    team_actions.team_start(team=team)
    drain(team, limit=4)
    assert tool_results(api)["toolu_write"] == (
        "Error: Unknown tool 'file_write' (not available to you).",
        True,
    )
    assert "file_write" not in [r for r in api.requests if r.agent == name][0].tool_names
    assert not (workspace.workspace_root(team) / "x.txt").exists()
    assert not WorkspaceFile.objects.exists()
    assert Agent.objects.get(team=team, name=name).violations == 1


def test_the_21st_write_of_a_turn_is_refused_and_the_next_turn_starts_again(team, messages_api):
    in_implementation(team)
    paths = [f"src/f{n:02d}.py" for n in range(21)]
    api = messages_api(
        per_agent(
            {
                "coach": quiet(2),
                "researcher": quiet(2),
                "reviewer": quiet(),
                "coder": [
                    writes(*paths),
                    text("Wrote many."),
                    writes("src/f20.py", prefix="again"),
                    text("And the last one."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=7)
    results = tool_results(api)
    for n in range(20):
        assert results[f"toolu_w{n}"] == (
            f"Wrote src/f{n:02d}.py (2 bytes, new file). {n + 1} of 20 writes used this turn.",
            False,
        )
    assert results["toolu_w20"] == (
        "Error: Not written: 'src/f20.py'. You already wrote 20 files this turn, the limit "
        "is 20 writes per turn. Continue next turn.",
        True,
    )
    root = workspace.workspace_root(team)
    assert sorted(os.listdir(root / "src")) == [f"f{n:02d}.py" for n in range(21)]
    assert results["toolu_again0"] == (
        "Wrote src/f20.py (2 bytes, new file). 1 of 20 writes used this turn.",
        False,
    )
    assert WorkspaceFile.objects.count() == 21
    rows = WorkspaceFile.objects.select_related("turn")
    assert {r.turn.number for r in rows} == {3, 7}


def test_an_oversized_write_is_refused(team, messages_api):
    in_implementation(team)
    big = "x" * (workspace.MAX_WRITE_BYTES + 1)
    api = messages_api(
        per_agent(
            {
                "coach": quiet(),
                "researcher": quiet(),
                "coder": [
                    tool("file_write", {"path": "big.txt", "content": big}, "toolu_big"),
                    tool(
                        "file_write",
                        {"path": "fits.txt", "content": "é" * (workspace.MAX_WRITE_BYTES // 2)},
                        "toolu_fits",
                    ),
                    text("Split it."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)
    results = tool_results(api)
    # Over the cap in characters: refused by the tool's schema (as by the API's).
    assert results["toolu_big"] == (
        "Error: content is 204,801 characters; the limit is 204,800.",
        True,
    )
    assert results["toolu_fits"][0].startswith("Wrote fits.txt (204,800 bytes, new file). 1 of")
    root = workspace.workspace_root(team)
    assert sorted(os.listdir(root)) == ["fits.txt"]


def test_reads_are_bounded_and_binary_files_reported(team, messages_api):
    root = workspace.workspace_root(team)
    lines = [f"line {n:05d} " + "y" * 40 + "\n" for n in range(3000)]  # 52 bytes each
    (root / "big.txt").write_text("".join(lines))
    (root / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    api = messages_api(
        per_agent(
            {
                "coach": quiet(),
                "researcher": [
                    tool("file_list", {}, "toolu_list"),
                    tool("file_read", {"path": "big.txt"}, "toolu_big"),
                    tool("file_read", {"path": "big.txt", "start_line": 1900}, "toolu_late"),
                    tool("file_read", {"path": "blob.bin"}, "toolu_blob"),
                    tool("file_read", {"path": "latin1.txt"}, "toolu_latin1"),
                    text("Read them."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=2)
    results = tool_results(api)
    assert results["toolu_list"] == (
        "The workspace (3 entries):\n  big.txt  (156,000 bytes)\n  blob.bin  (16 bytes)\n"
        "  latin1.txt  (4 bytes)",
        False,
    )
    first, is_error = results["toolu_big"]
    assert not is_error and len(first) < 8000
    # 102,400 bytes read: 1,969 whole lines and 12 bytes of the next; 134 lines shown.
    assert first.startswith("big.txt (156,000 bytes), lines 1-134 of 1,970 read:\nline 00000 ")
    assert first.endswith('[More follows: file_read(path="big.txt", start_line=135).]')
    late, _ = results["toolu_late"]
    assert late.startswith("big.txt (156,000 bytes), lines 1,900-1,970 of 1,970 read:\nline 01899")
    assert late.endswith("[The file goes on: only its first 100 KB can be read.]")
    assert results["toolu_blob"] == ("blob.bin is a binary file (16 bytes): not shown.", False)
    assert results["toolu_latin1"] == (
        "latin1.txt is a binary file (4 bytes): not shown.",
        False,
    )
