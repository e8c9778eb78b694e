#!/usr/bin/env bash
# Any event (matcher "*"): appends the payload as one JSON line to $AUDIT_LOG
# (default <project>/.hook-audit.jsonl). Exit 0 with no output: never changes a decision.
log=${AUDIT_LOG:-${CLAUDE_PROJECT_DIR:-$PWD}/.hook-audit.jsonl}
mkdir -p "$(dirname "$log")"
jq -c . >> "$log"
