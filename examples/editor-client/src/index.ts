// A dshd client the way an editor extension would write one: find the user's socket, check the
// daemon, create an agent whose bash calls need approval, follow it in a second "window" (Watch)
// while a prompt streams its events, answer the approval request, cancel a second turn, and find
// the transcript.
//
//   node dist/index.js [--socket PATH] [--cwd DIR] [--prompt TEXT] [--deny] [SCRIPT.json]
//
// Exit codes (as dshctl): 0 the turn completed, the watcher saw every event the prompt saw, and the
// transcript was located; 1 the daemon could not be reached, refused a request, or the turn did not
// complete; 2 bad usage.

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import type { ProtoGrpcType as AgentsProto } from "./generated/agents";
import type { ProtoGrpcType as DaemonProto } from "./generated/daemon";
import type { ProtoGrpcType as PersistenceProto } from "./generated/persistence";
import type { ProtoGrpcType as ShellEnvProto } from "./generated/shell_env";
import type { AgentInfo__Output } from "./generated/dsh/v1/AgentInfo";
import type { AgentsClient } from "./generated/dsh/v1/Agents";
import type { ListVariablesResponse__Output } from "./generated/dsh/v1/ListVariablesResponse";
import type { LocateResponse__Output } from "./generated/dsh/v1/LocateResponse";
import type { Event__Output } from "./generated/dsh/v1/Event";
import type { StatusResponse__Output } from "./generated/dsh/v1/StatusResponse";

// The repository's own protos. An extension would ship a copy of proto/ inside its package instead.
const PROTO_ROOT = path.resolve(__dirname, "..", "..", "..", "proto");
const PROTO_FILES = [
  "dsh/v1/daemon.proto",
  "dsh/v1/agents.proto",
  "dsh/v1/shell_env.proto",
  "dsh/v1/persistence.proto",
];

// The protocol this client was written against (StatusResponse.protocol_version); it is bumped only
// on incompatible changes, so anything else means "upgrade one side", not "try anyway".
const PROTOCOL_VERSION = 2;

// Unary calls answer at once; a turn can take minutes, so Prompt gets no deadline.
const UNARY_DEADLINE_MS = 10_000;

// The keyless scripted model: one reply that runs bash, then a final text answer; then, for the
// second turn (the one this client cancels), a reply that takes a minute to come.
const DEFAULT_SCRIPT = JSON.stringify({
  replies: [
    {
      text: "Let me check which session I run in.",
      tool_calls: [
        {
          name: "bash",
          arguments: { command: "echo $DSH_SESSION_ID", description: "Print the session id" },
        },
      ],
    },
    { text: "Done: the session id is printed above." },
    { text: "This takes a while.", delay_ms: 60_000 },
  ],
});

const USAGE =
  "usage: node dist/index.js [--socket PATH] [--cwd DIR] [--prompt TEXT] [--deny] [SCRIPT.json]";

class UsageError extends Error {}

/** The same rule as dshctl: --socket, else $DSH_SOCKET, else the daemon's own default. */
function resolveSocket(explicit: string | undefined): string {
  const nonBlank = (v: string | undefined) => (v !== undefined && v.trim() !== "" ? v : undefined);
  const userHome = () => nonBlank(process.env.HOME) ?? os.homedir();
  const expand = (p: string) => {
    if (p === "~") return path.resolve(userHome());
    return path.resolve(p.startsWith("~/") ? path.join(userHome(), p.slice(2)) : p);
  };

  const given = explicit ?? nonBlank(process.env.DSH_SOCKET);
  if (given !== undefined) {
    return expand(given);
  }
  // A relative or blank XDG_RUNTIME_DIR is not trusted, exactly as dshd decides.
  const runtimeDir = nonBlank(process.env.XDG_RUNTIME_DIR);
  if (runtimeDir !== undefined && path.isAbsolute(runtimeDir)) {
    return path.join(runtimeDir, "dsh", "dshd.sock");
  }
  const home = expand(nonBlank(process.env.DSH_HOME) ?? "~/.dsh");
  return path.join(home, "run", "dshd.sock");
}

/** A promise for a unary call; grpc-js itself is callback-based. */
function unary<T>(start: (callback: grpc.requestCallback<T>) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    start((error, value) => (error ? reject(error) : resolve(value as T)));
  });
}

const deadline = (): grpc.CallOptions => ({ deadline: Date.now() + UNARY_DEADLINE_MS });

function isServiceError(e: unknown): e is grpc.ServiceError {
  return typeof e === "object" && e !== null && "code" in e && "details" in e;
}

