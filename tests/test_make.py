"""The task runner on a machine whose Python will not do: ``make`` stops before it builds ``.venv``
(or leaves none half-made) and says what to run instead.

Each case runs the real Makefile with the real ``make`` and this test's own interpreter, in a copy of
the files the Makefile reads. Where the Python must be too old, that copy's ``pyproject.toml`` asks for
one minor version more than this interpreter is: what a user whose ``python3`` is 3.10 meets against
``requires-python >= 3.11``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNING = "{}.{}.{}".format(*sys.version_info[:3])

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _project(tmp_path: Path, floor: str) -> Path:
    """A copy of the Makefile and what it reads, ``requires-python`` set to ``>=floor``."""
    (tmp_path / "scripts").mkdir(parents=True)
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


def _python_without_ensurepip(tmp_path: Path) -> Path:
    """This interpreter, laid out without its ``ensurepip`` module: Debian's and Ubuntu's
    ``python3`` until ``python3.X-venv`` is installed. Its binary is copied (a symlink would be
    followed back to the full stdlib); the rest of the stdlib is linked."""
    base = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prefix = tmp_path / "python-without-ensurepip"
    (prefix / "bin").mkdir(parents=True)
    lib = prefix / "lib" / stdlib.name
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name != "ensurepip":
            (lib / entry.name).symlink_to(entry)
    python = prefix / "bin" / base.name
    shutil.copy2(base, python)
    probe = subprocess.run(
        [str(python), "-c", "import sys, importlib.util; print(sys.prefix, importlib.util.find_spec('ensurepip'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0 or probe.stdout.split() != [str(prefix), "None"]:
        pytest.skip(f"this interpreter does not run from a copied prefix: {probe.stdout}{probe.stderr}")
    return python


def test_a_python_without_ensurepip_leaves_no_half_made_venv(tmp_path: Path) -> None:
    python = _python_without_ensurepip(tmp_path)
    project = _project(tmp_path / "project", "{}.{}".format(*sys.version_info[:2]))
    done = _make(project, "demo", f"PY={python}")
    assert done.returncode != 0
    assert "ensurepip" in done.stdout + done.stderr  # venv's own account of what is missing
    # once the user installs what was missing, the next make starts from a new venv
    assert not (project / ".venv").exists()


def test_a_venv_without_pip_says_to_remake_it(tmp_path: Path) -> None:
    # what a Python without ensurepip left before: a .venv with a bin/python and no pip
    project = _project(tmp_path, "{}.{}".format(*sys.version_info[:2]))
    venv.create(project / ".venv", with_pip=False, symlinks=True)
    done = _make(project, "demo")
    assert done.returncode != 0
    assert ".venv has no pip: it was not made whole" in done.stderr
    assert "make clean && make demo" in done.stderr
    assert "No module named pip" not in done.stderr
