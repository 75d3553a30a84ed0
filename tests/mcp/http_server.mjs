// The real @modelcontextprotocol/server-everything behind the SDK's real Streamable HTTP
// transport, on 127.0.0.1 only (the package's own HTTP entry listens on every interface):
//   node http_server.mjs NPM_PREFIX PORT TOKEN
// One session per initialize; every request must carry "Authorization: Bearer TOKEN" (401
// otherwise), so a test shows the configured headers are sent. GET /healthz answers 200 once
// it listens. Every request is logged on stderr as "mcp-http METHOD session=... protocol=..."
// (tests/integration/test_worker_mcp.c).
import { createServer as createHttp } from "node:http";
import { randomUUID } from "node:crypto";

const [prefix, port, token] = process.argv.slice(2);
const base = `${prefix}/node_modules/@modelcontextprotocol`;
const { createServer } = await import(`${base}/server-everything/dist/server/index.js`);
const { StreamableHTTPServerTransport } = await import(
  `${base}/sdk/dist/esm/server/streamableHttp.js`);

const sessions = new Map();

createHttp(async (req, res) => {
  if (req.method === "GET" && req.url === "/healthz") {
    res.writeHead(200).end("ok");
    return;
  }
  const sid = req.headers["mcp-session-id"];
  console.error(`mcp-http ${req.method} session=${sid || "-"}` +
    ` protocol=${req.headers["mcp-protocol-version"] || "-"}`);
  if (req.headers.authorization !== `Bearer ${token}`) {
    res.writeHead(401).end();
    return;
  }
  let body = "";
  for await (const chunk of req) body += chunk;
  const parsed = body ? JSON.parse(body) : undefined;
  let transport = sid ? sessions.get(sid) : undefined;
  if (sid && !transport) {
    res.writeHead(404).end();
    return;
  }
  if (!transport) {
    const { server } = createServer();
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    await server.connect(transport);
  }
  await transport.handleRequest(req, res, parsed);
}).listen(Number(port), "127.0.0.1");
