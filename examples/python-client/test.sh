#!/usr/bin/env bash
# End-to-end check of the Python example (the snippet in docs/PROTOCOL.md) against a real dshd on a
# private temporary home and socket: pinned grpcio in a throw-away venv, stubs generated from the
# repository's protos, one run of client.py, and a check that the guide still quotes client.py.
#
#   examples/python-client/test.sh [DSHD] [DSHCTL]
#
# DSHD defaults to target/debug/dshd, DSHCTL to the dshctl next to it; without a dshctl the daemon
# is stopped with SIGTERM. Needs python3 with venv and pip (packages come from PyPI).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dshd=$(realpath "${1:-$repo/target/debug/dshd}")
dshctl=${2:-$(dirname "$dshd")/dshctl}
if [[ -x $dshctl ]]; then dshctl=$(realpath "$dshctl"); else dshctl=; fi
[[ -x $dshd ]] || { echo "test.sh: no dshd binary at $dshd (cargo build --bin dshd)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsh-python-client.XXXXXX")
chmod 700 "$tmp"
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

echo "==> the guide quotes client.py verbatim"
quoted=$(python3 - "$here/client.py" "$repo/docs/PROTOCOL.md" <<'PY'
import sys
script, guide = (open(p, encoding="utf-8").read() for p in sys.argv[1:])
print("yes" if script in guide else "no")
PY
)
[[ $quoted == yes ]] || fail "docs/PROTOCOL.md no longer contains examples/python-client/client.py"

echo "==> venv with the pinned grpcio, stubs from proto/"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
mkdir "$tmp/gen"
(cd "$repo/proto" && "$tmp/venv/bin/python" -m grpc_tools.protoc -I . \
  --python_out="$tmp/gen" --grpc_python_out="$tmp/gen" dsh/v1/*.proto)

echo "==> start dshd on $sock"
mkdir -p "$tmp/user" "$tmp/work"
unset_env=(-u XDG_RUNTIME_DIR -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID)
while IFS= read -r name; do unset_env+=(-u "$name"); done < <(compgen -e | grep '^DSH_' || true)
(cd "$tmp" && exec env "${unset_env[@]}" HOME="$tmp/user" RUST_LOG=info \
  "$dshd" --dsh-home "$tmp/home" --socket "$sock" 2>"$tmp/dshd.log" >/dev/null) &
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

echo "==> run client.py"
set +e
(cd "$tmp/work" && PYTHONPATH="$tmp/gen" "$tmp/venv/bin/python" "$here/client.py" "$sock") \
  >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "client.py exited $rc"
out=$tmp/client.out
grep -q '^dshd .* (protocol 1), home ' "$out" || fail "no Daemon.Status line"
grep -q '^  DSH_SESSION_ID  (builtin)' "$out" || fail "ShellEnv.List did not list DSH_SESSION_ID"
id=$(sed -n 's/^agent created: //p' "$out")
[[ -n $id ]] || fail "no 'agent created' line"
grep -q '^event tool_call .*"name": "bash"' "$out" || fail "no bash tool_call event"
grep -qF "\"content\": \"${id}\\n\"" "$out" || fail "the tool result is not the agent's session id"
grep -q '^event turn_ended .*"kind": "completed"' "$out" || fail "no turn_ended completed event"

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

echo "python-client: OK"
