"""The task runner on a machine whose Python is too old: ``make`` stops before it builds ``.venv``.

Each case runs the real Makefile with the real ``make`` and this test's own interpreter, in a copy of
the files the Makefile reads, whose ``pyproject.toml`` asks for one minor version more than this
interpreter is: what a user whose ``python3`` is 3.10 meets against ``requires-python >= 3.11``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNING = "{}.{}.{}".format(*sys.version_info[:3])

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _project(tmp_path: Path, floor: str) -> Path:
    """A copy of the Makefile and what it reads, ``requires-python`` set to ``>=floor``."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy2(ROOT / "scripts" / "check-python.sh", tmp_path / "scripts" / "check-python.sh")
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text, n = re.subn(r'(?m)^requires-python = ".*"$', f'requires-python = ">={floor}"', text)
    assert n == 1
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    return tmp_path


def _above_running() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1] + 1}"


def _make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=project, capture_output=True, text=True, timeout=120
    )


def test_a_python_older_than_requires_python_stops_make_before_the_venv(tmp_path: Path) -> None:
    project = _project(tmp_path, _above_running())
    done = _make(project, "demo", f"PY={sys.executable}")
    assert done.returncode != 0
    assert f"is Python {RUNNING}; context_os needs Python >= {_above_running()}" in done.stderr
    assert f"make demo PY=/path/to/python{_above_running()}" in done.stderr
    # nothing half-made that a later run with PY= would pick up again
    assert not (project / ".venv").exists()


def test_the_message_names_the_goal_that_was_asked(tmp_path: Path) -> None:
    done = _make(_project(tmp_path, _above_running()), "test", f"PY={sys.executable}")
    assert done.returncode != 0
    assert "make test PY=" in done.stderr


def test_a_python_that_is_not_there_is_named(tmp_path: Path) -> None:
    project = _project(tmp_path, "3.11")
    done = _make(project, "demo", "PY=python-that-is-not-installed")
    assert done.returncode != 0
    assert "there is no 'python-that-is-not-installed' to run" in done.stderr
    assert "PY=" in done.stderr
    assert not (project / ".venv").exists()


def test_a_venv_left_by_an_older_python_says_to_remake_it(tmp_path: Path) -> None:
    # a .venv made before by a Python the floor now refuses (make keeps it: its bin/python exists)
    project = _project(tmp_path, _above_running())
    venv.create(project / ".venv", with_pip=False, symlinks=True)
    done = _make(project, "demo", "PY=python3")
    assert done.returncode != 0
    assert f".venv was made with Python {RUNNING}" in done.stderr
    assert "make clean && make demo PY=" in done.stderr


def test_a_python_at_the_floor_passes_the_check(tmp_path: Path) -> None:
    project = _project(tmp_path, "{}.{}".format(*sys.version_info[:2]))
    done = subprocess.run(
        ["scripts/check-python.sh", sys.executable, "demo"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
