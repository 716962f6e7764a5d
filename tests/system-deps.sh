#!/usr/bin/env bash
# The Debian packages some tests drive for real: chromium + chromium-driver (the dashboard's browser test) and
# prometheus (its promtool checks deploy/monitoring/'s alert rules). Installed once, when missing, if this is
# a root shell on Debian; elsewhere those tests skip and say why. Never fails `make test` by itself.
set -u
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "== not installing ${missing[*]} (needs root and apt-get): the browser and promtool tests will be skipped"
    exit 0
fi
echo "== installing Debian packages for the browser and alert-rule tests (once): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "== apt-get could not install ${missing[*]}: the tests that need them will be skipped"
fi
exit 0
