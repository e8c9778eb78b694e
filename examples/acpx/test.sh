#!/usr/bin/env bash
# End-to-end check of `dshctl acp` with acpx (npm `acpx`, pinned in package-lock.json), the
# headless ACP client, against a real dshd on a private temporary home and socket: `acpx sessions
# new` in one process, then `acpx prompt` in another, which must run in that same session (the
# first bridge process closed it before any turn; the second makes it live again). The agent is
# the keyless demo (`dshctl acp --demo`).
#
#   examples/acpx/test.sh [DSHD] [DSHCTL]
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
source "$here/../lib/dshd-harness.sh" acpx "$@"
[[ -n $dshctl ]] || fail "no dshctl next to $dshd (cargo build --bin dshctl)"

# `npm install` rather than `npm ci`: acpx declares per-platform optional packages that npm 11
# leaves out of the lock file, and `npm ci` then refuses the lock; the lock still pins the rest.
echo "==> install acpx (npm install from the lock file, no install scripts)"
(cd "$here" && npm install --no-audit --no-fund --ignore-scripts)
acpx=$here/node_modules/.bin/acpx

start_dshd

agent="$dshctl --socket $sock acp --demo"
# acpx keeps its records under HOME: a private one.
export HOME=$tmp/user
echo "==> acpx sessions new"
"$acpx" --agent "$agent" --cwd "$tmp/work" --format json sessions new >"$tmp/client.out" 2>"$tmp/client.err" \
  || fail "acpx sessions new failed"
id=$(grep -o '"acpxSessionId":"[^"]*"' "$tmp/client.out" | head -1 | cut -d'"' -f4)
[[ -n $id ]] || fail "acpx sessions new printed no session id"
echo "session: $id"

echo "==> acpx prompt (another process)"
"$acpx" --agent "$agent" --cwd "$tmp/work" --approve-all --format json prompt "hello" \
  >"$tmp/client.out" 2>"$tmp/client.err" || fail "acpx prompt failed"
grep -q '"stopReason":"end_turn"' "$tmp/client.out" || fail "the prompt did not end its turn"
grep -q "\"sessionId\":\"$id\"" "$tmp/client.out" || fail "the prompt did not run in session $id"
grep -q "hello from session $id" "$tmp/client.out" || fail "the demo's command did not run in session $id"
# One session in dshd: the prompt did not make another.
listed=$("$dshctl" --socket "$sock" --json session list)
[[ $(grep -o '"id":"[^"]*"' <<<"$listed" | sort -u | wc -l) -eq 1 ]] || fail "more than one session: $listed"

stop_dshd

echo "acpx: OK"
