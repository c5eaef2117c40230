"""The distribution's declared dependencies: a floor in ``pyproject.toml`` admits no release the
code cannot run on.

pip keeps a dependency a user already has when it meets the floor, so a floor below what the code
imports breaks ``import context_os`` for that user (found by installing the wheel beside each
dependency at its floor). Each row names the newest release that fails, or the newest below the
releases the suite is run on, and why; the floor must exclude it and admit the release this suite
runs on.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

TOO_OLD = {
    # (FileAttribEvent, from 7.0, is taken where watchdog has it: files/tracker.py)
    "watchdog": ("5.0.3", "the file tests are run on 7 and on 6 (beside Google's ADK: tests/adk), not before"),
}


TOO_OLD_FOR_THE_TESTS = {
    "click": ("8.1.8", "a CliRunner result has no stderr of its own before 8.2 (the CLI tests read it)"),
}
"""The same for the ``dev`` extra: what ``make test`` installs into a venv that may have them already."""


def _requirements(extra: str | None = None) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {(r := Requirement(line)).name: r for line in lines}


@pytest.mark.parametrize(
    ("extra", "name"), [*((None, n) for n in sorted(TOO_OLD)), *(("dev", n) for n in sorted(TOO_OLD_FOR_THE_TESTS))]
)
def test_a_dependency_floor_excludes_the_releases_the_code_cannot_run_on(extra: str | None, name: str) -> None:
    requirement = _requirements(extra)[name]
    too_old, why = (TOO_OLD if extra is None else TOO_OLD_FOR_THE_TESTS)[name]
    assert not requirement.specifier.contains(too_old), f"{requirement} admits {too_old}: {why}"
    assert requirement.specifier.contains(version(name), prereleases=True)
