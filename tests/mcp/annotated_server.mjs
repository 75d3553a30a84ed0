// A scripted MCP server over stdio whose tools carry the annotations plan mode reads
// (MCP 2025-06-18 ToolAnnotations): "look" says readOnlyHint: true, "change" readOnlyHint:
// false with destructiveHint: true, and "plain" says nothing (no annotations: not read-only).
// tools/call of any of them returns "<name> done with <arguments>". No dependencies
// (tests/integration/test_effort_plan_mode.c).
import { createInterface } from "node:readline";

const schema = { type: "object", properties: { x: { type: "string" } } };
const tools = [
  { name: "look", description: "reads something", inputSchema: schema,
    annotations: { readOnlyHint: true } },
  { name: "change", description: "changes something", inputSchema: schema,
    annotations: { readOnlyHint: false, destructiveHint: true } },
  { name: "plain", description: "says nothing of what it does", inputSchema: schema },
];

function send(msg) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.id === undefined) return; // notifications
  if (msg.method === "initialize") {
    send({ id: msg.id, result: { protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "annotated", version: "1" } } });
  } else if (msg.method === "tools/list") {
    send({ id: msg.id, result: { tools } });
  } else if (msg.method === "tools/call") {
    send({ id: msg.id, result: { content: [{ type: "text",
      text: `${msg.params.name} done with ${JSON.stringify(msg.params.arguments)}` }] } });
  } else {
    send({ id: msg.id, error: { code: -32601, message: "no such method" } });
  }
});
