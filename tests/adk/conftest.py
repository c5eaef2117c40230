"""The ADK tests: ``db`` as the harness tests have it. Those of ``NEEDS_ADK`` need google-adk,
which lives in a venv of its own (``test_beside_adk.py`` makes it and runs those tests there):
where it is not installed, they are not collected."""

from __future__ import annotations

import importlib.util

from tests.replay.conftest import db

__all__ = ["db"]

NEEDS_ADK = ["test_adk.py", "test_adk_cli.py", "test_replay_adk.py"]
collect_ignore = [] if importlib.util.find_spec("google.adk") else NEEDS_ADK
