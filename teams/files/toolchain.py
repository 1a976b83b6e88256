"""The sandbox's toolchain: Python 3 with pytest, prepared once per Loom data folder.

A virtual environment of the interpreter Loom runs on (its base interpreter, never the
site's own virtualenv), holding pytest and what pytest needs, copied from the
distributions installed beside Loom (pytest is one of Loom's dependencies for this),
so preparing it needs no network. Inside the sandbox it is mounted read-only at
TOOLCHAIN_MOUNT and its `bin` is first on PATH: `python3`, `python` and `pytest` are
there. Its `etc/` holds the sandbox's passwd and group files (one user, `sandbox`).

It is rebuilt when the interpreter or pytest changes (the `ready` file names both), in
a temporary folder renamed into place, under a lock shared by every Loom process."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import sys
import venv
from importlib import metadata
from pathlib import Path

from django.conf import settings
from packaging.requirements import Requirement

TOOLCHAIN_MOUNT = "/opt/loom/toolchain"
SANDBOX_USER = ("sandbox", 1000, "/home/sandbox")
PACKAGES = ("pytest",)


def toolchain_folder() -> Path:
    """Where the toolchain is kept: $LOOM_DATA_DIR/sandbox/toolchain."""
    return Path(settings.DATA_DIR) / "sandbox" / "toolchain"


def base_prefix() -> Path:
    """The folder of the interpreter the toolchain runs (mounted read-only inside)."""
    return Path(sys.base_prefix).resolve()


def _key() -> str:
    versions = [f"{name} {metadata.version(name)}" for name in PACKAGES]
    return "\n".join([sys.version.split()[0], str(base_prefix()), *versions]) + "\n"


def toolchain_ready() -> Path:
    """The toolchain's folder, prepared first when missing or stale."""
    folder = toolchain_folder()
    marker = folder / "ready"
    if marker.is_file() and marker.read_text() == _key():
        return folder
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(folder.parent / ".toolchain.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_file() and marker.read_text() == _key()):
            _build(folder)
    return folder


def _build(folder: Path) -> None:
    staging = folder.parent / f".toolchain-{secrets.token_hex(6)}"
    try:
        venv.EnvBuilder(symlinks=True, with_pip=False, clear=True).create(staging)
        site = staging / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        site = site / "site-packages"
        for distribution in _needed(PACKAGES):
            _copy(distribution, site, staging / "bin")
        etc = staging / "etc"
        etc.mkdir()
        name, uid, home = SANDBOX_USER
        (etc / "passwd").write_text(f"{name}:x:{uid}:{uid}:Loom sandbox:{home}:/bin/sh\n")
        (etc / "group").write_text(f"{name}:x:{uid}:\n")
        (staging / "ready").write_text(_key())
        os.chmod(staging, 0o755)
        if folder.exists():
            old = folder.parent / f".toolchain-old-{secrets.token_hex(6)}"
            folder.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _needed(names) -> list[metadata.Distribution]:
    """The distributions of `names` and everything they require here."""
    found: dict[str, metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        distribution = metadata.distribution(name)
        key = distribution.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = distribution
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return list(found.values())


def _copy(distribution: metadata.Distribution, site: Path, bin_folder: Path) -> None:
    """The distribution's files under its site-packages, and its console scripts."""
    source = Path(distribution.locate_file("")).resolve()
    for file in distribution.files or []:
        path = Path(distribution.locate_file(file)).resolve()
        if source not in path.parents or "__pycache__" in path.parts:
            continue
        target = site / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    for entry in distribution.entry_points.select(group="console_scripts"):
        module, _, attribute = entry.value.partition(":")
        script = bin_folder / entry.name
        script.write_text(
            f"#!{TOOLCHAIN_MOUNT}/bin/python\nimport sys\nfrom {module} import "
            f"{attribute.split('.')[0]}\nsys.exit({attribute}())\n"
        )
        script.chmod(0o755)
