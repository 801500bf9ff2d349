// The official TypeScript ACP client (@agentclientprotocol/sdk, stable v1) driving a
// real `tether acp`: every session method, a close during a running Bash call, and a
// list after a restart. Run by test_ts_client.py; prints one JSON object a line for
// each step it took, with what it saw, and asserts nothing itself.
//
//   node ts_client.mjs PLAN_JSON
//
// PLAN_JSON: {"packages": the folder whose node_modules holds the SDK, "agent": [argv
// of `tether acp`], "quick": dir, "hold": dir, "marker": text}. Sessions in `quick`
// run a Bash call that prints and ends; the call in `hold` (the script decides by its
// cwd) ignores SIGTERM and has a child and a grandchild in a session of its own, every
// process of it with `marker` in its command line.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const plan = JSON.parse(process.argv[2]);
// The SDK as the folder of package.json `packages` installs it (its default entry:
// stable ACP v1).
const where = createRequire(join(plan.packages, "package.json"));
const { PROTOCOL_VERSION, RequestError, client, methods, ndJsonStream } = await import(
  pathToFileURL(where.resolve("@agentclientprotocol/sdk")).href
);
const session = methods.agent.session;

function emit(step, fields) {
  process.stdout.write(`${JSON.stringify({ step, ...fields })}\n`);
}

/** What a `session/update` frame says, in brief. */
function brief(frame) {
  const u = frame.params.update;
  const said = { sessionId: frame.params.sessionId, kind: u.sessionUpdate };
  if (u.status) said.status = u.status;
  if (u.toolCallId) said.toolCallId = u.toolCallId;
  if (u.content?.type === "text") said.text = u.content.text;
  const out = Array.isArray(u.content) ? u.content : [];
  const text = out.map((c) => c.content?.text ?? "").join("");
  if (text) said.output = text;
  if (u.rawOutput?.code) said.code = u.rawOutput.code;
  return said;
}

/**
 * The processes (zombies aside: they only wait to be reaped) whose command line holds
 * `marker`, as pid and command line. Found by command line, not by a pid the command
 * writes: a Bash call runs in a pid namespace of its own.
 */
function holding(marker) {
  const found = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8");
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const zombie = stat.slice(stat.lastIndexOf(")") + 2)[0] === "Z";
      if (cmdline.includes(marker) && !zombie) {
        found.push({ pid: Number(name), cmdline: cmdline.split("\0").join(" ") });
      }
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/**
 * Start `tether acp`, connect the SDK's client to its stdio and run `op` with the
 * client context and the frames received (every incoming message, in order); then
 * end the agent's stdin and wait for it to exit.
 */
async function withAgent(op) {
  const agent = spawn(plan.agent[0], plan.agent.slice(1), {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const stream = ndJsonStream(
    Writable.toWeb(agent.stdin),
    Readable.toWeb(agent.stdout),
  );
  const frames = [];
  const waiters = new Set();
  const recorded = {
    writable: stream.writable,
    readable: stream.readable.pipeThrough(
      new TransformStream({
        transform(message, controller) {
          frames.push(message);
          for (const w of [...waiters]) w();
          controller.enqueue(message);
        },
      }),
    ),
  };
  const permissions = [];
  const app = client({ name: "tether-ts-test" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      permissions.push(params.toolCall.toolCallId);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .onNotification(methods.client.session.update, () => {});
  const waitFor = (check, ms = 20000) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiters.delete(poke);
        reject(new Error(`nothing seen within ${ms} ms`));
      }, ms);
      const poke = () => {
        if (check()) {
          clearTimeout(timer);
          waiters.delete(poke);
          resolve();
        }
      };
      waiters.add(poke);
      poke();
    });
  try {
    return await app.connectWith(recorded, (ctx) =>
      op({ ctx, frames, permissions, waitFor }),
    );
  } finally {
    agent.stdin.end();
    const exited = once(agent, "exit");
    const timer = setTimeout(() => agent.kill("SIGKILL"), 15000);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * Send one request and emit what came of it: its result or error, and the updates
 * received between sending it and its answer (`beforeAnswer`), in order.
 */
async function call(agent, step, method, params, extra = {}) {
  const mark = agent.frames.length;
  const said = { method };
  try {
    said.result = await agent.ctx.request(method, params);
  } catch (error) {
    if (!(error instanceof RequestError)) throw error;
    said.error = { code: error.code, message: error.message, data: error.data };
  }
  const seen = agent.frames.slice(mark);
  const answer = seen.findIndex((f) => f.method === undefined);
  said.beforeAnswer = seen
    .slice(0, answer < 0 ? seen.length : answer)
    .filter((f) => f.method === "session/update")
    .map(brief);
  emit(step, { ...said, ...extra });
  return said;
}

async function sessionMethods(agent) {
  const ready = await call(agent, "initialize", methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  const open = async (cwd) =>
    (await agent.ctx.request(session.new, { cwd, mcpServers: [] })).sessionId;
  const prompted = await open(plan.quick);
  emit("new", { sessionId: prompted, sdkProtocolVersion: PROTOCOL_VERSION });
  const text = [{ type: "text", text: "run it" }];
  await call(
    agent,
    "prompt",
    session.prompt,
    { sessionId: prompted, prompt: text },
    { permissions: agent.permissions },
  );
  const loadOf = (sessionId) => ({ sessionId, cwd: plan.quick, mcpServers: [] });
  await call(agent, "load prompted", session.load, loadOf(prompted));
  const quiet = await open(plan.quick);
  await call(agent, "load unprompted", session.load, loadOf(quiet));
  await call(agent, "list", session.list, {});
  await call(agent, "resume", session.resume, loadOf(prompted));
  await call(agent, "close", session.close, { sessionId: quiet });
  await call(agent, "delete", session.delete, { sessionId: quiet });
  await call(agent, "list after delete", session.list, {});
  await call(agent, "delete unknown", session.delete, {
    sessionId: "never-created",
  });
  return { ready, prompted };
}

async function closeDuringBash(agent) {
  const { sessionId } = await agent.ctx.request(session.new, {
    cwd: plan.hold,
    mcpServers: [],
  });
  const order = [];
  const prompt = agent.ctx
    .request(session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "go" }],
    })
    .then((answer) => order.push(`prompt ${answer.stopReason}`));
  const updates = () =>
    agent.frames
      .filter((f) => f.method === "session/update" && f.params.sessionId === sessionId)
      .map(brief);
  await agent.waitFor(() => updates().some((u) => u.output?.includes("started")));
  const aliveBefore = holding(plan.marker);
  await agent.ctx.request(session.close, { sessionId });
  const aliveAtAnswer = holding(plan.marker);
  order.push("close");
  await prompt;
  emit("close during bash", {
    sessionId,
    order,
    aliveBefore,
    aliveAtAnswer,
    updates: updates(),
  });
}

async function afterRestart(agent, prompted) {
  await agent.ctx.request(methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  await call(agent, "list after restart", session.list, {});
  await call(agent, "resume after restart", session.resume, {
    sessionId: prompted,
    cwd: plan.quick,
    mcpServers: [],
  });
}

try {
  const { prompted } = await withAgent(async (agent) => {
    const opened = await sessionMethods(agent);
    await closeDuringBash(agent);
    return opened;
  });
  await withAgent((agent) => afterRestart(agent, prompted));
  emit("done", {});
} catch (error) {
  emit("failed", { error: String(error?.stack ?? error) });
  process.exitCode = 1;
}
