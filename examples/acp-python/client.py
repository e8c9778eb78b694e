"""Drive `dshctl acp` with the Python ACP client library (agent-client-protocol), a second client
independent of the Node one: initialize, session/new, a prompt with text and a bash call, and a
cancel during `sleep 30`. Every check is an assertion; exit 0 means all held.

    python client.py DSHCTL SOCKET CWD
"""

import asyncio
import json
import os
import sys

import acp
from acp.schema import AllowedOutcome, RequestPermissionResponse, TextContentBlock


class Editor:
    """The client side: records updates, allows every permission request once."""

    def __init__(self):
        self.updates = {}

    async def session_update(self, session_id, update, **kwargs):
        self.updates.setdefault(session_id, []).append(update)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    def of(self, session_id):
        return self.updates.get(session_id, [])


def script(path, replies):
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"replies": replies}, f)
    return path


def text(update):
    return getattr(getattr(update, "content", None), "text", "")


async def main(dshctl, socket, cwd):
    editor = Editor()
    turn = script(os.path.join(cwd, "py-turn.json"), [
        {"text": "Checking.", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo id=$DSH_SESSION_ID"}}]},
        {"text": "Done."},
    ])
    async with acp.spawn_agent_process(editor, dshctl, "--socket", socket, "acp", "--script", turn) as (conn, process):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        assert init.protocol_version == 1, init
        assert init.agent_capabilities.load_session is True, init
        print(f"initialize: {init.agent_info.name} {init.agent_info.version}, protocol {init.protocol_version}")
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        sid = session.session_id
        print(f"session/new: {sid}")
        done = await conn.prompt(session_id=sid, prompt=[TextContentBlock(type="text", text="go")])
        assert done.stop_reason == "end_turn", done
        # A running command's output arrives as tool_call_updates with content and no status
        # (the output so far); how a short command's output is cut into them varies. The
        # session's time of last activity (session_info_update) and its slash commands
        # (available_commands_update) are not part of the turn.
        updates = [
            u for u in editor.of(sid)
            if not (u.session_update == "tool_call_update" and u.status is None)
            and u.session_update not in ("session_info_update", "available_commands_update")
        ]
        kinds = [u.session_update for u in updates]
        assert kinds == ["agent_message_chunk", "tool_call", "tool_call_update", "tool_call_update", "agent_message_chunk"], kinds
        output = text(updates[3].content[0])
        assert f"id={sid}" in output, output
        assert "".join(text(u) for u in editor.of(sid) if u.session_update == "agent_message_chunk") == "Checking.Done."
        print(f"session/prompt: {done.stop_reason}, updates {kinds}, DSH_SESSION_ID = sessionId")

    slow = script(os.path.join(cwd, "py-cancel.json"), [
        {"tool_calls": [{"id": "s", "name": "bash", "arguments": {"command": "sleep 30"}}]},
        {"text": "never"},
    ])
    async with acp.spawn_agent_process(editor, dshctl, "--socket", socket, "acp", "--script", slow) as (conn, process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=cwd, mcp_servers=[])).session_id
        turn = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[TextContentBlock(type="text", text="wait")]))
        while not any(getattr(u, "status", None) == "in_progress" for u in editor.of(sid)):
            await asyncio.sleep(0.01)
        asked = asyncio.get_running_loop().time()
        await conn.cancel(session_id=sid)
        ended = await turn
        assert ended.stop_reason == "cancelled", ended
        elapsed = asyncio.get_running_loop().time() - asked
        print(f"session/cancel: {ended.stop_reason} after {elapsed * 1000:.0f} ms")
    print("acp-python: all checks passed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
