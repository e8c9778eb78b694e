#!/usr/bin/env bash
# Any event (matcher "*"): appends the payload as one JSON line to $AUDIT_LOG (default
# ${XDG_STATE_HOME:-$HOME/.local/state}/dsh/hook-audit.jsonl). The default lies outside every
# workspace: a sandboxed agent can write its workspace, and a log there could be replaced by a link
# that turns this hook's next append into a write of model-chosen text to any file of the user's.
# It refuses to write through a symbolic link or into anything but a regular file, and what it
# creates is private (umask 077). Exit 0 with no output: it never changes a decision; a refusal is
# exit 1, a non-blocking error the hook's record shows.
set -u
umask 077
log=${AUDIT_LOG:-${XDG_STATE_HOME:-$HOME/.local/state}/dsh/hook-audit.jsonl}
dir=$(dirname -- "$log")
refuse() { echo "audit-log: refusing to write $log: $1" >&2; exit 1; }
[ -L "$dir" ] && refuse "its directory $dir is a symbolic link"
mkdir -p -- "$dir" || refuse "cannot make $dir"
[ -L "$log" ] && refuse "it is a symbolic link"
[ -e "$log" ] && [ ! -f "$log" ] && refuse "it is not a regular file"
jq -c . >> "$log"