/** A message a person can act on, with dshctl's wording for the connection failures. */
function describe(error: unknown, socket: string): string {
  if (!isServiceError(error)) {
    return error instanceof Error ? error.message : String(error);
  }
  // grpc-js reports a failed connect as UNAVAILABLE with the errno in the details.
  if (error.code === grpc.status.UNAVAILABLE && /ENOENT|ECONNREFUSED/.test(error.details)) {
    const hint = "start it with 'dshd' or 'systemctl --user start dshd'";
    return `no dshd is listening on ${socket}; ${hint}`;
  }
  if (error.code === grpc.status.UNAVAILABLE && /EACCES/.test(error.details)) {
    return `permission denied on ${socket}: the socket belongs to another user`;
  }
  return `${grpc.status[error.code]}: ${error.details}`;
}

/**
 * One line per event: `<prefix> <type> [seq=N] <data as JSON>`. Every stream carries the same
 * envelope (the session log's vocabulary: `turn/start`, `tool/call`, ...); streamed text and lag
 * markers are not logged, so they have no `seq`.
 */
function eventLine(prefix: string, ev: Event__Output): string {
  const seq = ev.seq !== undefined && ev.seq !== null ? ` seq=${ev.seq}` : "";
  return `${prefix} ${ev.type}${seq} ${ev.data_json}`;
}

/** The event's data object. */
function data(ev: Event__Output): Record<string, any> {
  return JSON.parse(ev.data_json) as Record<string, any>;
}

