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
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" python-client "$@"

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

start_dshd

echo "==> run client.py"
set +e
(cd "$tmp/work" && PYTHONPATH="$tmp/gen" "$tmp/venv/bin/python" "$here/client.py" "$sock") \
  >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "client.py exited $rc"
out=$tmp/client.out
grep -q '^dshd .* (protocol 2), home ' "$out" || fail "no Daemon.Status line"
grep -q '^  DSH_SESSION_ID  (builtin)' "$out" || fail "ShellEnv.List did not list DSH_SESSION_ID"
id=$(sed -n 's/^agent created: //p' "$out")
[[ -n $id ]] || fail "no 'agent created' line"
grep -q '^event tool/call seq=[0-9]* .*"name":"bash"' "$out" || fail "no bash tool/call event"
grep -qF "\"content\":\"${id}\\n\"" "$out" || fail "the tool result is not the agent's session id"
grep -q '^event turn/end seq=[0-9]* .*"kind":"completed"' "$out" || fail "no turn/end completed event"

stop_dshd

echo "python-client: OK"
