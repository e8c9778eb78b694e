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
repo=$(cd "$here/../.." && pwd)
dshd=$(realpath "${1:-$repo/target/debug/dshd}")
dshctl=${2:-$(dirname "$dshd")/dshctl}
if [[ -x $dshctl ]]; then dshctl=$(realpath "$dshctl"); else dshctl=; fi
[[ -x $dshd ]] || { echo "test.sh: no dshd binary at $dshd (cargo build --bin dshd)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsh-editor-client.XXXXXX")
chmod 700 "$tmp"
home=$tmp/home
sock=$tmp/run/dshd.sock
pid=
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "test.sh: FAIL: $*" >&2
  for f in "$tmp/client.out" "$tmp/client.err" "$tmp/dshd.log"; do
    [[ -s $f ]] && { echo "--- $(basename "$f")" >&2; cat "$f" >&2; }
  done
  exit 1
}

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

echo "==> start dshd on $sock"
mkdir -p "$tmp/user" "$tmp/work"
# A clean environment, as the Rust end-to-end tests use: no outer DSH_*, no systemd or runtime dir.
unset_env=(-u XDG_RUNTIME_DIR -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID)
while IFS= read -r name; do unset_env+=(-u "$name"); done < <(compgen -e | grep '^DSH_' || true)
(cd "$tmp" && exec env "${unset_env[@]}" HOME="$tmp/user" RUST_LOG=info \
  "$dshd" --dsh-home "$home" --socket "$sock" 2>"$tmp/dshd.log" >/dev/null) &
pid=$!
for _ in $(seq 200); do
  kill -0 "$pid" 2>/dev/null || fail "dshd exited during start-up"
  if [[ -n $dshctl ]]; then
    "$dshctl" --socket "$sock" status >/dev/null 2>&1 && break
  elif [[ -S $sock ]]; then
    break
  fi
  sleep 0.1
done
[[ -S $sock ]] || fail "dshd did not create $sock within 20 s"

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

echo "==> stop dshd"
if [[ -n $dshctl ]]; then
  "$dshctl" --socket "$sock" shutdown
else
  kill -TERM "$pid"
fi
set +e
wait "$pid"
rc=$?
set -e
pid=
[[ $rc -eq 0 ]] || fail "dshd exited $rc"
[[ ! -e $sock ]] || fail "dshd left its socket behind"

echo "editor-client: OK"
