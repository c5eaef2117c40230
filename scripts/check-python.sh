#!/usr/bin/env bash
# Stops make early, with the way out, when the Python it would use is older than pyproject.toml's
# requires-python (a machine's python3 may be 3.10 or older). Without it, make builds .venv with that
# Python, pip refuses the package, and the half-made .venv keeps the old Python on every later run,
# PY= or not. The same for a .venv left without pip (a Python without ensurepip: Debian's and
# Ubuntu's python3 until python3.X-venv is installed).
#
#   scripts/check-python.sh PYTHON GOAL        before `PYTHON -m venv .venv`
#   scripts/check-python.sh --venv PYTHON GOAL  before installing into .venv (PYTHON is .venv's)
#
# It only reads: it never creates or removes anything. Any python that runs `print` is asked.
set -uo pipefail
cd "$(dirname "$0")/.."

venv=0
if [ "${1:-}" = "--venv" ]; then
    venv=1
    shift
fi
py="${1:?usage: check-python.sh [--venv] PYTHON GOAL}"
goal="${2:-demo}"

floor=$(sed -n 's/^requires-python *= *">= *\([0-9][0-9]*\.[0-9][0-9]*\)".*/\1/p' pyproject.toml)
if [ -z "$floor" ]; then
    echo "scripts/check-python.sh: no requires-python = \">=X.Y\" in pyproject.toml" >&2
    exit 2
fi
want_major=${floor%%.*}
want_minor=${floor#*.}
hint="make $goal PY=/path/to/python$floor (or any newer python3.X)"

if ! command -v "$py" >/dev/null 2>&1; then
    echo "make: there is no '$py' to run; context_os needs Python >= $floor: $hint" >&2
    exit 1
fi
# %-formatting and a bare print: the reply is read from any Python, even Python 2.
version=$("$py" -c 'import sys; print("%d.%d.%d" % tuple(sys.version_info[:3]))' 2>/dev/null)
if [ -z "$version" ]; then
    echo "make: '$py' did not run as a Python interpreter; context_os needs Python >= $floor: $hint" >&2
    exit 1
fi
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" -gt "$want_major" ] || { [ "$major" -eq "$want_major" ] && [ "$minor" -ge "$want_minor" ]; }; then
    # a .venv whose making stopped half-way (its Python had no ensurepip) has no pip to install with
    if [ "$venv" -eq 1 ] && ! "$py" -c 'import pip' >/dev/null 2>&1; then
        echo "make: .venv has no pip: it was not made whole (Python $version)." >&2
        echo "Remove it and make it again: make clean && make $goal" >&2
        exit 1
    fi
    exit 0
fi
if [ "$venv" -eq 1 ]; then
    echo "make: .venv was made with Python $version; context_os needs Python >= $floor." >&2
    echo "Remove it and make it again with a newer Python: make clean && $hint" >&2
else
    echo "make: $py is Python $version; context_os needs Python >= $floor." >&2
    echo "Name a newer Python: $hint" >&2
fi
exit 1