/** Runs a turn: streams its events, answers approval requests with `approve`, calls `onEvent`. */
async function runTurn(
  agents: AgentsClient,
  agentId: string,
  text: string,
  approve: (ev: Event__Output) => Promise<void>,
  onEvent: (ev: Event__Output) => void = () => {},
): Promise<{ kind: string; logged: string[] }> {
  const logged: string[] = [];
  let kind = "";
  const call = agents.Prompt({ agent_id: agentId, text });
  for await (const ev of call as AsyncIterable<Event__Output>) {
    console.log(eventLine("event", ev));
    if (ev.seq !== undefined && ev.seq !== null) {
      logged.push(`${ev.session_id}#${ev.seq}`);
    }
    if (ev.type === "approval/request") {
      await approve(ev);
    }
    onEvent(ev);
    // The last message is the prompted agent's turn/end (children's turns end before it).
    if (ev.type === "turn/end" && ev.session_id === agentId) {
      kind = data(ev).reason?.kind ?? "";
    }
  }
  return { kind, logged };
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    options: {
      socket: { type: "string" },
      cwd: { type: "string" },
      prompt: { type: "string", default: "Which session am I in?" },
      deny: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals.length > 1) {
    throw new UsageError("at most one script file");
  }
  const script =
    positionals[0] !== undefined ? fs.readFileSync(positionals[0], "utf8") : DEFAULT_SCRIPT;
  // An editor would pass its workspace folder here; the daemon wants an absolute directory.
  const cwd = path.resolve(values.cwd ?? process.cwd());
  const socket = resolveSocket(values.socket);

  const definition = protoLoader.loadSync(PROTO_FILES, {
    includeDirs: [PROTO_ROOT],
    // These must match the flags of proto-loader-gen-types in package.json, or the generated
    // types lie about the objects at run time.
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const proto = grpc.loadPackageDefinition(definition) as unknown as AgentsProto &
    DaemonProto &
    PersistenceProto &
    ShellEnvProto;
  const v1 = proto.dsh.v1;

  // grpc-js sends `:authority: localhost` for unix: targets, which dshd accepts. (gRPC-core
  // clients such as Python's grpcio need it set by hand; see docs/PROTOCOL.md.)
  const target = `unix://${socket}`;
  const daemon = new v1.Daemon(target, grpc.credentials.createInsecure());
  // One connection for every service, as an extension would keep for its lifetime.
  const shared = { channelOverride: daemon.getChannel() };
  const agents = new v1.Agents(target, grpc.credentials.createInsecure(), shared);
  const shellEnv = new v1.ShellEnv(target, grpc.credentials.createInsecure(), shared);
  const persistence = new v1.Persistence(target, grpc.credentials.createInsecure(), shared);

  try {
    const status = await unary<StatusResponse__Output>(
      (cb) => daemon.Status({}, deadline(), cb),
    );
    console.log(
      `status: dshd ${status.version} (protocol ${status.protocol_version}), pid ${status.pid}, ` +
        `home ${status.dsh_home}, persistence ${status.persistence}, agents ${status.agents}`,
    );
    if (status.protocol_version !== PROTOCOL_VERSION) {
      throw new Error(
        `dshd speaks protocol ${status.protocol_version}, this client protocol ${PROTOCOL_VERSION}`,
      );
    }

    const vars = await unary<ListVariablesResponse__Output>(
      (cb) => shellEnv.List({}, deadline(), cb),
    );
    console.log(`shell env: ${vars.variables.length} managed variables`);
    for (const v of vars.variables) {
      console.log(`  ${v.key}  (${v.contributor})  ${v.description}`);
    }

    // Every bash call of this agent waits for approval (an editor would show a dialog).
    const agent = await unary<AgentInfo__Output>((cb) =>
      agents.Create(
        { cwd, model: { provider: "scripted", script_json: script }, approval: "APPROVAL_POLICY_ALWAYS" },
        deadline(),
        cb,
      ),
    );
    const agentId = agent.agent_id;
    console.log(
      `agent created: ${agentId} (${agent.provider}, approval ${agent.approval}, cwd ${agent.header?.cwd ?? cwd})`,
    );

    // A second window following the agent and the children it spawns, from its first event.
    const watched: string[] = [];
    let watchedEnd: () => void = () => {};
    const watchedTurnEnded = new Promise<void>((resolve) => (watchedEnd = resolve));
    const watch = agents.Watch({ agent_id: agentId, descendants: true, from_seq: 0 });
    watch.on("data", (ev: Event__Output) => {
      console.log(eventLine("watch", ev));
      if (ev.seq !== undefined && ev.seq !== null) {
        watched.push(`${ev.session_id}#${ev.seq}`);
      }
      if (ev.type === "turn/end" && ev.session_id === agentId) {
        watchedEnd();
      }
    });
    // Cancelling the watch ends the stream with CANCELLED; anything else is worth a line.
    watch.on("error", (e: grpc.ServiceError) => {
      if (e.code !== grpc.status.CANCELLED) {
        console.error(`editor-client: watch: ${describe(e, socket)}`);
      }
    });

    // The person's answer; this example decides by flag.
    const approve = async (ev: Event__Output) => {
      const request = data(ev);
      const decision = values.deny ? "APPROVAL_DECISION_DENY" : "APPROVAL_DECISION_ALLOW";
      console.log(`approve: ${request.callId} (${request.command}) -> ${decision}`);
      await unary((cb) =>
        agents.Approve(
          { agent_id: ev.session_id, call_id: request.callId, decision, reason: "decided by the editor" },
          deadline(),
          cb,
        ),
      );
    };

    // The turn runs to completion in the daemon even if this stream goes away, so stopping it
    // means asking for it: Ctrl-C cancels (the turn then ends `aborted`), a second Ctrl-C quits.
    const cancel = () => agents.Cancel({ agent_id: agentId }, deadline(), () => {});
    process.once("SIGINT", cancel);
    let first;
    try {
      first = await runTurn(agents, agentId, values.prompt, approve);
    } finally {
      process.off("SIGINT", cancel);
    }
    await watchedTurnEnded;
    const same =
      watched.length === first.logged.length && watched.every((e, i) => e === first.logged[i]);
    console.log(`watch: ${watched.length} logged events, ${same ? "the same" : "NOT the same"} as the prompt's`);

    // A second turn, cancelled as soon as it starts (a "Stop" button).
    const second = await runTurn(agents, agentId, "and now something slow", approve, (ev) => {
      if (ev.type === "turn/start" && ev.session_id === agentId) {
        console.log("cancel: asking the daemon to cancel the running turn");
        agents.Cancel({ agent_id: agentId }, deadline(), () => {});
      }
    });
    console.log(`cancel: the second turn ended ${second.kind}`);
    watch.cancel();
    const endKind = first.kind;
    const watchMatched = same;

    const located = await unary<LocateResponse__Output>(
      (cb) => persistence.Locate({ session_id: agent.session_id }, deadline(), cb),
    );
    const where = located.location;
    console.log(
      where ? `locate: kind: ${where.kind} path: ${where.path}` : "locate: no per-session file",
    );

    // Close checkpoints the session, so the transcript is on disk when we look for it.
    await unary((cb) => agents.Close({ agent_id: agentId }, deadline(), cb));
    console.log(`agent closed: ${agentId}`);

    if (endKind !== "completed") {
      console.error(`editor-client: the turn ended ${endKind || "without turn/end"}`);
      return 1;
    }
    if (!watchMatched) {
      console.error("editor-client: the watcher did not see the events the prompt saw");
      return 1;
    }
    const isTranscript =
      where !== null &&
      where.kind === "jsonl" &&
      path.isAbsolute(where.path) &&
      where.path.endsWith(".jsonl") &&
      fs.existsSync(where.path);
    if (!isTranscript) {
      console.error("editor-client: the located path is not a JSONL transcript on disk");
      return 1;
    }
    return 0;
  } catch (error) {
    console.error(`editor-client: error: ${describe(error, socket)}`);
    return 1;
  } finally {
    daemon.getChannel().close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    const usage =
      error instanceof UsageError ||
      (error as { code?: string }).code?.startsWith("ERR_PARSE_ARGS") === true;
    const message = error instanceof Error ? error.message : String(error);
    console.error(`editor-client: error: ${message}`);
    if (usage) {
      console.error(USAGE);
    }
    process.exitCode = usage ? 2 : 1;
  },
);
