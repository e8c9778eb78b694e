#!/usr/bin/env bash
# Stop hook: copies the session's transcript to $BACKUP_DIR (default ~/.transcript-backups).
# transcript_path is "" (Claude Code) or null (Codex) when the backend keeps no per-session file,
# and the file may not exist yet (it is written at checkpoints), hence `// empty` and `-f`.
set -u
input=$(cat)
T=$(printf '%s' "$input" | jq -r '.transcript_path // empty')
id=$(printf '%s' "$input" | jq -r '.session_id' | tr -c 'A-Za-z0-9._\n-' '_')
[ -n "$T" ] && [ -f "$T" ] || exit 0
dir=${BACKUP_DIR:-$HOME/.transcript-backups}
mkdir -p "$dir" && cp "$T" "$dir/$id.jsonl"
