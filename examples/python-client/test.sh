#!/usr/bin/env bash
# End-to-end check of the Python example against a real dshd on a private temporary home: the
# README's commands run as written (pinned grpcio in a throw-away venv, stubs generated from the
# repository's protos, client.py finding the socket by the default rule) and the other ways of
# naming the socket.
#
#   examples/python-client/test.sh [DSHD] [DSHCTL]
#
# DSHD defaults to target/debug/dshd, DSHCTL to the dshctl next to it; without a dshctl the daemon
# is stopped with SIGTERM. Needs python3 with venv and pip (packages come from PyPI).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" python-client "$@"

# The README's first ```sh block, verbatim.
commands=$(awk '/^```sh$/ { inside = 1; next } inside && /^```$/ { exit } inside' "$here/README.md")
[[ -n $commands ]] || fail "no \`\`\`sh block in examples/python-client/README.md"

# A scratch copy of what the commands use, so nothing is written into the repository; the venv in
# $tmp rather than /tmp/dsh-py, which may be someone else's or stale (the one substitution made).
mkdir -p "$tmp/repo/examples"
cp -R "$repo/proto" "$tmp/repo/proto"
cp -R "$here" "$tmp/repo/examples/python-client"
rm -rf "$tmp/repo/examples/python-client/gen"
commands=${commands//\/tmp\/dsh-py/$tmp/dsh-py}

# dshd serves where the default rule finds it for a client with XDG_RUNTIME_DIR=$tmp/xdg.
sock=$tmp/xdg/dsh/dshd.sock
start_dshd

# Runs the client as a user would, with no DSH_* or runtime directory of the caller's.
client_env=(env -u DSH_SOCKET -u DSH_HOME -u XDG_RUNTIME_DIR HOME="$tmp/user")

echo "==> the README's commands, as written"
set +e
(cd "$tmp/repo" && "${client_env[@]}" XDG_RUNTIME_DIR="$tmp/xdg" bash -euo pipefail -c "$commands") \
  >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "the README's commands exited $rc"
out=$tmp/client.out
grep -q '^dshd .* (protocol 2), home ' "$out" || fail "no Daemon.Status line"
grep -q '^  DSH_SESSION_ID  (builtin)' "$out" || fail "ShellEnv.List did not list DSH_SESSION_ID"
id=$(sed -n 's/^agent created: //p' "$out")
[[ -n $id ]] || fail "no 'agent created' line"
grep -q '^event tool/call seq=[0-9]* .*"name":"bash"' "$out" || fail "no bash tool/call event"
grep -qF "\"content\":\"${id}\\n\"" "$out" || fail "the tool result is not the agent's session id"
grep -q '^event turn/end seq=[0-9]* .*"kind":"completed"' "$out" || fail "no turn/end completed event"

example=$tmp/repo/examples/python-client
run_client() {
  (cd "$example" && "${client_env[@]}" "$@" PYTHONPATH=gen "$tmp/dsh-py/bin/python" client.py \
    ${socket_arg:+"$socket_arg"}) >"$tmp/client.out" 2>"$tmp/client.err"
}

echo "==> the socket named on the command line, and by \$DSH_SOCKET (over \$XDG_RUNTIME_DIR)"
socket_arg=$sock run_client XDG_RUNTIME_DIR="$tmp/elsewhere" || fail "client.py SOCKET failed"
socket_arg='' run_client DSH_SOCKET="$sock" XDG_RUNTIME_DIR="$tmp/elsewhere" \
  || fail "client.py with DSH_SOCKET failed"

echo "==> \$DSH_HOME/run/dshd.sock without either; nothing listens there"
set +e
socket_arg='' run_client DSH_HOME="$tmp/other-home"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "client.py with no dshd exited $rc, not 1"
grep -qF "error: no dshd is listening on $tmp/other-home/run/dshd.sock;" "$tmp/client.err" \
  || fail "client.py did not say that nothing listens on \$DSH_HOME/run/dshd.sock"

stop_dshd

echo "python-client: OK"
