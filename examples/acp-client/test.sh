#!/usr/bin/env bash
# End-to-end check of `dshctl acp` with the official ACP client library (npm
# @agentclientprotocol/sdk, pinned in package-lock.json) against a real dshd on a private temporary
# home and socket: install from the lock file, run client.mjs, check what it printed.
#
#   examples/acp-client/test.sh [DSHD] [DSHCTL]
#
# DSHD defaults to target/debug/dshd, DSHCTL to the dshctl next to it. Needs Node 20+ and npm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "test.sh: FAIL: $tool is missing; install Node 20+ and npm (e.g. apt-get install nodejs npm)" >&2
    exit 1
  }
done
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" acp-client "$@"
[[ -n $dshctl ]] || fail "no dshctl next to $dshd (cargo build --bin dshctl)"

echo "==> install the client library (npm ci)"
(cd "$here" && npm ci --ignore-scripts --no-audit --no-fund)

start_dshd

echo "==> run the client"
set +e
node "$here/client.mjs" --dshctl "$dshctl" --socket "$sock" --cwd "$tmp/work" >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "client exited $rc"
grep -q '^acp-client: all checks passed$' "$tmp/client.out" || fail "the client did not finish its checks"
grep -q '^session/cancel: cancelled after ' "$tmp/client.out" || fail "no cancelled turn"

stop_dshd

echo "acp-client: OK"
