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
grep -q '^status: dshd .* (protocol 2)' "$out" || fail "no Daemon.Status line"
grep -q '^  DSH_SESSION_ID  (builtin)' "$out" || fail "ShellEnv.List did not list DSH_SESSION_ID"
id=$(sed -n 's/^agent created: \([0-9a-f-]*\) .*/\1/p' "$out")
[[ -n $id ]] || fail "no 'agent created' line"
grep -q "^agent created: $id (scripted, approval APPROVAL_POLICY_ALWAYS" "$out" || fail "the agent's policy is not always"
grep -q '^event turn/start seq=' "$out" || fail "no turn/start event"
grep -q '^event tool/call .*"name":"bash"' "$out" || fail "no bash tool/call event"
# The bash call waited for approval; the client answered, and only then did it run.
grep -q '^event approval/request .*"callId"' "$out" || fail "no approval/request event"
grep -q '^approve: .* -> APPROVAL_DECISION_ALLOW' "$out" || fail "the client did not answer the request"
grep -q '^event approval/decision .*"decision":"allow".*"by":"client"' "$out" || fail "no allow decision"
# The tool ran `echo $DSH_SESSION_ID`: the daemon handed the call its own session id.
grep -qF "\"content\":\"${id}\\n\"" "$out" || fail "the tool result is not the agent's session id"
grep -q '^event turn/end .*"kind":"completed"' "$out" || fail "no turn/end completed event"
# The second window saw the same events, from the first.
grep -q '^watch turn/start seq=0 ' "$out" || fail "the watcher did not replay from seq 0"
grep -q '^watch approval/request ' "$out" || fail "the watcher did not see the approval request"
grep -q '^watch: [1-9][0-9]* logged events, the same as the prompt' "$out" || fail "the watcher saw other events"
# The second turn was cancelled.
grep -q '^cancel: the second turn ended aborted' "$out" || fail "the second turn was not cancelled"
grep -q '^event turn/end .*"kind":"aborted","cause":"user"' "$out" || fail "no turn/end aborted by the user"
transcript=$(sed -n 's/^locate: kind: jsonl path: //p' "$out")
[[ -n $transcript ]] || fail "no 'locate: kind: jsonl' line"
[[ $transcript == "$home/"*.jsonl ]] || fail "transcript $transcript is not a .jsonl under $home"
[[ -f $transcript ]] || fail "transcript $transcript does not exist"
head -n 1 "$transcript" | grep -qF "\"$id\"" || fail "transcript header does not name $id"
grep -qF "agent closed: $id" "$out" || fail "the agent was not closed"

stop_dshd

echo "editor-client: OK"
