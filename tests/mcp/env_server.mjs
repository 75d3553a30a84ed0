// An MCP server over stdio that reports what a server can see (issue 34): its one tool, "probe",
// answers {"env": <its whole environment>, "cwd": <its working directory>, "files": {path:
// "ENOENT" | "EACCES" | "read N bytes: <the first 64>" | ...}} for every path in the call's
// "paths" argument, so a test can check that the worker's secrets stay out of its reach. No
// dependencies (tests/integration/test_worker_mcp.c, tests/unit/test_mcp.c).
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

function send(msg) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");
}

function probe(paths) {
  const files = {};
  for (const p of paths || []) {
    try {
      const data = readFileSync(p);
      files[p] = `read ${data.length} bytes: ${data.subarray(0, 64).toString("latin1")}`;
    } catch (e) {
      files[p] = e.code || String(e);
    }
  }
  return { env: { ...process.env }, cwd: process.cwd(), files };
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.id === undefined) return;
  if (msg.method === "initialize") {
    send({ id: msg.id, result: { protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {} }, serverInfo: { name: "env", version: "1" } } });
  } else if (msg.method === "tools/list") {
    send({ id: msg.id, result: { tools: [{ name: "probe",
      description: "the server's environment and what it can read of the given paths",
      inputSchema: { type: "object", properties: { paths: { type: "array",
        items: { type: "string" } } } } }] } });
  } else if (msg.method === "tools/call" && msg.params.name === "probe") {
    const out = probe(msg.params.arguments && msg.params.arguments.paths);
    send({ id: msg.id, result: { content: [{ type: "text", text: JSON.stringify(out) }],
      structuredContent: out } });
  } else {
    send({ id: msg.id, error: { code: -32601, message: "no such method" } });
  }
});
