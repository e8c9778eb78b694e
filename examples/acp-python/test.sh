#!/usr/bin/env bash
# End-to-end check of `dshctl acp` with a second, independent ACP client: the Python
# agent-client-protocol package (pinned in requirements.txt, installed in a throw-away venv)
# against a real dshd on a private temporary home and socket.
#
#   examples/acp-python/test.sh [DSHD] [DSHCTL]
#
# DSHD defaults to target/debug/dshd, DSHCTL to the dshctl next to it. Needs python3 with venv.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || {
  echo "test.sh: FAIL: python3 is missing; install it with venv (e.g. apt-get install python3 python3-venv)" >&2
  exit 1
}
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" acp-python "$@"
[[ -n $dshctl ]] || fail "no dshctl next to $dshd (cargo build --bin dshctl)"

echo "==> install the client library in a temporary venv"
python3 -m venv "$tmp/venv" || fail "python3 -m venv failed; install python3-venv (e.g. apt-get install python3-venv)"
"$tmp/venv/bin/pip" install -q -r "$here/requirements.txt"

start_dshd

echo "==> run the client"
set +e
"$tmp/venv/bin/python" "$here/client.py" "$dshctl" "$sock" "$tmp/work" >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "client exited $rc"
grep -q '^acp-python: all checks passed$' "$tmp/client.out" || fail "the client did not finish its checks"

stop_dshd

echo "acp-python: OK"
