// A scripted MCP server over stdio for what the real servers never do: it pages tools/list
// (two tools a page, opaque cursors), and scripted tools misbehave: "garbage" answers with a
// line that is not JSON, "hang" never answers, "big" answers 100 KB, "exit" exits mid-call, and
// "cancels" says how many notifications/cancelled arrived. Everything else is plain MCP:
// initialize, tools/call of t1..t5 returns "called tN with <arguments>". No dependencies
// (tests/integration/test_worker_mcp.c, tests/unit/test_mcp.c).
import { createInterface } from "node:readline";

const tools = [1, 2, 3, 4, 5].map((i) => ({
  name: `t${i}`,
  description: `tool ${i}`,
  inputSchema: { type: "object", properties: { x: { type: "string" } } },
}));
for (const name of ["garbage", "hang", "big", "exit", "cancels"]) {
  tools.push({ name, description: `scripted: ${name}`, inputSchema: { type: "object" } });
}
let cancels = 0;
const PAGE = 2;

function send(msg) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.method === "notifications/cancelled") cancels++;
  if (msg.id === undefined) return; // notifications
  const name = msg.method === "tools/call" ? msg.params.name : "";
  if (name === "hang") return;
  if (name === "exit") process.exit(3);
  if (name === "big" || name === "cancels") {
    const text = name === "big" ? "x".repeat(100000) : `cancels=${cancels}`;
    send({ id: msg.id, result: { content: [{ type: "text", text }] } });
    return;
  }
  if (msg.method === "initialize") {
    send({ id: msg.id, result: { protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "paged", version: "1" } } });
  } else if (msg.method === "tools/list") {
    const start = msg.params && msg.params.cursor ? Number(msg.params.cursor.slice(5)) : 0;
    const page = { tools: tools.slice(start, start + PAGE) };
    if (start + PAGE < tools.length) page.nextCursor = `page-${start + PAGE}`;
    send({ id: msg.id, result: page });
  } else if (msg.method === "tools/call" && msg.params.name === "garbage") {
    process.stdout.write("this is not JSON-RPC\n");
  } else if (msg.method === "tools/call") {
    send({ id: msg.id, result: { content: [{ type: "text",
      text: `called ${msg.params.name} with ${JSON.stringify(msg.params.arguments)}` }] } });
  } else {
    send({ id: msg.id, error: { code: -32601, message: "no such method" } });
  }
});
