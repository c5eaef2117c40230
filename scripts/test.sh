#!/usr/bin/env bash
# Runs the whole test suite. pytest's "no tests collected" (exit 5) is a failure here too.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "no tests were collected: treating as failure" >&2
    exit 1
fi
exit "$rc"
