#!/usr/bin/env bash
# keyspan's test command: installs what the tests need — the Debian packages of the servers they
# start (PostgreSQL, Chromium and its driver) when missing, and keyspan with its test extra in
# .venv — then runs pytest with any arguments given (e.g. `scripts/test.sh tests/test_smoke.py`).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "keyspan tests: installing ${missing[*]} (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "keyspan tests: ${missing[*]} not installed and this is no root shell with apt-get;" \
         "install them (apt-get install ${missing[*]}) or the tests that need them skip, saying why" >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
exec .venv/bin/python -m pytest "$@"
