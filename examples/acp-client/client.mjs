// Drives `dshctl acp` with the official ACP client library (@agentclientprotocol/sdk), the way an
// editor does: spawn the agent, speak ACP over its stdin/stdout, answer permission requests.
//
//   node client.mjs --dshctl PATH --socket SOCK --cwd DIR
//
// initialize -> session/new -> session/prompt (text + a bash call, each asking permission:
// allowed, then rejected) -> cancel during `sleep 30` -> close -> load (replays) -> list -> fork
// -> close, plus a malformed line the bridge must survive; a Zed-style set_mode before the first
// prompt; a read and an edit, whose permission request, live update and replay carry the diff;
// the editor's MCP servers (stdio and HTTP ones used in a prompt). Every check is an assertion: exit 0 means
// all held. Prints one line per step.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { parseArgs } from "node:util";

import { PROTOCOL_VERSION, client, ndJsonStream } from "@agentclientprotocol/sdk";

const { values } = parseArgs({
  options: {
    dshctl: { type: "string" },
    socket: { type: "string" },
    cwd: { type: "string" },
  },
});
const { dshctl, socket, cwd } = values;
assert.ok(dshctl && socket && cwd, "usage: client.mjs --dshctl PATH --socket SOCK --cwd DIR");

/** Starts `dshctl acp` with a scripted model; returns the process and its ACP stream. */
function bridge(name, script, extra = []) {
  const path = join(cwd, `${name}.json`);
  writeFileSync(path, JSON.stringify(script));
  const child = spawn(dshctl, ["--socket", socket, "acp", "--script", path, ...extra], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  return { child, raw: child.stdin, stream: () => ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)) };
}

/** Waits for a child to exit; returns its exit code. */
function exited(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.on("exit", (code) => resolve(code));
  });
}

const updates = new Map(); // sessionId -> updates, in arrival order
const seen = (sessionId) => updates.get(sessionId) ?? [];
// A running command's output arrives as `tool_call_update`s with content and no status (the output
// so far); how a short command's output is cut into them varies, so traces leave them out.
const isLiveOutput = (u) => u.sessionUpdate === "tool_call_update" && u.status === undefined;
// The session's time of last activity (session_info_update) and its slash commands
// (available_commands_update) are not part of a turn's trace.
const aside = new Set(["session_info_update", "available_commands_update"]);
const trace = (list) =>
  list.filter((u) => !isLiveOutput(u) && !aside.has(u.sessionUpdate)).map((u) =>
    u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update"
      ? `${u.sessionUpdate} ${u.toolCallId} ${u.status ?? "-"}`
      : `${u.sessionUpdate} ${u.content?.text ?? ""}`,
  );
const texts = (list, kind) =>
  list.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join("");
let answers = []; // what the person answers to each permission request, in order
const asked = [];
const askedCalls = []; // the tool calls of those requests, whole

const app = client({ name: "dsh-acp-example" })
  .onNotification("session/update", ({ params }) => {
    const list = updates.get(params.sessionId) ?? [];
    list.push(params.update);
    updates.set(params.sessionId, list);
  })
  .onRequest("session/request_permission", ({ params }) => {
    asked.push(params.toolCall.toolCallId);
    askedCalls.push(params.toolCall);
    const kinds = params.options.map((o) => o.kind);
    assert.deepEqual(kinds, ["allow_once", "allow_always", "reject_once"]);
    const kind = answers.shift() ?? "reject_once";
    const option = params.options.find((o) => o.kind === kind);
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  });

