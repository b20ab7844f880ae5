"""Cached installs for end-to-end tests: venvs (PyPI) and npm packages, built once per machine.

Tests that need a real third-party program (another mitmproxy version, LiteLLM, the Claude
Code CLI, ...) install it pinned, the first time, into a cache directory outside the checkout,
so a fresh clone (CI) on the same machine reuses it, as ``scripts/`` reuse ``.venv``:

- ``TOOLID_CACHE`` if set, else ``$XDG_CACHE_HOME/toolid``, else ``~/.cache/toolid``;
- each install goes to its own folder named after what it holds (``venvs/<name>``,
  ``npm/<package>@<version>``), built in a temporary folder and renamed into place when
  complete, under a file lock: concurrent test runs never see a half-built install.

A failed install fails the test with the installer's output (registries are reachable from
every machine here, CI included, so a missing install is a real problem, not a skip).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

INSTALL_TIMEOUT = 900  # seconds; a cold pip or npm install on a 2-core machine


def cache_root() -> Path:
    """Where cached installs live (created on demand)."""
    explicit = os.environ.get("TOOLID_CACHE")
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "toolid"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(cmd: Sequence[str], what: str, cwd: Path | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        done = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: timed out after {INSTALL_TIMEOUT}s: {' '.join(cmd)}")
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode("utf-8", "replace")[-4000:]
        pytest.fail(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{output}")


def base_python() -> str:
    """The interpreter the suite's own venv was made from (a venv of a venv is fragile)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def venv(name: str, requirements: Sequence[str], python: str | None = None) -> Path:
    """A cached venv holding exactly ``requirements`` (pinned specifiers); its folder.

    The folder name carries ``name``, the interpreter's version and a digest of the
    requirements, so changing a pin builds a new venv beside the old one.
    """
    python = python or base_python()
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:10]
    target = cache_root() / "venvs" / f"{name}-py{version}-{digest}"
    with _locked(target):
        # bin/python is a link to the base interpreter: rebuild if that one has gone
        if (target / ".complete").exists() and (target / "bin" / "python").exists():
            return target
        building = target.with_name(target.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        _run([python, "-m", "venv", str(building)], f"creating the {name} venv")
        pip = [str(building / "bin" / "python"), "-m", "pip"]
        _run(
            [*pip, "install", "-q", "--disable-pip-version-check", "--no-input", *requirements],
            f"installing {' '.join(requirements)}",
        )
        # A venv's scripts name its folder in their #! lines: build where it will live.
        building.rename(target)
        _fix_shebangs(target, building)
        (target / ".complete").write_text("\n".join(requirements) + "\n")
    return target


def clone(venv_dir: Path, dest: Path) -> Path:
    """A private copy of the cached venv ``venv_dir`` at ``dest``, to install more into;
    ``dest``. Its files are hard links where possible (fast): pip and Python replace files,
    never rewrite them in place, and neither does ``_fix_shebangs``."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another file system
            shutil.copy2(src, dst)

    shutil.copytree(venv_dir, dest, symlinks=True, copy_function=link)
    _fix_shebangs(dest, venv_dir)
    return dest


def _fix_shebangs(target: Path, old: Path) -> None:
    """Point the venv's scripts, activation files and pyvenv.cfg at its final folder."""
    old_bytes, new_bytes = str(old).encode(), str(target).encode()
    for path in [*(target / "bin").iterdir(), target / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old_bytes in data:  # a new file in its place: a hard-linked one stays as it is
            fresh = path.with_name(path.name + ".new")
            fresh.write_bytes(data.replace(old_bytes, new_bytes))
            shutil.copymode(path, fresh)
            fresh.replace(path)


def npm_package(package: str, version: str) -> Path:
    """A cached ``npm install`` of ``package@version``; the folder holding node_modules."""
    target = cache_root() / "npm" / f"{package.replace('/', '+')}@{version}"
    with _locked(target):
        if (target / ".complete").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm not found: install Node.js (the real-agent tests need it)")
        _run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--prefix",
                str(target),
                f"{package}@{version}",
            ],
            f"npm install {package}@{version}",
        )
        (target / ".complete").write_text(f"{package}@{version}\n")
    return target


def npm_bin(package: str, version: str, command: str) -> Path:
    """The executable ``command`` of a cached npm install of ``package@version``."""
    path = npm_package(package, version) / "node_modules" / ".bin" / command
    if not path.exists():
        pytest.fail(f"{package}@{version} has no {command} executable at {path}")
    return path
