// Drives chatfleet's A2A endpoint with the official JavaScript client (@a2a-js/sdk).
//   node a2a_client.mjs BASE_URL TOKEN [CASE...]
// Prints one "ok CASE ..." line per passing case and exits non-zero on the first failure.
// Cases: card, text, structured, invalid_schema_json, stream, cancel, structured_cancel.
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";

const [base, token, ...only] = process.argv.slice(2);
const EXT = "https://docs.kedi-lang.org/a2a/extensions/structured-output/v1/";
const STATE = { WORKING: 2, COMPLETED: 3, FAILED: 4, CANCELED: 5 };
const ROLE_USER = 1;
const BIG = "9007199254740993"; // 2^53 + 1: a double would read 9007199254740992

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

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

let n = 0;
function message(text, extra = {}) {
  return {
    messageId: `m-${process.pid}-${++n}`,
    role: ROLE_USER,
    parts: [{ content: { $case: "text", value: text } }],
    ...extra,
  };
}

function structured(text, schemaJson, extra = {}) {
  return {
    message: message(text, { extensions: [EXT] }),
    configuration: { acceptedOutputModes: ["application/json"] },
    metadata: { kediStructuredOutput: { version: 1, resultEncoding: "json-utf8", schemaJson, ...extra } },
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitState(client, id, states, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const t = await client.getTask({ id });
    if (states.includes(t.status.state) || Date.now() > end) return t;
    await sleep(100);
  }
}

const client = await factory.createFromUrl(base);

const cases = {
  async card() {
    const card = await client.getAgentCard();
    const ext = card.capabilities.extensions.find((e) => e.uri === EXT);
    check(ext, "the card declares the structured-output extension");
    const p = ext.params;
    check(p.mode === "request-schema", "mode request-schema");
    check(p.schemaDialect === "http://json-schema.org/draft-07/schema#", "Draft-07 dialect");
    check(p.maxSchemaBytes === 16384, "maxSchemaBytes is JSONSTRICT_SCHEMA_MAX_BYTES");
    check(p.resultArtifactName === "kedi-structured-output", "artifact name");
    check(p.resultEncodings.includes("json-utf8") && p.resultEncodings.includes("protobuf-value"), "encodings");
    check(card.capabilities.streaming === true, "streaming");
    // The gateway's own address (its listen address, scheme included), not a guess.
    check(card.supportedInterfaces[0].url === `${base.replace(/\/$/, "")}/a2a`, "interface url");
    return `interface ${card.supportedInterfaces[0].url}`;
  },

  async text() {
    const task = await client.sendMessage({ message: message("hello from a2a") });
    check(task.status.state === STATE.COMPLETED, `text task completed (state ${task.status.state})`);
    const text = task.artifacts[0].parts[0].content.value;
    check(text.includes("Echo: hello from a2a."), `the answer echoes: ${text}`);
    const again = await client.getTask({ id: task.id });
    check(again.contextId === task.contextId && again.status.state === STATE.COMPLETED, "GetTask");
    const next = await client.sendMessage({ message: message("second turn", { contextId: task.contextId }) });
    check(next.contextId === task.contextId && next.id !== task.id, "a second task in the context");
    return `task ${task.id} context ${task.contextId}`;
  },

  async structured() {
    const schema = `{"type":"object","properties":{"id":{"const":${BIG}}},"required":["id"],"additionalProperties":false}`;
    const task = await client.sendMessage(structured("give me the id", schema));
    check(task.status.state === STATE.COMPLETED, `structured task completed (state ${task.status.state}, ${JSON.stringify(task.status.message ?? task.metadata)})`);
    check(task.artifacts.length === 1, "exactly one artifact");
    const a = task.artifacts[0];
    check(a.name === "kedi-structured-output" && a.extensions.includes(EXT), "artifact name and extension");
    const part = a.parts[0];
    check(part.content.$case === "raw" && part.mediaType === "application/json", "one raw json part");
    const raw = Buffer.from(part.content.value).toString("utf8");
    check(raw === `{"id":${BIG}}`, `the raw JSON keeps the integer exactly: ${raw}`);
    const again = await client.getTask({ id: task.id });
    const raw2 = Buffer.from(again.artifacts[0].parts[0].content.value).toString("utf8");
    check(raw2 === raw, "GetTask returns the same bytes");
    return raw;
  },

  async invalid_schema_json() {
    // schemaJson is authoritative: invalid text fails even with a valid legacy schema.
    const req = structured("never runs", '{"type":', { schema: { type: "object" } });
    let err = null;
    try {
      await client.sendMessage(req);
    } catch (e) {
      err = e;
    }
    check(err, "an invalid schemaJson is refused, never falling back to schema");
    // Exactly: JSON-RPC invalid params, naming the schemaJson field (not schema).
    const code = err.envelopeCode ?? err.code;
    check(code === -32602, `invalid params (-32602), got ${code}: ${err.message}`);
    const field = err.data?.field ?? "";
    check(field === "params.metadata.kediStructuredOutput.schemaJson", `the error names schemaJson, got "${field}"`);
    return `${code} ${field}`;
  },

  async stream() {
    const events = [];
    for await (const ev of client.sendMessageStream({ message: message("[sim:slow 20] [sim:words 12] stream me") })) {
      events.push(ev.payload);
    }
    check(events[0].$case === "task", "the first event is the task");
    const deltas = events.filter((e) => e.$case === "statusUpdate" && e.value.status.message);
    const last = events[events.length - 1];
    check(last.$case === "statusUpdate" && last.value.status.state === STATE.COMPLETED, "ends completed");
    check(events.some((e) => e.$case === "artifactUpdate"), "an artifact update");
    // Deltas are grouped by episode (a retried generation starts over); each episode's
    // text is a prefix of the final answer, which the artifact carries whole.
    const answer = events.find((e) => e.$case === "artifactUpdate").value.artifact.parts[0].content.value;
    check(answer.startsWith("Echo: stream me."), `the answer: ${answer}`);
    const episodes = new Map();
    for (const e of deltas) {
      const m = e.value.status.message;
      const ep = m.messageId.replace(/-\d+$/, "");
      episodes.set(ep, (episodes.get(ep) ?? "") + m.parts[0].content.value);
    }
    for (const text of episodes.values()) {
      check(answer.startsWith(text), `streamed text is a prefix of the answer: ${text}`);
    }
    return `${events.length} events, ${deltas.length} text deltas`;
  },

  async cancel() {
    const task = await client.sendMessage({
      message: message("[sim:slow 100] [sim:words 300] cancel me"),
      configuration: { returnImmediately: true },
    });
    check(task.status.state !== STATE.COMPLETED, "returned before the turn ended");
    await waitState(client, task.id, [STATE.WORKING]);
    await sleep(300);
    const canceled = await client.cancelTask({ id: task.id });
    check(canceled.status.state === STATE.CANCELED, `canceled (state ${canceled.status.state})`);
    let again = null;
    try {
      await client.cancelTask({ id: task.id });
    } catch (e) {
      again = e;
    }
    check(again, "a second cancel of a finished task is refused");
    return `task ${task.id}`;
  },

  async structured_cancel() {
    const req = structured("[sim:stall] never answers", '{"type":"object"}');
    req.configuration.returnImmediately = true;
    const task = await client.sendMessage(req);
    await waitState(client, task.id, [STATE.WORKING]);
    const canceled = await client.cancelTask({ id: task.id });
    check(canceled.status.state === STATE.CANCELED, "canceled");
    const t = await waitState(client, task.id, [STATE.CANCELED, STATE.FAILED, STATE.COMPLETED]);
    check(t.status.state === STATE.CANCELED, `the receipt says canceled (state ${t.status.state})`);
    check(t.artifacts.length === 0, "no artifact for a canceled request");
    return `task ${task.id}`;
  },
};

for (const name of only.length ? only : Object.keys(cases)) {
  const t0 = Date.now();
  const detail = await cases[name]();
  console.log(`ok ${name} (${Date.now() - t0} ms): ${detail}`);
}
