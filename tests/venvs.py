"""Virtualenvs of their own for tests whose packages cannot live in the dev venv (pins that clash
with it): made once under ``<repo>/.cache`` (gitignored) and reused while their recipe is the
same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

STAMP = ".ctxos-recipe"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run_checked(cmd: list[str], timeout: float) -> None:
    """Run ``cmd``; a failure raises ``RuntimeError`` with the end of its output."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}")


def made_venv(venv: Path, recipe: str, installs: Sequence[Sequence[str]], pip_timeout: float) -> Path:
    """The venv at ``venv``, made if it is missing or was made by another ``recipe``: ``python -m
    venv``, then one ``pip install`` of each of ``installs``. Built beside its place and renamed
    into it, so an interrupted build is never reused (an editable install names its source tree,
    not the venv's path: the rename keeps it working; the ``#!`` lines of its scripts name the
    build's path: run a script with the venv's ``python``)."""
    stamp = venv / STAMP
    if venv_python(venv).exists() and stamp.exists() and stamp.read_text() == recipe:
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    build = venv.parent / f"{venv.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        run_checked([sys.executable, "-m", "venv", str(build)], timeout=120)
        pip = [str(venv_python(build)), "-m", "pip", "--disable-pip-version-check", "install", "-q"]
        for args in installs:
            run_checked([*pip, *args], timeout=pip_timeout)
        (build / STAMP).write_text(recipe)
        shutil.rmtree(venv, ignore_errors=True)
        build.rename(venv)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return venv
