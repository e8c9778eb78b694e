#!/usr/bin/env bash
# PreToolUse guard (matcher "Bash"): refuses shell commands that contain `rm -rf`.
# Exit 2 blocks the call; its stderr is the reason the model sees. Works with both dialects:
# Claude Code and Codex both put the shell command in .tool_input.command.
jq -r '.tool_input.command // empty' | grep -q 'rm -rf' && { echo "blocked: rm -rf" >&2; exit 2; }
exit 0
