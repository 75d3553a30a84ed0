// What both A2A client scripts share (a2a_client.mjs on @a2a-js/sdk 1.x, a2a_client_v03.mjs on
// 0.3.x): the authenticated fetch, a client per gateway, checks and polling. Copied beside each
// script, so that its import of the SDK resolves in that script's node_modules.
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";

export const EXT = "https://docs.kedi-lang.org/a2a/extensions/structured-output/v1/";

// argv: BASE_URL TOKEN [CASE...]; A2A_OTHER: a second gateway of the same cluster.
export async function connect() {
  const [base, token, ...only] = process.argv.slice(2);
  const other = process.env.A2A_OTHER;
  const authFetch = (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("Authorization", `Bearer ${token}`);
    return fetch(url, { ...init, headers });
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    }),
  );
  const client = await factory.createFromUrl(base);
  const client2 = other ? await factory.createFromUrl(other) : null;
  return { base, token, only, other, authFetch, client, client2 };
}

export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls GetTask until the task's state is one of states (or ms pass); returns the task.
export async function waitState(client, id, states, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const t = await client.getTask({ id });
    if (states.includes(t.status.state) || Date.now() > end) return t;
    await sleep(100);
  }
}

// Runs the named cases (all when none is named), one "ok CASE" line each.
export async function run(cases, only) {
  for (const name of only.length ? only : Object.keys(cases)) {
    const t0 = Date.now();
    const detail = await cases[name]();
    console.log(`ok ${name} (${Date.now() - t0} ms): ${detail}`);
  }
}

// Checks the text deltas of one stream ([{ mid, text }], the status messages' ids and texts in
// arrival order) against the task's answer: one episode (the message id names it and its seq,
// "<task>-part-<history_version>-<attempt>-<seq>"), seqs strictly increasing (each part once,
// in order), and the texts, concatenated, exactly the answer (nothing missed). Returns a
// summary.
export function checkDeltas(who, deltas, answer) {
  check(deltas.length > 0, `${who}: text deltas`);
  const episodes = new Set(deltas.map((d) => d.mid.replace(/-\d+$/, "")));
  check(episodes.size === 1, `${who}: one episode: ${[...episodes]}`);
  const seqs = deltas.map((d) => Number(d.mid.match(/-(\d+)$/)[1]));
  const bad = seqs.findIndex((s, i) => i > 0 && s <= seqs[i - 1]);
  check(bad < 0, `${who}: each delta once, in order: seq ${seqs[bad]} after ${seqs[bad - 1]}`);
  const text = deltas.map((d) => d.text).join("");
  check(text === answer, `${who}: the deltas are the answer exactly (${text.length} of ${answer.length} bytes): ${text.slice(0, 80)}`);
  return `${who} ${deltas.length} deltas (seq ${seqs[0]}..${seqs[seqs.length - 1]})`;
}

// Drains an async iterable of stream events into events (mapped by f); returns events.
export async function drain(iterable, events, f = (e) => e) {
  for await (const ev of iterable) events.push(f(ev));
  return events;
}

// A webhook on loopback for push notification deliveries (the test cluster allow-lists
// 127.0.0.0/8). got holds one entry per delivery answered 200: its delivery id, headers and
// statusUpdate. The first `refuse` deliveries are answered 503 and their ids kept in refused.
// forTask(id) is that task's deliveries; until(cond) polls cond for up to ms.
export async function webhook({ refuse = 0 } = {}) {
  const http = await import("node:http");
  const got = [];
  const refused = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const u = JSON.parse(body).statusUpdate;
      if (refuse-- > 0) {
        refused.push(req.headers["x-a2a-delivery-id"]);
        res.writeHead(503);
        res.end();
        return;
      }
      got.push({
        id: req.headers["x-a2a-delivery-id"],
        auth: req.headers["authorization"],
        token: req.headers["x-a2a-notification-token"],
        type: req.headers["content-type"],
        signature: req.headers["webhook-signature"],
        task: u.taskId,
        state: u.status.state,
        mid: u.metadata?.chatfleetDeliveryId,
      });
      res.writeHead(200);
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const until = async (cond, ms = 30000) => {
    const end = Date.now() + ms;
    while (!cond() && Date.now() < end) await sleep(50);
    return cond();
  };
  return {
    url: `http://127.0.0.1:${server.address().port}/hook`,
    got,
    refused,
    until,
    forTask: (id) => got.filter((g) => g.task === id),
    close: () => server.close(),
  };
}

// Waits for a task's deliveries to end with COMPLETED, lets any stray one arrive, and checks
// that the task got WORKING then COMPLETED, each exactly once, with the config's token and
// authentication (null: none) and a Standard Webhooks signature. Returns a summary.
export async function checkDelivered(hook, who, taskId, token, auth) {
  const done = () => hook.forTask(taskId).some((g) => g.state === "TASK_STATE_COMPLETED");
  check(await hook.until(done), `${who}: COMPLETED delivered: ${JSON.stringify(hook.forTask(taskId))}`);
  await sleep(700); // two pusher polls: nothing more may come
  const got = hook.forTask(taskId);
  const ids = got.map((g) => g.id);
  check(ids.length === 2 && ids[0] === `${taskId}/TASK_STATE_WORKING` && ids[1] === `${taskId}/TASK_STATE_COMPLETED`,
    `${who}: WORKING then COMPLETED, each once: ${ids}`);
  for (const g of got) {
    check(g.token === token && g.auth === auth, `${who}: the config's token and authentication: ${JSON.stringify(g)}`);
    check(typeof g.signature === "string" && g.signature.startsWith("v1,"), `${who}: signed: ${g.signature}`);
  }
  return `${who} ${taskId}: ${ids.length} deliveries`;
}
