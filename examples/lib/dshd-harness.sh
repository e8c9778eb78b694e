# Shared by the example clients' test.sh scripts: a real dshd on a private temporary home and socket.
# Source it after `set -euo pipefail`, with the script's arguments:
#
#   source "$here/../lib/dshd-harness.sh" NAME [DSHD] [DSHCTL]
#
# It sets `repo`, `dshd`, `dshctl` (empty when there is none: the daemon is then stopped with
# SIGTERM), `tmp` (0700, removed on exit), `home`, `sock`, and defines `fail`, `start_dshd` and
# `stop_dshd`. `fail` prints $tmp/client.out, $tmp/client.err and $tmp/dshd.log.

harness_name=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dshd=$(realpath "${2:-$repo/target/debug/dshd}")
dshctl=${3:-$(dirname "$dshd")/dshctl}
if [[ -x $dshctl ]]; then dshctl=$(realpath "$dshctl"); else dshctl=; fi
[[ -x $dshd ]] || { echo "test.sh: no dshd binary at $dshd (cargo build --bin dshd)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsh-$harness_name.XXXXXX")
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

# Starts dshd on $sock with a clean environment, as the Rust end-to-end tests use (no outer DSH_*,
# no systemd or runtime dir), and waits until it answers.
start_dshd() {
  echo "==> start dshd on $sock"
  mkdir -p "$tmp/user" "$tmp/work"
  # No RUST_LOG: dshd logs with its own default filter, as a user would see it.
  local unset_env=(-u XDG_RUNTIME_DIR -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID -u RUST_LOG) name
  while IFS= read -r name; do unset_env+=(-u "$name"); done < <(compgen -e | grep '^DSH_' || true)
  (cd "$tmp" && exec env "${unset_env[@]}" HOME="$tmp/user" \
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
}

# Stops dshd gracefully and checks it exited 0 and removed its socket.
stop_dshd() {
  echo "==> stop dshd"
  if [[ -n $dshctl ]]; then
    "$dshctl" --socket "$sock" shutdown
  else
    kill -TERM "$pid"
  fi
  local rc
  set +e
  wait "$pid"
  rc=$?
  set -e
  pid=
  [[ $rc -eq 0 ]] || fail "dshd exited $rc"
  [[ ! -e $sock ]] || fail "dshd left its socket behind"
}
