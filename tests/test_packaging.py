"""The distribution's declared dependencies: a floor in ``pyproject.toml`` admits no release the
code cannot run on.

pip keeps a dependency a user already has when it meets the floor, so a floor below what the code
imports breaks ``import context_os`` for that user (found by installing the wheel beside each
dependency at its floor). Each row names the newest release that fails and why; the floor must
exclude it and admit the release this suite runs on.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

TOO_OLD = {
    "watchdog": ("6.0.0", "watchdog.events has no FileAttribEvent before 7.0 (files/tracker.py imports it)"),
}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {(r := Requirement(line)).name: r for line in project["dependencies"]}


@pytest.mark.parametrize("name", sorted(TOO_OLD))
def test_a_dependency_floor_excludes_the_releases_the_code_cannot_run_on(name: str) -> None:
    requirement = _requirements()[name]
    too_old, why = TOO_OLD[name]
    assert not requirement.specifier.contains(too_old), f"{requirement} admits {too_old}: {why}"
    assert requirement.specifier.contains(version(name), prereleases=True)
