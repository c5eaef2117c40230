#!/usr/bin/env bash
# Installs Debian packages that a script or a test needs, once.
#
# Usage: scripts/apt-install.sh "WHAT FOR" PACKAGE...
#
# Runs `apt-get install --no-install-recommends PACKAGE...` as root, or through a password-less
# sudo; on failure it updates the package lists once (missing or stale on a fresh machine) and
# tries again. When it cannot install (no root, no sudo, no apt-get) it says what to run and exits
# 1. Everything goes to stderr.
set -euo pipefail

what="${1:?usage: scripts/apt-install.sh \"WHAT FOR\" PACKAGE...}"
shift
[ "$#" -gt 0 ] || { echo "scripts/apt-install.sh: no package named" >&2; exit 2; }

if [ "$(id -u)" = "0" ]; then
    run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    run=(sudo -n)
else
    echo "$what: missing; install it with:" >&2
    echo "  sudo apt-get install --no-install-recommends $*" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$what: missing, and this machine has no apt-get to install Debian's $*" >&2
    exit 1
fi
# one install at a time (the workers of a parallel test run may each need one): apt-get would
# fail at once on the lock the other holds
if command -v flock >/dev/null 2>&1; then
    exec 7>>"${TMPDIR:-/tmp}/ctxos-apt-install.lock"
    flock -w 1800 7 || { echo "$what: another install held its lock for 30 minutes" >&2; exit 1; }
fi
echo "installing Debian's $* for $what (once)" >&2
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get install -y -q --no-install-recommends "$@" >&2 \
    || { "${run[@]}" apt-get update -q >&2 && "${run[@]}" apt-get install -y -q --no-install-recommends "$@" >&2; }
