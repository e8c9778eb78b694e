#!/usr/bin/env bash
# End-to-end check of the editor-client example against a real dshd on a private temporary home and
# socket: build the example from its lock file, run it, check what it printed, stop the daemon.
#
#   examples/editor-client/test.sh [DSHD] [DSHCTL]
#
# DSHD defaults to target/debug/dshd, DSHCTL to the dshctl next to it; without a dshctl the daemon
# is stopped with SIGTERM. Needs Node 20+ and npm (packages come from `npm ci`).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" editor-client "$@"

echo "==> build the example (npm ci, npm run build)"
(cd "$here" && npm ci --no-audit --no-fund && npm run build)

echo "==> no daemon: the client prints dshctl's hint and exits 1"
set +e
# Only DSH_HOME is set, so this also exercises the default socket rule.
env -u DSH_SOCKET -u XDG_RUNTIME_DIR DSH_HOME="$tmp/nohome" node "$here/dist/index.js" \
  >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "expected exit 1 without a daemon, got $rc"
hint="no dshd is listening on $tmp/nohome/run/dshd.sock; start it with 'dshd' or 'systemctl --user start dshd'"
grep -qF "$hint" "$tmp/client.err" || fail "missing the not-listening hint"

start_dshd

echo "==> run the client"
set +e
node "$here/dist/index.js" --socket "$sock" --cwd "$tmp/work" >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "client exited $rc"

out=$tmp/client.out
grep -q '^status: dshd .* (protocol 1)' "$out" || fail "no Daemon.Status line"
grep -q '^  DSH_SESSION_ID  (builtin)' "$out" || fail "ShellEnv.List did not list DSH_SESSION_ID"
id=$(sed -n 's/^agent created: \([0-9a-f-]*\) .*/\1/p' "$out")
[[ -n $id ]] || fail "no 'agent created' line"
grep -q '^event turn_started ' "$out" || fail "no turn_started event"
grep -q '^event tool_call .*"name":"bash"' "$out" || fail "no bash tool_call event"
# The tool ran `echo $DSH_SESSION_ID`: the daemon handed the call its own session id.
grep -qF "\"content\":\"${id}\\n\"" "$out" || fail "the tool result is not the agent's session id"
grep -q '^event turn_ended .*"kind":"completed"' "$out" || fail "no turn_ended completed event"
transcript=$(sed -n 's/^locate: kind: jsonl path: //p' "$out")
[[ -n $transcript ]] || fail "no 'locate: kind: jsonl' line"
[[ $transcript == "$home/"*.jsonl ]] || fail "transcript $transcript is not a .jsonl under $home"
[[ -f $transcript ]] || fail "transcript $transcript does not exist"
head -n 1 "$transcript" | grep -qF "\"$id\"" || fail "transcript header does not name $id"
grep -qF "agent closed: $id" "$out" || fail "the agent was not closed"

stop_dshd

echo "editor-client: OK"
