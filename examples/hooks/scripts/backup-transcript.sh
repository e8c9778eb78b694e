#!/usr/bin/env bash
# Stop hook: copies the session's transcript to $BACKUP_DIR (default
# ${XDG_STATE_HOME:-$HOME/.local/state}/dsh/transcript-backups), outside every workspace.
# transcript_path is "" (Claude Code) or null (Codex) when the backend keeps no per-session file,
# and the file may not exist yet (it is written at checkpoints), hence `// empty` and `-f`.
# It refuses a backup that is a symbolic link, and writes a private temporary file that is renamed
# over the backup, so a link planted in between is replaced, never written through.
set -u
umask 077
input=$(cat)
T=$(printf '%s' "$input" | jq -r '.transcript_path // empty')
id=$(printf '%s' "$input" | jq -r '.session_id' | tr -c 'A-Za-z0-9._\n-' '_')
[ -n "$T" ] && [ -f "$T" ] || exit 0
dir=${BACKUP_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/dsh/transcript-backups}
dest="$dir/$id.jsonl"
refuse() { echo "backup-transcript: refusing to write $dest: $1" >&2; exit 1; }
[ -L "$dir" ] && refuse "its directory $dir is a symbolic link"
mkdir -p -- "$dir" || refuse "cannot make $dir"
[ -L "$dest" ] && refuse "it is a symbolic link"
tmp=$(mktemp -- "$dir/.$id.XXXXXX") || refuse "cannot make a temporary file in $dir"
cp -- "$T" "$tmp" && mv -fT -- "$tmp" "$dest" || { rm -f -- "$tmp"; exit 1; }
