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
    packages="chromium chromium-driver"
    if [ "$(id -u)" = "0" ]; then
        run=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        run=(sudo -n)
    else
        echo "Chromium for the web view's tests is missing; install it with:" >&2
        echo "  sudo apt-get install --no-install-recommends $packages" >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "Chromium for the web view's tests is missing and this machine has no apt-get:" >&2
        echo "  set CTXOS_CHROMIUM and CTXOS_CHROMEDRIVER to a Chromium and its chromedriver" >&2
        exit 1
    fi
    echo "installing Debian's $packages (about 130 MB, once)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # the package lists may be missing on a fresh machine (or stale): update once on failure
    "${run[@]}" apt-get install -y -q --no-install-recommends $packages >&2 \
        || { "${run[@]}" apt-get update -q >&2 && "${run[@]}" apt-get install -y -q --no-install-recommends $packages >&2; }
    chromium="$(command -v chromium)"
    driver="$(command -v chromedriver)"
fi

echo "$chromium $driver"
