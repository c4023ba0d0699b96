// An ACP client nobody in this project wrote, against `acpx serve-agent`: the TypeScript SDK's
// ClientSideConnection (npm @agentclientprotocol/sdk, installed into peers/node/ by
// scripts/install-interop-peer.sh).
//
// Usage: node scripts/peers/ts_client_serve_agent.mjs <expected.json> <command> [args...]
//
// Spawns the command (an `acpx serve-agent SESSION --fast`), initializes, creates a session,
// sends each prompt of expected.json in order and checks what comes back: the updates' kinds
// and texts, the tool call titles, the permission questions (answered with their first
// option) and the stop reasons. Then a prompt that is not the next recorded one, which must
// fail with JSON-RPC -32602 naming the prompt expected. Prints one JSON line with what it saw
// and exits 0 when everything matched, 1 otherwise.
//
// expected.json: {"agentName": "...", "turns": [{"prompt": "...", "stopReason": "...",
//   "reply": "...", "toolTitles": ["..."], "permissions": N, "updateKinds": ["..."]}]}
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const nodePrefix = path.resolve(here, "../../peers/node");
const require = createRequire(path.join(nodePrefix, "package.json"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const [expectedPath, command, ...args] = process.argv.slice(2);
if (!expectedPath || !command) {
  console.error("usage: ts_client_serve_agent.mjs <expected.json> <command> [args...]");
  process.exit(2);
}
const expected = JSON.parse(readFileSync(expectedPath, "utf8"));

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

let current = null;
const client = {
  async requestPermission(params) {
    current.permissions.push(params.toolCall?.title ?? null);
    return { outcome: { outcome: "selected", optionId: params.options[0].optionId } };
  },
  async sessionUpdate(params) {
    const u = params.update;
    current.updateKinds.push(u.sessionUpdate);
    if (u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text") {
      current.reply += u.content.text;
    }
    if (u.sessionUpdate === "tool_call") {
      current.toolTitles.push(u.title);
    }
  },
};
const connection = new acp.ClientSideConnection(() => client, stream);

const problems = [];
const seen = { turns: [] };
try {
  const init = await connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  });
  seen.agentName = init.agentInfo?.name ?? null;
  if (expected.agentName && seen.agentName !== expected.agentName) {
    problems.push(`initialize: agent ${seen.agentName}, expected ${expected.agentName}`);
  }
  const session = await connection.newSession({ cwd: process.cwd(), mcpServers: [] });
  for (const [i, turn] of expected.turns.entries()) {
    current = { reply: "", toolTitles: [], permissions: [], updateKinds: [] };
    const response = await connection.prompt({
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: turn.prompt }],
    });
    current.stopReason = response.stopReason;
    seen.turns.push(current);
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    if (current.stopReason !== turn.stopReason) problems.push(`turn ${i + 1}: stopReason ${current.stopReason}, expected ${turn.stopReason}`);
    if (current.reply !== turn.reply) problems.push(`turn ${i + 1}: reply ${JSON.stringify(current.reply)}, expected ${JSON.stringify(turn.reply)}`);
    if (!same(current.toolTitles, turn.toolTitles)) problems.push(`turn ${i + 1}: tool calls ${JSON.stringify(current.toolTitles)}, expected ${JSON.stringify(turn.toolTitles)}`);
    if (current.permissions.length !== turn.permissions) problems.push(`turn ${i + 1}: ${current.permissions.length} permission questions, expected ${turn.permissions}`);
    if (!same(current.updateKinds, turn.updateKinds)) problems.push(`turn ${i + 1}: updates ${JSON.stringify(current.updateKinds)}, expected ${JSON.stringify(turn.updateKinds)}`);
  }
  // A prompt that is not the next recorded one: a JSON-RPC error that names the one expected.
  try {
    await connection.prompt({ sessionId: session.sessionId, prompt: [{ type: "text", text: "not in the recording" }] });
    problems.push("an unrecorded prompt was answered");
  } catch (e) {
    seen.wrongPrompt = { code: e.code, message: e.message };
    if (e.code !== -32602) problems.push(`an unrecorded prompt failed with ${e.code}, expected -32602`);
  }
} catch (e) {
  problems.push(`the connection failed: ${e?.message ?? JSON.stringify(e)}`);
}
seen.problems = problems;
console.log(JSON.stringify(seen));
child.stdin.end();
child.kill();
process.exit(problems.length ? 1 : 0);
