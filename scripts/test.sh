#!/usr/bin/env bash
# Runs the whole test suite. pytest's "no tests collected" (exit 5) is a failure here too.
set -uo pipefail
cd "$(dirname "$0")/.."
# Two worker processes (pytest-xdist), a test file to each at a time: most of the suite waits
# on servers, nodes and subprocesses, so two workers take about 60% of one's time on two cores.
# CTXOS_TEST_WORKERS picks another number; 0 runs everything in this one process.
.venv/bin/python -m pytest -n "${CTXOS_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "no tests were collected: treating as failure" >&2
    exit 1
fi
exit "$rc"