// 1. A text + bash turn with permission requests, then close, load, list, close.
const marker = join(cwd, "rejected-marker");
const main = bridge("turn", {
  replies: [
    { text: "Checking.", tool_calls: [{ id: "c1", name: "bash", arguments: { command: "echo id=$DSH_SESSION_ID" } }] },
    { tool_calls: [{ id: "c2", name: "bash", arguments: { command: `touch ${marker}` } }] },
    { text: "Done." },
  ],
}, ["--approval", "always"]);
// A malformed line first: the bridge answers it with an error and goes on serving.
main.raw.write("{this is not json\n");
await app.connectWith(main.stream(), async (ctx) => {
  const init = await ctx.request("initialize", {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: {},
    clientInfo: { name: "dsh-acp-example", version: "0.1.0" },
  });
  assert.equal(init.protocolVersion, 1);
  assert.equal(init.agentCapabilities.loadSession, true);
  console.log(`initialize: ${init.agentInfo.name} ${init.agentInfo.version}, protocol ${init.protocolVersion}`);

  const session = await ctx.request("session/new", { cwd, mcpServers: [] });
  const id = session.sessionId;
  assert.equal(session.modes.currentModeId, "always");
  console.log(`session/new: ${id} transcript ${session._meta.dsh.transcript.path}`);

  answers = ["allow_once", "reject_once"];
  const done = await ctx.request("session/prompt", { sessionId: id, prompt: [{ type: "text", text: "go" }] });
  assert.equal(done.stopReason, "end_turn");
  const live = [...seen(id)];
  assert.deepEqual(asked, ["c1", "c2"]);
  assert.deepEqual(trace(live), [
    "agent_message_chunk Checking.",
    "tool_call c1 pending",
    "tool_call_update c1 in_progress",
    "tool_call_update c1 in_progress",
    "tool_call_update c1 completed",
    "tool_call c2 pending",
    "tool_call_update c2 in_progress",
    "tool_call_update c2 failed",
    "agent_message_chunk Done.",
  ]);
  const call = live.find((u) => u.sessionUpdate === "tool_call");
  assert.equal(call.kind, "execute");
  assert.equal(call.title, "echo id=$DSH_SESSION_ID");
  const output = live.find((u) => u.status === "completed").content[0].content.text;
  assert.ok(output.includes(`id=${id}`), `DSH_SESSION_ID is not the ACP session id: ${output}`);
  for (const u of live.filter(isLiveOutput)) {
    assert.ok(output.startsWith(u.content[0].content.text), `live output is not the output so far: ${JSON.stringify(u)}`);
  }
  assert.ok(!existsSync(marker), "the rejected command ran");
  const denied = live.find((u) => u.status === "failed").content[0].content.text;
  assert.ok(denied.includes("denied"), `the model is not told: ${denied}`);
  console.log(`session/prompt: ${done.stopReason}, ${live.length} updates in order, DSH_SESSION_ID = sessionId, allow ran, reject did not`);

  await ctx.request("session/close", { sessionId: id });
  updates.delete(id);
  const loaded = await ctx.request("session/load", { sessionId: id, cwd, mcpServers: [] });
  const replayed = seen(id);
  assert.equal(texts(replayed, "user_message_chunk"), "go");
  assert.equal(texts(replayed, "agent_message_chunk"), texts(live, "agent_message_chunk"));
  const calls = (list) => list.filter((u) => u.sessionUpdate === "tool_call").map((u) => `${u.toolCallId} ${u.title}`);
  assert.deepEqual(calls(replayed), calls(live));
  const ends = (list) => list.filter((u) => u.status === "completed" || u.status === "failed").map((u) => `${u.toolCallId} ${u.status}`);
  assert.deepEqual(ends(replayed), ends(live));
  assert.equal(loaded.modes.currentModeId, "always");
  console.log(`session/load: replayed ${replayed.length} updates, the same messages and tool calls`);

  const listed = await ctx.request("session/list", { cwd });
  assert.ok(listed.sessions.some((s) => s.sessionId === id), "session/list does not show the session");
  console.log(`session/list: ${listed.sessions.length} session(s), ${id} among them`);

  // Fork (ACP's unstable session/fork): a new session from this one's completed turns.
  assert.deepEqual(init.agentCapabilities.sessionCapabilities.fork, {});
  const fork = await ctx.request("session/fork", { sessionId: id, cwd, mcpServers: [] });
  assert.notEqual(fork.sessionId, id);
  assert.equal(fork.modes.currentModeId, "always");
  await assert.rejects(
    ctx.request("session/fork", { sessionId: id, cwd: "/", mcpServers: [] }),
    (e) => e.code === -32602 && e.message.startsWith("cwd: "),
  );
  const afterFork = await ctx.request("session/list", { cwd });
  assert.deepEqual(
    afterFork.sessions.map((s) => s.sessionId).sort(),
    [...listed.sessions.map((s) => s.sessionId), fork.sessionId].sort(),
    "a fork in another cwd was refused, yet left a session behind",
  );
  await ctx.request("session/close", { sessionId: fork.sessionId });
  console.log(`session/fork: ${fork.sessionId} from ${id}; a fork elsewhere is refused and leaves nothing`);

  await ctx.request("session/close", { sessionId: id });
  const closed = await ctx.request("session/list", { cwd });
  assert.equal(closed.sessions.find((s) => s.sessionId === id)._meta.dsh.live, false);
  console.log("session/close: closed (stored, no longer live)");

  await assert.rejects(ctx.request("session/fly", {}), (e) => e.code === -32601);
  console.log("unknown method: -32601, still serving");
});
main.child.stdin.end();
assert.equal(await exited(main.child), 0, "the bridge did not exit 0 when its stdin closed");
console.log("stdin closed: exit 0");

