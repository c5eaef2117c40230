"""context_os installed beside Google's Agent Development Kit, in a venv of its own.

google-adk 2.x pins ``watchdog>=6,<7`` (and ``websockets<16``, ``google-genai<3``), which the dev
venv's other packages and its watchdog 7 do not allow beside it. So ADK's users get context_os
with watchdog 6, whose inotify observer has no attribute event (it reports a ``touch`` or a
``chmod`` as a modification). This venv, ``<repo>/.cache/adk/venv`` (gitignored), holds
google-adk, context_os (editable, from this tree, with what pip resolves beside ADK) and the
test tools; made once and reused while its recipe is the same. In it run:

* tests/adk: a real ADK agent with context_os, against a scripted model; ``adk run`` on an agent
  folder that uses it; the session file a real ADK run wrote, replayed;
* tests/files: every file-tracker and file-tool test, on watchdog 6.

Under ``CI=true`` a venv that cannot be made fails the test; elsewhere it skips, saying why.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.adk.conftest import NEEDS_ADK
from tests.helpers import unavailable
from tests.venvs import made_venv, venv_python

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "adk" / "venv"
PACKAGES = ("google-adk==2.13.0", "pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100")
PIP_TIMEOUT_S = 600
RUN_TIMEOUT_S = 900


def _recipe() -> str:
    """The venv's recipe: the Python, the packages, and context_os's own requirements."""
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return json.dumps({"python": sys.version, "packages": PACKAGES, "pyproject": pyproject})


@pytest.fixture(scope="module")
def adk_python() -> Path:
    if importlib.util.find_spec("google.adk") is not None:
        pytest.skip("this is the ADK venv: its tests run here directly")
    try:
        return venv_python(made_venv(VENV, _recipe(), [[*PACKAGES, "-e", str(ROOT)]], PIP_TIMEOUT_S))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        unavailable("a virtualenv with google-adk 2.13.0 and context_os", e)


def test_context_os_works_beside_adk_on_watchdog_6(adk_python: Path, tmp_path: Path) -> None:
    versions = subprocess.run(
        [str(adk_python), "-c", "from importlib.metadata import version as v; print(v('watchdog'), v('google-adk'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert versions[0].startswith("6.") and versions[1] == "2.13.0", versions
    report = tmp_path / "report.xml"
    cmd = [str(adk_python), "-m", "pytest", "tests/adk", "tests/files", "-m", "not xtdb"]
    r = subprocess.run(
        [*cmd, "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, f"{' '.join(cmd)} in the ADK venv exited {r.returncode}:\n{(r.stdout + r.stderr)[-6000:]}"
    cases = ElementTree.parse(report).getroot().iter("testcase")
    ran = {c.get("classname", "") for c in cases if not any(k.tag == "skipped" for k in c)}
    modules = {name.rsplit(".", 1)[0] if name.count(".") > 2 else name for name in ran}
    assert {f"tests.adk.{name.removesuffix('.py')}" for name in NEEDS_ADK} | {"tests.files.test_tracker"} <= modules
