// An MCP server on stdio that misbehaves as an attacker's would, to hold
// askloop to what it promises about the MCP servers it is given: plain Node,
// JSON-RPC lines written by hand (no SDK), so it can send what no SDK would.
//
// What it does wrong is chosen with HOSTILE, a comma-separated list:
//
//   hang-initialize  never answers `initialize`
//   hang-initialize-once  the first process started in HOSTILE_DIR never
//                    answers `initialize`; every later one serves
//   hang-list        answers `initialize`, never `tools/list`
//   huge-list        answers `tools/list` with 20,000 tools (over 16 MiB)
//   ignore-stdin     keeps running when its standard input closes
//   ignore-sigterm   keeps running on SIGTERM (only SIGKILL ends it)
//
// Whatever HOSTILE says, it lists these tools, each misbehaving when called:
//
//   echo        answers at once: "echo: <message>"
//   hang        never answers
//   huge        answers with one text block of 17 MiB
//   deep        answers with structured content nested 2,000 levels deep
//   deep_ask    asks the person with a schema nested 2,000 levels deep
//   ask_forever asks the person a question after every answer, for ever
//   ask_burst   sends 30 questions at once, then answers with the replies
//   flood       sends 200,000 log notifications, then answers "flooded"
//
// HOSTILE_LOG names a file it appends one JSON line to per event: its start
// (with its pid), each message it reads, and each reply to its own
// requests, so a test can tell what reached it and whether it still runs.
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";

const modes = new Set((process.env.HOSTILE || "").split(",").filter(Boolean));
const logFile = process.env.HOSTILE_LOG;
const log = (event) => {
  if (logFile) appendFileSync(logFile, `${JSON.stringify({ pid: process.pid, ...event })}\n`);
};

if (modes.has("hang-initialize-once")) {
  const marker = join(process.env.HOSTILE_DIR || ".", "hostile-started-once");
  if (existsSync(marker)) {
    modes.delete("hang-initialize-once");
  } else {
    writeFileSync(marker, String(process.pid));
    modes.add("hang-initialize");
  }
}

log({ event: "start", modes: [...modes] });

if (modes.has("ignore-sigterm")) {
  process.on("SIGTERM", () => log({ event: "sigterm-ignored" }));
}
// Kept alive by a timer when its input ends, if asked to be.
if (modes.has("ignore-stdin")) setInterval(() => {}, 1 << 30);

// askloop may close the pipe while this writes (a flood, a huge answer).
process.stdout.on("error", () => {});
const write = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);
const answer = (id, result) => write({ jsonrpc: "2.0", id, result });
const text = (t) => ({ content: [{ type: "text", text: t }] });

const nested = (depth, leaf) => {
  let value = leaf;
  for (let i = 0; i < depth; i += 1) value = { type: "object", properties: { inner: value } };
  return value;
};

const tool = (name, description) => ({
  name,
  description,
  inputSchema: { type: "object", properties: { message: { type: "string" } } },
});

const TOOLS = [
  tool("echo", "Says the message back."),
  tool("hang", "Never answers."),
  tool("huge", "Answers with 17 MiB."),
  tool("deep", "Answers with content nested 2,000 levels deep."),
  tool("deep_ask", "Asks with a schema nested 2,000 levels deep."),
  tool("ask_forever", "Asks the person again after every answer."),
  tool("ask_burst", "Asks 30 questions at once."),
  tool("flood", "Sends 200,000 log notifications, then answers."),
];

// The server's own requests (elicitations) waiting for their reply.
let nextId = 1;
const waiting = new Map();
const ask = (message, requestedSchema) =>
  new Promise((resolve) => {
    const id = `hostile-${nextId++}`;
    waiting.set(id, resolve);
    write({ jsonrpc: "2.0", id, method: "elicitation/create", params: { message, requestedSchema } });
  });
const form = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

const calls = {
  echo: async (args) => text(`echo: ${args.message ?? ""}`),
  hang: () => new Promise(() => {}),
  huge: async () => text("x".repeat(17 * 1024 * 1024)),
  deep: async () => ({ ...text("deep"), structuredContent: nested(2000, { leaf: true }) }),
  deep_ask: async () => {
    const reply = await ask("Fill in the deep form.", nested(2000, { type: "string" }));
    return text(`deep_ask got ${JSON.stringify(reply)}`);
  },
  ask_forever: async () => {
    for (let n = 1; ; n += 1) await ask(`Question ${n}?`, form);
  },
  ask_burst: async () => {
    const replies = await Promise.all(Array.from({ length: 30 }, (_, n) => ask(`Burst question ${n + 1}?`, form)));
    return text(`burst replies: ${JSON.stringify(replies)}`);
  },
  flood: async () => {
    for (let n = 0; n < 200000; n += 1) {
      write({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: `log line ${n}` } });
    }
    return text("flooded");
  },
};

const handle = async (message) => {
  const { id, method, params } = message;
  if (method === undefined) {
    // A reply to one of its own requests.
    log({ event: "reply", id, result: message.result, error: message.error });
    const resolve = waiting.get(id);
    waiting.delete(id);
    if (resolve) resolve(message.result ?? { error: message.error });
    return;
  }
  if (id === undefined) return;
  if (method === "initialize") {
    if (modes.has("hang-initialize")) return;
    answer(id, {
      protocolVersion: params?.protocolVersion ?? "2025-11-25",
      capabilities: { tools: {}, logging: {} },
      serverInfo: { name: "hostile", version: "1.0.0" },
    });
  } else if (method === "tools/list") {
    if (modes.has("hang-list")) return;
    if (modes.has("huge-list")) {
      const description = "A tool among very many. ".repeat(40);
      const tools = Array.from({ length: 20000 }, (_, n) => tool(`tool_${n}`, description));
      answer(id, { tools });
      return;
    }
    answer(id, { tools: TOOLS });
  } else if (method === "tools/call") {
    const run = calls[params?.name];
    if (!run) {
      write({ jsonrpc: "2.0", id, error: { code: -32602, message: `no tool ${params?.name}` } });
      return;
    }
    answer(id, await run(params.arguments ?? {}));
  } else if (method === "ping") {
    answer(id, {});
  } else {
    write({ jsonrpc: "2.0", id, error: { code: -32601, message: `no method ${method}` } });
  }
};

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    log({ event: "unreadable", bytes: line.length });
    return;
  }
  log({ event: "read", method: message.method, id: message.id, params: message.method?.startsWith("notifications/") ? message.params : undefined });
  handle(message).catch((err) => log({ event: "error", message: String(err) }));
});
lines.on("close", () => {
  log({ event: "stdin-closed" });
  if (!modes.has("ignore-stdin")) process.exit(0);
});
