// A dshd client the way an editor extension would write one: find the user's socket, check the
// daemon, create an agent, run one prompt while streaming its events, and find the transcript.
//
//   node dist/index.js [--socket PATH] [--cwd DIR] [--prompt TEXT] [SCRIPT.json]
//
// Exit codes (as dshctl): 0 the turn completed and the transcript was located; 1 the daemon could
// not be reached, refused a request, or the turn did not complete; 2 bad usage.

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
import type { ListVariablesResponse__Output } from "./generated/dsh/v1/ListVariablesResponse";
import type { LocateResponse__Output } from "./generated/dsh/v1/LocateResponse";
import type { StatusResponse__Output } from "./generated/dsh/v1/StatusResponse";
import type { TurnEvent__Output } from "./generated/dsh/v1/TurnEvent";

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
const PROTOCOL_VERSION = 1;

// Unary calls answer at once; a turn can take minutes, so Prompt gets no deadline.
const UNARY_DEADLINE_MS = 10_000;

// The keyless scripted model: one reply that runs bash, then a final text answer.
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
  ],
});

const USAGE = "usage: node dist/index.js [--socket PATH] [--cwd DIR] [--prompt TEXT] [SCRIPT.json]";

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

function eventLine(ev: TurnEvent__Output): string {
  const kind = ev.event ?? "unknown";
  const body = ev.event ? ev[ev.event] : null;
  // text_delta is not logged, so it has no sequence number of its own.
  const seq = kind === "text_delta" ? "" : ` seq=${ev.seq}`;
  return `event ${kind}${seq} ${JSON.stringify(body)}`;
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    options: {
      socket: { type: "string" },
      cwd: { type: "string" },
      prompt: { type: "string", default: "Which session am I in?" },
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

    const agent = await unary<AgentInfo__Output>((cb) =>
      agents.Create({ cwd, model: { provider: "scripted", script_json: script } }, deadline(), cb),
    );
    const agentId = agent.agent_id;
    console.log(`agent created: ${agentId} (${agent.provider}, cwd ${agent.header?.cwd ?? cwd})`);

    // The turn runs to completion in the daemon even if this stream goes away, so stopping it
    // means asking for it: Ctrl-C cancels (the turn then ends `aborted`), a second Ctrl-C quits.
    const cancel = () => agents.Cancel({ agent_id: agentId }, deadline(), () => {});
    process.once("SIGINT", cancel);
    let endKind = "";
    try {
      const call = agents.Prompt({ agent_id: agentId, text: values.prompt });
      for await (const ev of call as AsyncIterable<TurnEvent__Output>) {
        console.log(eventLine(ev));
        if (ev.turn_ended) {
          endKind = ev.turn_ended.reason?.kind ?? "";
        }
      }
    } finally {
      process.off("SIGINT", cancel);
    }

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
      console.error(`editor-client: the turn ended ${endKind || "without turn_ended"}`);
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
