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