// 2. Cancel during `sleep 30`.
const slow = bridge("cancel", {
  replies: [{ tool_calls: [{ id: "s", name: "bash", arguments: { command: "sleep 30" } }] }, { text: "never" }],
});
await app.connectWith(slow.stream(), async (ctx) => {
  await ctx.request("initialize", { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
  const { sessionId } = await ctx.request("session/new", { cwd, mcpServers: [] });
  const turn = ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "wait" }] });
  while (!seen(sessionId).some((u) => u.status === "in_progress")) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const asked = Date.now();
  await ctx.notify("session/cancel", { sessionId });
  const ended = await turn;
  assert.equal(ended.stopReason, "cancelled");
  console.log(`session/cancel: ${ended.stopReason} after ${Date.now() - asked} ms`);
});
slow.child.stdin.end();
assert.equal(await exited(slow.child), 0);

// 3. As Zed does with a default mode: session/set_mode right after session/new, before any
// prompt; the session keeps its id, and a second bridge process prompts it again.
const zed = bridge("zed", { replies: [{ text: "hi" }, { text: "again" }] });
let zedId;
await app.connectWith(zed.stream(), async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  zedId = (await ctx.request("session/new", { cwd, mcpServers: [] })).sessionId;
  await ctx.request("session/set_mode", { sessionId: zedId, modeId: "never" });
  const first = await ctx.request("session/prompt", { sessionId: zedId, prompt: [{ type: "text", text: "hi" }] });
  assert.equal(first.stopReason, "end_turn");
  assert.ok(seen(zedId).some((u) => u.sessionUpdate === "current_mode_update" && u.currentModeId === "never"));
});
zed.child.stdin.end();
assert.equal(await exited(zed.child), 0);
const next = bridge("zed-next", { replies: [{ text: "again" }] });
await app.connectWith(next.stream(), async (ctx) => {
  await ctx.request("initialize", { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
  const again = await ctx.request("session/prompt", { sessionId: zedId, prompt: [{ type: "text", text: "again" }] });
  assert.equal(again.stopReason, "end_turn");
  assert.ok(texts(seen(zedId), "agent_message_chunk").includes("[dsh: this session was no longer live"));
});
next.child.stdin.end();
assert.equal(await exited(next.child), 0);
console.log(`session/set_mode before the first prompt: ${zedId} kept its id; another bridge process prompted it`);
// 4. The file tools: a read, then an edit that asks permission. The request shows the change
// (kind edit, diff content, location); the call's update carries the diff live and on replay.
const file = join(cwd, "notes.txt");
writeFileSync(file, "one\ntwo\nthree\n");
const edits = bridge("edit", {
  replies: [
    { tool_calls: [{ id: "r", name: "read", arguments: { file_path: file } }] },
    { tool_calls: [{ id: "e", name: "edit", arguments: { file_path: file, old_string: "two", new_string: "TWO" } }] },
    { text: "Edited." },
  ],
}, ["--approval", "always"]);
await app.connectWith(edits.stream(), async (ctx) => {
  await ctx.request("initialize", { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
  const { sessionId } = await ctx.request("session/new", { cwd, mcpServers: [] });
  answers = ["allow_once"];
  askedCalls.length = 0;
  const done = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "edit" }] });
  assert.equal(done.stopReason, "end_turn");
  assert.equal(readFileSync(file, "utf8"), "one\nTWO\nthree\n");
  const diff = { type: "diff", path: file, oldText: "one\ntwo\nthree\n", newText: "one\nTWO\nthree\n" };
  assert.equal(askedCalls.length, 1, "only the edit asks");
  assert.equal(askedCalls[0].kind, "edit");
  assert.deepEqual(askedCalls[0].content, [diff]);
  assert.deepEqual(askedCalls[0].locations, [{ path: file, line: 2 }]);
  const kinds = seen(sessionId).filter((u) => u.sessionUpdate === "tool_call").map((u) => `${u.toolCallId} ${u.kind}`);
  assert.deepEqual(kinds, ["r read", "e edit"]);
  const changes = (list) => list.filter((u) => u.locations !== undefined && u.toolCallId === "e");
  const live = changes(seen(sessionId));
  assert.equal(live.length, 1, JSON.stringify(seen(sessionId)));
  assert.deepEqual(live[0].content, [diff]);
  assert.deepEqual(live[0].locations, [{ path: file, line: 2 }]);
  await ctx.request("session/close", { sessionId });
  updates.delete(sessionId);
  await ctx.request("session/load", { sessionId, cwd, mcpServers: [] });
  assert.deepEqual(changes(seen(sessionId)), live, "the replay shows another diff");
  console.log("read and edit: kinds read/edit; the permission request, the live update and the replay carry the diff");
});
edits.child.stdin.end();
assert.equal(await exited(edits.child), 0);
// 5. The editor's MCP servers: the reference server (from this example's packages) over stdio
// and, started here, over streamable HTTP, are the session's, and their tools are used in the
// prompt; an SSE one is named as not connected.
const everything = new URL("node_modules/.bin/mcp-server-everything", import.meta.url).pathname;
const port = await new Promise((resolve) => {
  const probe = createServer().listen(0, "127.0.0.1", () => {
    const { port } = probe.address();
    probe.close(() => resolve(port));
  });
});
const web = spawn(everything, ["streamableHttp"], { env: { ...process.env, PORT: String(port) }, stdio: "ignore" });
for (let connected = false; !connected; ) {
  connected = await new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1", () => resolve(true)).on("error", () => resolve(false));
    socket.unref();
  });
  if (!connected) await new Promise((resolve) => setTimeout(resolve, 50));
}
const mcp = bridge("mcp", {
  replies: [
    {
      tool_calls: [
        { id: "m", name: "mcp__everything__echo", arguments: { message: "from the ACP SDK" } },
        { id: "w", name: "mcp__web__echo", arguments: { message: "over HTTP" } },
      ],
    },
    { text: "Echoed." },
  ],
});
await app.connectWith(mcp.stream(), async (ctx) => {
  await ctx.request("initialize", { protocolVersion: PROTOCOL_VERSION, clientCapabilities: {} });
  const session = await ctx.request("session/new", {
    cwd,
    mcpServers: [
      { name: "everything", command: everything, args: ["stdio"], env: [] },
      { type: "http", name: "web", url: `http://127.0.0.1:${port}/mcp`, headers: [] },
      { type: "sse", name: "legacy", url: "http://127.0.0.1:9/sse", headers: [] },
    ],
  });
  assert.deepEqual(session._meta.dsh.mcpServersNotConnected, ["legacy"]);
  const { sessionId } = session;
  const done = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "echo" }] });
  assert.equal(done.stopReason, "end_turn");
  for (const [id, text] of [["m", "Echo: from the ACP SDK"], ["w", "Echo: over HTTP"]]) {
    const shown = JSON.stringify(seen(sessionId).filter((u) => u.toolCallId === id));
    assert.ok(shown.includes(text), shown);
    assert.ok(shown.includes('"status":"completed"'), shown);
  }
  console.log("mcpServers: the stdio and HTTP servers' echoes reached the prompt; the SSE one is named not connected");
});
mcp.child.stdin.end();
assert.equal(await exited(mcp.child), 0);
web.kill();
console.log("acp-client: all checks passed");
