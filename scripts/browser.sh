#!/usr/bin/env bash
# Prints the paths of a headless-capable Chromium and its chromedriver ("CHROMIUM DRIVER" on one
# line), installing Debian's packages first if they are missing.
#
# The web view's tests drive the system's Chromium, never a browser downloaded at run time. When
# `chromium` or `chromedriver` is missing it is installed with apt-get (as root, or through a
# password-less sudo): `apt-get install --no-install-recommends chromium chromium-driver`
# (about 130 MB to download). Otherwise it says what to run and exits 1.
#
# Environment: CTXOS_CHROMIUM and CTXOS_CHROMEDRIVER name other binaries to use.
# Everything but the final line goes to stderr.
set -euo pipefail

chromium="${CTXOS_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
driver="${CTXOS_CHROMEDRIVER:-$(command -v chromedriver || true)}"

if [ -z "$chromium" ] || [ -z "$driver" ]; then
    "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt-install.sh" "Chromium for the web view's tests" chromium chromium-driver || {
        echo "  (or set CTXOS_CHROMIUM and CTXOS_CHROMEDRIVER to a Chromium and its chromedriver)" >&2
        exit 1
    }
    chromium="$(command -v chromium)"
    driver="$(command -v chromedriver)"
fi

echo "$chromium $driver"
