#!/usr/bin/env bash
# README.md's "Talk to it from any gRPC client" against a real dshd: the section's ```sh block,
# read from the README now and run as written with grpcurl, buf and grpcio pinned from PyPI
# (requirements.txt) in a throw-away venv; then what the section says happens without the
# authority: grpcurl's stream is reset with PROTOCOL_ERROR and dshd's default log says why.
#
#   examples/grpc-clients/test.sh [DSHD] [DSHCTL]
#
# Needs python3 with venv and pip, and jq (the block finds the socket with dshctl and jq).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/dshd-harness.sh
source "$here/../lib/dshd-harness.sh" grpc-clients "$@"
[[ -n $dshctl ]] || fail "no dshctl next to $dshd: the README's block runs dshctl"
command -v jq >/dev/null || fail "jq is missing; install it: apt-get install jq"

echo "==> the section's commands, from README.md"
commands=$(awk '/^## Talk to it from any gRPC client/ { section = 1; next }
  section && /^## / { exit }
  section && /^```sh$/ { inside = 1; next }
  inside && /^```$/ { exit }
  inside' "$repo/README.md")
[[ -n $commands ]] || fail "no \`\`\`sh block under \"## Talk to it from any gRPC client\" in README.md"
printf '%s\n' "$commands"

echo "==> grpcurl, buf and grpcio from PyPI (pinned) in a venv"
python3 -m venv "$tmp/venv" || fail "python3 -m venv failed; install it: apt-get install python3-venv"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" \
  || fail "pip install -r examples/grpc-clients/requirements.txt failed"

start_dshd
bin_dir=$(dirname "$dshctl")
run_env=(env -u XDG_RUNTIME_DIR HOME="$tmp/user" DSH_SOCKET="$sock" PATH="$tmp/venv/bin:$bin_dir:$PATH")

echo "==> the README's commands, as written"
set +e
(cd "$tmp" && "${run_env[@]}" bash -euo pipefail -c "$commands") >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
cat "$tmp/client.out"
[[ $rc -eq 0 ]] || fail "the README's commands exited $rc"
out=$tmp/client.out
grep -qx 'dsh.v1.Agents' "$out" || fail "grpcurl list did not list dsh.v1.Agents"
[[ $(grep -c '"protocolVersion": 2' "$out") -eq 2 ]] || fail "grpcurl and buf did not both answer Daemon.Status"
[[ $(grep -c 'SERVING' "$out") -eq 2 ]] || fail "grpcurl's and grpcio's health checks did not both say SERVING"

echo "==> without -authority: refused, and dshd's log says why"
set +e
"${run_env[@]}" grpcurl -plaintext -unix "$sock" list >"$tmp/client.out" 2>"$tmp/client.err"
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "grpcurl without -authority succeeded: README's explanation is out of date"
grep -q 'RST_STREAM with error code: PROTOCOL_ERROR' "$tmp/client.out" "$tmp/client.err" \
  || fail "grpcurl without -authority did not fail with PROTOCOL_ERROR"
grep -q "DEBUG h2::server: malformed headers: malformed authority (b\"$sock\")" "$tmp/dshd.log" \
  || fail "dshd's default log has no DEBUG line for the refused stream"

stop_dshd
echo "grpc-clients: OK"
