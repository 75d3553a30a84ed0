// Drives chatfleet's A2A endpoint with the official JavaScript client (@a2a-js/sdk 1.x, the
// v1.0 protocol).
//   A2A_OTHER=BASE_URL_2 node a2a_client.mjs BASE_URL TOKEN [CASE...]
// BASE_URL_2 is a second gateway of the same cluster. Prints one "ok CASE ..." line per passing
// case and exits non-zero on the first failure. A line "kill gateway 0" asks the test driving
// the script to kill -9 the gateway at BASE_URL (resubscribe_after_kill).
// Cases: card, text, structured, invalid_schema_json, output_modes, stream, cancel,
// structured_cancel, cancel_durable, list_pages, jsonrpc, push, push_inline, push_inline_invalid,
// push_inline_limit, resubscribe_after_kill, stream_early_parts, subscribe_mid_episode,
// subscribe_queued, files.
import { EXT, check, checkDelivered, checkDeltas, connect, drain, run, sleep, waitState, webhook } from "./a2a_common.mjs";

const { base, only, other, authFetch, client, client2 } = await connect();
const STATE = { SUBMITTED: 1, WORKING: 2, COMPLETED: 3, FAILED: 4, CANCELED: 5 };
const ROLE_USER = 1;
const BIG = "9007199254740993";
const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"; // a 1x1 RGB PNG // 2^53 + 1: a double would read 9007199254740992

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

// One raw JSON-RPC POST to BASE_URL/a2a (no client: notifications and batches); returns the
// HTTP status and the parsed body (null when there is none).
async function rpc(body) {
  const r = await authFetch(`${base.replace(/\/$/, "")}/a2a`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

// ListTasks through the client. Its request encoder writes an unset status as "UNRECOGNIZED",
// so the unfiltered default (TASK_STATE_UNSPECIFIED, 0) is passed explicitly.
const listTasks = (c, params) => c.listTasks({ status: 0, ...params });

// The text deltas of a stream's events (working status messages), for checkDeltas.
const deltasOf = (events) =>
  events
    .filter((e) => e.$case === "statusUpdate" && e.value.status.state === STATE.WORKING && e.value.status.message)
    .map((e) => ({ mid: e.value.status.message.messageId, text: e.value.status.message.parts[0].content.value }));

// A stream's events end with one artifact, the answer, then the final COMPLETED status.
function checkEnd(who, events, answer) {
  const last = events[events.length - 1];
  check(last.$case === "statusUpdate" && last.value.status.state === STATE.COMPLETED, `${who} ends completed`);
  const arts = events.filter((e) => e.$case === "artifactUpdate");
  check(arts.length === 1 && arts[0].value.artifact.parts[0].content.value === answer, `${who}: one artifact, the answer`);
}

async function codeOf(promise) {
  try {
    await promise;
  } catch (e) {
    return { code: e.envelopeCode ?? e.code, data: e.data, message: e.message };
  }
  return null;
}

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

  async files() {
    // A text file and a PNG as raw parts: stored as the caller's uploads, linked to the chat, the
    // text inlined for the model (the sim echoes it); a file by URL is refused, naming the part.
    const png = Buffer.from(PNG_1X1, "base64");
    const note = "h\u00e9llo from an attached file";
    const parts = [
      { content: { $case: "text", value: "read the attachment" } },
      { content: { $case: "raw", value: new Uint8Array(Buffer.from(note, "utf8")) }, mediaType: "text/plain", filename: "note.txt" },
      { content: { $case: "raw", value: new Uint8Array(png) }, mediaType: "image/png", filename: "dot.png" },
    ];
    const task = await client.sendMessage({ message: { ...message(""), parts } });
    check(task.status.state === STATE.COMPLETED, `completed (state ${task.status.state})`);
    const answer = task.artifacts[0].parts[0].content.value;
    check(answer.includes(note), `the model saw the text file: ${answer}`);
    const r = await authFetch(`${base.replace(/\/$/, "")}/api/v2/chats/${task.contextId}`);
    const chat = await r.json();
    const files = chat.files.map((f) => `${f.name}:${f.mime_type}:${f.size_bytes}`).sort();
    const want = [`dot.png:image/png:${png.length}`, `note.txt:text/plain:${Buffer.byteLength(note)}`];
    check(JSON.stringify(files) === JSON.stringify(want), `the chat's files: ${JSON.stringify(files)}`);
    const byUrl = [parts[0], { content: { $case: "url", value: "http://127.0.0.1:9/x.png" }, mediaType: "image/png" }];
    const e = await codeOf(client.sendMessage({ message: { ...message(""), parts: byUrl } }));
    check(e && e.code === -32602 && e.data?.field === "params.message.parts[1].url", `a URL is refused: ${JSON.stringify(e)}`);
    const lying = [parts[0], { content: { $case: "raw", value: new Uint8Array(png) }, mediaType: "application/pdf" }];
    const e2 = await codeOf(client.sendMessage({ message: { ...message(""), parts: lying } }));
    check(e2 && e2.code === -32602 && e2.data?.field === "params.message.parts[1]", `PNG bytes as a PDF are refused: ${JSON.stringify(e2)}`);
    return `files ${files.join(" ")}`;
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
    // schemaJson is authoritative: invalid text fails the task (the extension: invalid schemas
    // fail the task rather than reaching a model), never falling back to the valid schema.
    const task = await client.sendMessage(structured("never runs", '{"type":', { schema: { type: "object" } }));
    check(task.status.state === STATE.FAILED, `the task failed (state ${task.status.state})`);
    const so = task.metadata?.kediStructuredOutput ?? {};
    check(so.code === "invalid_schema", `code invalid_schema, got ${JSON.stringify(so)}`);
    check(so.field === "params.metadata.kediStructuredOutput.schemaJson", `the error names schemaJson, got "${so.field}"`);
    check(task.artifacts.length === 0, "no artifact");
    const msg = task.status.message.parts[0].content.value;
    check(msg.includes("invalid_schema") && msg.includes("schemaJson"), `the status message says why: ${msg}`);
    // A schema that parses but is not a Draft-07 schema fails the same way, naming its path.
    const bad = await client.sendMessage(structured("never runs", '{"type":"object","properties":{"a":{"type":"nonsense"}}}'));
    check(bad.status.state === STATE.FAILED, "an invalid schema document fails");
    const f = bad.metadata.kediStructuredOutput.field;
    check(f.startsWith("params.metadata.kediStructuredOutput.schemaJson.properties.a"), `names the keyword: ${f}`);
    // The failure is durable: read back on the other gateway, and listed.
    const again = await (client2 ?? client).getTask({ id: task.id });
    check(again.status.state === STATE.FAILED && again.metadata.kediStructuredOutput.code === "invalid_schema", "GetTask elsewhere says failed");
    // Streamed (in a new context: no chat row), the refused request is the task, then its final
    // FAILED status.
    const streamed = await drain(client.sendMessageStream(structured("never runs", '{"type":')), [], (ev) => ev.payload);
    const end = streamed[streamed.length - 1];
    check(streamed[0].$case === "task" && end.$case === "statusUpdate" && end.value.status.state === STATE.FAILED, `streamed: ${JSON.stringify(streamed.map((e) => e.$case))}`);
    // A request naming no schema at all is still invalid params, not a task.
    const e = await codeOf(client.sendMessage(structured("x", undefined, { version: "1" })));
    check(e && e.code === -32602, `a bad version is invalid params: ${JSON.stringify(e)}`);
    return `${task.id} failed: ${so.field}; ${bad.id}: ${f}`;
  },

  async output_modes() {
    // The extension's second rule: a structured request accepts application/json.
    const req = structured("x", '{"type":"object"}');
    req.configuration.acceptedOutputModes = ["text/plain"];
    const e = await codeOf(client.sendMessage(req));
    check(e && e.code === -32005, `ContentTypeNotSupported (-32005), got ${JSON.stringify(e)}`);
    check(e.data?.field === "params.configuration.acceptedOutputModes", `names the field: ${JSON.stringify(e.data)}`);
    delete req.configuration.acceptedOutputModes;
    const e2 = await codeOf(client.sendMessage(req));
    check(e2 && e2.code === -32005, `absent modes are refused too, got ${JSON.stringify(e2)}`);
    // A text request needs no output mode.
    const t = await client.sendMessage({ message: message("plain"), configuration: { acceptedOutputModes: ["text/plain"] } });
    check(t.status.state === STATE.COMPLETED, "a text request with text/plain completes");
    return `${e.code} ${e.data.field}`;
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

  async cancel_durable() {
    // A text turn canceled on one gateway reads CANCELED on the other, by GetTask and ListTasks,
    // and stays so after the chat has gone back to waiting.
    check(client2, "A2A_OTHER names a second gateway");
    const task = await client.sendMessage({
      message: message("[sim:slow 100] [sim:words 300] cancel me durably"),
      configuration: { returnImmediately: true },
    });
    await waitState(client, task.id, [STATE.WORKING]);
    const canceled = await client.cancelTask({ id: task.id });
    check(canceled.status.state === STATE.CANCELED, `canceled (state ${canceled.status.state})`);
    await sleep(1000); // the worker ends the interrupted turn; the chat is back in waiting
    const got = await client2.getTask({ id: task.id });
    check(got.status.state === STATE.CANCELED, `GetTask on the other gateway: ${got.status.state}`);
    const listed = await listTasks(client2, { contextId: task.contextId });
    const row = listed.tasks.find((t) => t.id === task.id);
    check(row && row.status.state === STATE.CANCELED, `ListTasks on the other gateway: ${JSON.stringify(row?.status)}`);
    const byState = await listTasks(client2, { status: STATE.CANCELED });
    check(byState.tasks.some((t) => t.id === task.id) && byState.tasks.every((t) => t.status.state === STATE.CANCELED), "the status filter");
    // A queued turn canceled: deleted from the queue, and still a canceled task.
    const first = await client.sendMessage({ message: message("[sim:slow 100] [sim:words 100] busy", { contextId: task.contextId }), configuration: { returnImmediately: true } });
    const queued = await client.sendMessage({ message: message("queued behind", { contextId: task.contextId }), configuration: { returnImmediately: true } });
    check(queued.id.startsWith("q") && queued.status.state === STATE.SUBMITTED, `a queued task: ${queued.id} ${queued.status.state}`);
    const qc = await client.cancelTask({ id: queued.id });
    check(qc.status.state === STATE.CANCELED, "the queued task canceled");
    check((await client2.getTask({ id: queued.id })).status.state === STATE.CANCELED, "read back elsewhere");
    await client.cancelTask({ id: first.id });
    return `task ${task.id} and queued ${queued.id} canceled, read on ${other}`;
  },

  async list_pages() {
    // Three tasks in a fresh context, listed two at a time, newest first, each once.
    const a = await client.sendMessage({ message: message("one") });
    const b = await client.sendMessage({ message: message("two", { contextId: a.contextId }) });
    const c = await client.sendMessage({ message: message("three", { contextId: a.contextId }) });
    const p1 = await listTasks(client2, { contextId: a.contextId, pageSize: 2 });
    check(p1.tasks.length === 2 && p1.totalSize === 3 && p1.pageSize === 2, `page 1: ${p1.tasks.length} of ${p1.totalSize}`);
    check(p1.nextPageToken !== "", "a next page token");
    check(p1.tasks[0].id === c.id && p1.tasks[1].id === b.id, `newest first: ${p1.tasks.map((t) => t.id)}`);
    check(p1.tasks.every((t) => t.artifacts.length === 0), "no artifacts unless asked");
    const p2 = await listTasks(client2, { contextId: a.contextId, pageSize: 2, pageToken: p1.nextPageToken, includeArtifacts: true });
    check(p2.tasks.length === 1 && p2.tasks[0].id === a.id && p2.nextPageToken === "", `page 2: ${p2.tasks.map((t) => t.id)} "${p2.nextPageToken}"`);
    check(p2.tasks[0].artifacts.length === 1, "artifacts when asked");
    const e = await codeOf(listTasks(client, { pageSize: 101 }));
    check(e && e.code === -32602, `pageSize 101 is invalid params: ${JSON.stringify(e)}`);
    const e2 = await codeOf(listTasks(client, { pageToken: "not-a-token" }));
    check(e2 && e2.code === -32602, "a forged page token is invalid params");
    return `${p1.tasks.map((t) => t.id)} | ${p2.tasks.map((t) => t.id)}`;
  },

  async jsonrpc() {
    // JSON-RPC 2.0 itself: a notification runs and is never answered; batches.
    const ctx = (await client.sendMessage({ message: message("context for notifications") })).contextId;
    const before = (await listTasks(client, { contextId: ctx })).totalSize;
    const note = await rpc({ jsonrpc: "2.0", method: "SendMessage", params: { message: { messageId: "n1", role: "ROLE_USER", contextId: ctx, parts: [{ text: "a notification" }] } } });
    check(note.status === 204 && note.body === null, `a notification gets no answer: ${note.status} ${JSON.stringify(note.body)}`);
    const after = (await listTasks(client, { contextId: ctx })).totalSize;
    check(after === before + 1, `the notification ran: ${before} -> ${after}`);
    const unknown = await rpc({ jsonrpc: "2.0", method: "NoSuchMethod", params: {} });
    check(unknown.status === 204 && unknown.body === null, "even an unknown method's notification is not answered");
    const batch = await rpc([
      { jsonrpc: "2.0", id: 1, method: "ListTasks", params: { contextId: ctx, pageSize: 1 } },
      { jsonrpc: "2.0", method: "ListTasks", params: {} },
      { jsonrpc: "2.0", id: "two", method: "NoSuchMethod", params: {} },
      1,
    ]);
    check(batch.status === 200 && Array.isArray(batch.body) && batch.body.length === 3, `three answers: ${JSON.stringify(batch.body)}`);
    const [r1, r2, r3] = batch.body;
    check(r1.id === 1 && r1.result.tasks.length === 1, "the first call's result");
    check(r2.id === "two" && r2.error.code === -32601, "method not found, by id");
    check(r3.id === null && r3.error.code === -32600, "a non-object is an Invalid Request");
    const empty = await rpc([]);
    check(!Array.isArray(empty.body) && empty.body.error.code === -32600, "an empty batch is one Invalid Request");
    const notes = await rpc([{ jsonrpc: "2.0", method: "ListTasks", params: {} }]);
    check(notes.status === 204 && notes.body === null, "a batch of notifications gets nothing");
    const stream = await rpc([{ jsonrpc: "2.0", id: 9, method: "SendStreamingMessage", params: {} }]);
    check(stream.body[0].error.code === -32004, "no stream inside a batch");
    const noid = await rpc({ jsonrpc: "1.0", method: "ListTasks", params: {} });
    check(noid.body.error.code === -32600 && noid.body.id === null, "an invalid request is answered even without id");
    return `notification ran (${before} -> ${after}); batch of 4 -> 3 answers`;
  },

  async push() {
    // A webhook this script runs gets each state change of a task once, or again with the same
    // delivery id, with the configured authentication, across a kill -9 of gateway 0.
    check(client2, "A2A_OTHER names a second gateway");
    // The first delivery is answered 503: it is retried, with the same id.
    const { url, got, refused, until, close } = await webhook({ refuse: 1 });
    const task = await client.sendMessage({
      message: message("[sim:slow 100] [sim:words 60] push me"),
      configuration: { returnImmediately: true },
    });
    const cfg = await client.createTaskPushNotificationConfig({
      taskId: task.id, id: "hook-1", url, token: "tok-1",
      authentication: { scheme: "Bearer", credentials: "s3cret" },
    });
    check(cfg.id === "hook-1" && cfg.taskId === task.id && cfg.url === url, `the config: ${JSON.stringify(cfg)}`);
    const again = await client2.getTaskPushNotificationConfig({ taskId: task.id, id: "hook-1" });
    check(again.url === url && again.token === "tok-1" && again.authentication.scheme === "Bearer", "GetTaskPushNotificationConfig elsewhere");
    const listed = await client2.listTaskPushNotificationConfig({ taskId: task.id, pageSize: 0, pageToken: "" });
    check(listed.configs.length === 1 && listed.configs[0].id === "hook-1", `the list: ${JSON.stringify(listed)}`);
    check(await until(() => got.some((g) => g.state === "TASK_STATE_WORKING")), "WORKING delivered");
    console.log("kill gateway 0");
    check(await until(() => got.some((g) => g.state === "TASK_STATE_COMPLETED")), `COMPLETED delivered after the kill: ${JSON.stringify(got)}`);
    await sleep(500); // nothing more may come
    const ids = [...new Set(got.map((g) => g.id))];
    check(ids.length === 2 && ids[0] === `${task.id}/TASK_STATE_WORKING` && ids[1] === `${task.id}/TASK_STATE_COMPLETED`, `each state once, in order: ${ids}`);
    for (const g of got) {
      check(g.auth === "Bearer s3cret" && g.token === "tok-1" && g.task === task.id, `authenticated: ${JSON.stringify(g)}`);
      check(g.mid === g.id && g.id === `${task.id}/${g.state}`, `a stable id per state: ${JSON.stringify(g)}`);
      check(g.type === "application/a2a+json", "the media type");
    }
    check(refused.length === 1 && refused[0] === ids[0], `the refused delivery came again: ${refused}`);
    await client2.deleteTaskPushNotificationConfig({ taskId: task.id, id: "hook-1" });
    const e = await codeOf(client2.getTaskPushNotificationConfig({ taskId: task.id, id: "hook-1" }));
    check(e && e.code === -32001, `deleted: ${JSON.stringify(e)}`);
    const bad = await codeOf(client2.createTaskPushNotificationConfig({ taskId: task.id, url: "ftp://x" }));
    check(bad && bad.code === -32602, `a non-http URL is invalid params: ${JSON.stringify(bad)}`);
    close();
    return `${got.length} deliveries, ids ${ids.join(", ")}`;
  },

  async push_inline() {
    // Issue 34, item 4: a push config inline in SendMessage (configuration.taskPushNotificationConfig,
    // what this SDK sends) is stored for the task it creates and delivered like one made by
    // CreateTaskPushNotificationConfig: WORKING then COMPLETED, each once. So is one on a
    // message appended to the context by SendStreamingMessage (its id made by the agent), and
    // one under the older name pushNotificationConfig (raw JSON-RPC: this SDK cannot say it).
    check(client2, "A2A_OTHER names a second gateway");
    const hook = await webhook();
    const out = [];
    const task = await client.sendMessage({
      message: message("[sim:slow 50] [sim:words 20] inline push"),
      configuration: {
        taskPushNotificationConfig: {
          id: "inline-1", url: hook.url, token: "tok-inline",
          authentication: { scheme: "Bearer", credentials: "inline-s3cret" },
        },
      },
    });
    check(task.status.state === STATE.COMPLETED, `the blocking send completed: ${task.status.state}`);
    out.push(await checkDelivered(hook, "SendMessage", task.id, "tok-inline", "Bearer inline-s3cret"));
    const got = await client2.getTaskPushNotificationConfig({ taskId: task.id, id: "inline-1" });
    check(got.taskId === task.id && got.url === hook.url && got.token === "tok-inline" && got.authentication.scheme === "Bearer",
      `GetTaskPushNotificationConfig elsewhere: ${JSON.stringify(got)}`);
    const listed = await client2.listTaskPushNotificationConfig({ taskId: task.id, pageSize: 0, pageToken: "" });
    check(listed.configs.length === 1 && listed.configs[0].id === "inline-1", `the list: ${JSON.stringify(listed)}`);

    const events = await drain(client.sendMessageStream({
      message: message("[sim:slow 20] [sim:words 12] inline push streamed", { contextId: task.contextId }),
      configuration: { taskPushNotificationConfig: { url: hook.url } },
    }), [], (ev) => ev.payload);
    check(events[0].$case === "task", "the first event is the task");
    const streamed = events[0].value.id;
    check(streamed !== task.id, "a task of its own in the context");
    out.push(await checkDelivered(hook, "SendStreamingMessage", streamed, undefined, undefined));
    const own = await client2.listTaskPushNotificationConfig({ taskId: streamed, pageSize: 0, pageToken: "" });
    check(own.configs.length === 1 && own.configs[0].url === hook.url && own.configs[0].id !== "", `an id made by the agent: ${JSON.stringify(own)}`);
    const byId = await client2.getTaskPushNotificationConfig({ taskId: streamed, id: own.configs[0].id });
    check(byId.url === hook.url && byId.taskId === streamed, "and read back by that id");

    const raw = await rpc({
      jsonrpc: "2.0", id: 7, method: "SendMessage",
      params: {
        message: { messageId: `raw-${process.pid}`, role: "ROLE_USER", parts: [{ text: "[sim:slow 20] [sim:words 8] older name" }] },
        configuration: { pushNotificationConfig: { id: "older-name", url: hook.url, token: "tok-old" } },
      },
    });
    const rawTask = raw.body.result?.task;
    check(rawTask && rawTask.status.state === "TASK_STATE_COMPLETED", `the older name's send: ${JSON.stringify(raw.body)}`);
    out.push(await checkDelivered(hook, "pushNotificationConfig", rawTask.id, "tok-old", undefined));
    const old = await client2.getTaskPushNotificationConfig({ taskId: rawTask.id, id: "older-name" });
    check(old.url === hook.url && old.token === "tok-old", `stored under the older name: ${JSON.stringify(old)}`);

    // Leaves the user's configs as they were (push_inline_limit counts them).
    await client.deleteTaskPushNotificationConfig({ taskId: task.id, id: "inline-1" });
    await client.deleteTaskPushNotificationConfig({ taskId: streamed, id: own.configs[0].id });
    await client.deleteTaskPushNotificationConfig({ taskId: rawTask.id, id: "older-name" });
    hook.close();
    return out.join("; ");
  },

  async push_inline_invalid() {
    // A bad inline push config is invalid params naming the exact field, and nothing is
    // stored: no chat, no message, no task (not even the failed task an invalid schema makes).
    const ctx = (await client.sendMessage({ message: message("a context for bad configs") })).contextId;
    const before = (await listTasks(client, {})).totalSize;
    const inCtx = (await listTasks(client, { contextId: ctx })).totalSize;
    const at = "params.configuration.taskPushNotificationConfig";
    const url = "http://127.0.0.1:9/hook";
    const bad = [
      [{ url: "ftp://x" }, `${at}.url`],
      [{ url: "https://10.0.0.1/hook" }, `${at}.url`], // refused by the delivery policy
      [{ url, token: "t\r\nX-Injected: 1" }, `${at}.token`],
      [{ url, id: "a\nb" }, `${at}.id`],
      [{ url, authentication: { scheme: "Bearer", credentials: "c\r\nX-Injected: 1" } }, `${at}.authentication.credentials`],
    ];
    const out = [];
    for (const [cfg, field] of bad) {
      for (const contextId of [undefined, ctx]) {
        const e = await codeOf(client.sendMessage({
          message: message("[sim:words 3] never stored", contextId ? { contextId } : {}),
          configuration: { taskPushNotificationConfig: cfg },
        }));
        check(e && e.code === -32602 && e.data?.field === field, `${JSON.stringify(cfg)}: invalid params naming ${field}: ${JSON.stringify(e)}`);
      }
      out.push(field.slice(at.length + 1));
    }
    const e = await codeOf(client.sendMessage({ ...structured("never stored", '{"type":'), configuration: { acceptedOutputModes: ["application/json"], taskPushNotificationConfig: { url: "ftp://x" } } }));
    check(e && e.code === -32602 && e.data?.field === `${at}.url`, `the config is checked before the schema: ${JSON.stringify(e)}`);
    const stream = await rpc({
      jsonrpc: "2.0", id: 8, method: "SendStreamingMessage",
      params: { message: { messageId: `bad-${process.pid}`, role: "ROLE_USER", parts: [{ text: "never stored" }] }, configuration: { taskPushNotificationConfig: { url: "ftp://x" } } },
    });
    check(stream.body.error?.code === -32602 && stream.body.error.data.field === `${at}.url`, `SendStreamingMessage too: ${JSON.stringify(stream.body)}`);
    const both = await rpc({
      jsonrpc: "2.0", id: 9, method: "SendMessage",
      params: { message: { messageId: `both-${process.pid}`, role: "ROLE_USER", parts: [{ text: "never stored" }] }, configuration: { taskPushNotificationConfig: { url }, pushNotificationConfig: { url } } },
    });
    check(both.body.error?.code === -32602 && both.body.error.data.field === "params.configuration.pushNotificationConfig", `one name, not both: ${JSON.stringify(both.body)}`);
    const after = (await listTasks(client, {})).totalSize;
    const afterCtx = (await listTasks(client, { contextId: ctx })).totalSize;
    check(after === before && afterCtx === inCtx, `no task stored: ${before} -> ${after}, in the context ${inCtx} -> ${afterCtx}`);
    return `refused ${out.join(", ")}; tasks ${before} -> ${after}`;
  },

  async push_inline_limit() {
    // A config that passed its checks but cannot be stored (the user's CHATFLEET_PUSH_CONFIGS_MAX,
    // which the test sets low) is an error answer, never silence: invalid params naming the
    // config, with the task it was for, which is canceled rather than run unwatched.
    const hook = await webhook();
    const holder = await client.sendMessage({ message: message("holds configs") });
    const held = [];
    for (;;) {
      check(held.length < 10, "the per-user limit is reached within 10 configs");
      const e = await codeOf(client.createTaskPushNotificationConfig({ taskId: holder.id, id: `fill-${held.length}`, url: hook.url }));
      if (e) {
        check(e.code === -32602 && JSON.stringify(e).includes("CHATFLEET_PUSH_CONFIGS_MAX"), `the user's limit: ${JSON.stringify(e)}`);
        break;
      }
      held.push(`fill-${held.length}`);
    }
    const e = await codeOf(client.sendMessage({
      message: message("[sim:slow 100] [sim:words 200] over the limit"),
      configuration: { taskPushNotificationConfig: { url: hook.url } },
    }));
    check(e && e.code === -32602 && e.data?.field === "params.configuration.taskPushNotificationConfig" && e.data.taskCanceled === true,
      `the limit is the answer: ${JSON.stringify(e)}`);
    const t = await client2.getTask({ id: e.data.taskId });
    check(t.status.state === STATE.CANCELED && t.contextId === e.data.contextId, `its task was canceled: ${t.status.state}`);
    for (const id of held) await client.deleteTaskPushNotificationConfig({ taskId: holder.id, id });
    hook.close();
    return `${held.length} configs held; task ${t.id} canceled`;
  },

  async stream_early_parts() {
    // A fast model (1000 parts, 2 ms apart) on four new chats at once: a worker that starts
    // before a stream's subscription reaches the broker publishes the first parts to no one on
    // this gateway (a race, run four times); every stream still gets every delta once, in order.
    const runs = await Promise.all(
      [1, 2, 3, 4].map((i) =>
        drain(client.sendMessageStream({ message: message(`[sim:slow 2] [sim:words 1000] early parts ${i}`) }), [], (ev) => ev.payload),
      ),
    );
    const out = [];
    for (const [i, events] of runs.entries()) {
      check(events[0].$case === "task", "the first event is the task");
      const answer = (await client.getTask({ id: events[0].value.id })).artifacts[0].parts[0].content.value;
      checkEnd(`SendStreamingMessage ${i + 1}`, events, answer);
      out.push(checkDeltas(`SendStreamingMessage ${i + 1}`, deltasOf(events), answer));
    }
    return out.join("; ");
  },

  async subscribe_mid_episode() {
    // Once 30 deltas have streamed, SubscribeToTask on this gateway (the hub's episode log)
    // and on the other (the worker's buffer through the relay): each of the three streams gets
    // what was already streamed of the episode, then the rest, each delta once, in order.
    check(client2, "A2A_OTHER names a second gateway");
    const it = client
      .sendMessageStream({ message: message("[sim:slow 10] [sim:words 400] join me mid-episode") })
      [Symbol.asyncIterator]();
    const own = [];
    while (deltasOf(own).length < 30) {
      const r = await it.next();
      check(!r.done, "the turn is still streaming");
      own.push(r.value.payload);
    }
    const id = own[0].value.id;
    const [, here, there] = await Promise.all([
      drain({ [Symbol.asyncIterator]: () => it }, own, (ev) => ev.payload),
      drain(client.resubscribeTask({ id }), [], (ev) => ev.payload),
      drain(client2.resubscribeTask({ id }), [], (ev) => ev.payload),
    ]);
    const answer = (await client.getTask({ id })).artifacts[0].parts[0].content.value;
    check(answer.startsWith("Echo: join me mid-episode.") && answer.split(" ").length > 400, `the answer: ${answer.slice(0, 60)}`);
    const out = [];
    for (const [who, events] of [["SendStreamingMessage", own], ["SubscribeToTask here", here], ["SubscribeToTask elsewhere", there]]) {
      check(events[0].$case === "task" && events[0].value.id === id, `${who} starts with the task`);
      checkEnd(who, events, answer);
      out.push(checkDeltas(who, deltasOf(events), answer));
    }
    return out.join("; ");
  },

  async subscribe_queued() {
    // A queued task's stream, opened before the turn running in its context streams its
    // answer (a tool step first, 200 ms a part), carries only its own turn's deltas (from
    // SUBMITTED to WORKING once promoted), once each, in order.
    check(client2, "A2A_OTHER names a second gateway");
    const running = await client.sendMessage({
      message: message("[sim:slow 200] [sim:tool time] [sim:words 6] running first"),
      configuration: { returnImmediately: true },
    });
    const queued = await client.sendMessage({
      message: message("[sim:slow 5] [sim:words 100] queued second", { contextId: running.contextId }),
      configuration: { returnImmediately: true },
    });
    check(queued.id.startsWith("q") && queued.status.state === STATE.SUBMITTED, `a queued task: ${queued.id}`);
    const events = await drain(client2.resubscribeTask({ id: queued.id }), [], (ev) => ev.payload);
    check(events[0].$case === "task" && events[0].value.status.state === STATE.SUBMITTED, "the task first, submitted");
    const answer = (await client.getTask({ id: queued.id })).artifacts[0].parts[0].content.value;
    check(answer.startsWith("Echo: queued second."), `its own answer: ${answer.slice(0, 40)}`);
    checkEnd("SubscribeToTask of a queued task", events, answer);
    return checkDeltas("SubscribeToTask of a queued task", deltasOf(events), answer);
  },

  async resubscribe_after_kill() {
    // A stream on gateway 0; gateway 0 killed mid-task; SubscribeToTask on gateway 1 ends
    // with the complete artifact, each event once.
    check(client2, "A2A_OTHER names a second gateway");
    const it = client.sendMessageStream({ message: message("[sim:slow 100] [sim:words 60] survive the kill") })[Symbol.asyncIterator]();
    const first = (await it.next()).value.payload;
    check(first.$case === "task", "the first event is the task");
    const id = first.value.id;
    await waitState(client2, id, [STATE.WORKING]);
    console.log("kill gateway 0");
    try {
      while (!(await it.next()).done);
    } catch (e) {
      // the connection died with the gateway
    }
    const events = [];
    for await (const ev of client2.resubscribeTask({ id })) events.push(ev.payload);
    check(events[0].$case === "task" && events[0].value.id === id, "SubscribeToTask starts with the task");
    check(events[0].value.status.state === STATE.WORKING, `still working when resubscribed: ${events[0].value.status.state}`);
    const arts = events.filter((e) => e.$case === "artifactUpdate");
    const finals = events.filter((e) => e.$case === "statusUpdate" && e.value.status.state === STATE.COMPLETED);
    check(arts.length === 1 && finals.length === 1, `one artifact, one final status: ${arts.length} ${finals.length}`);
    check(events[events.length - 1] === finals[0], "the final status ends the stream");
    const answer = arts[0].value.artifact.parts[0].content.value;
    const got = await client2.getTask({ id });
    check(got.artifacts[0].parts[0].content.value === answer, "the artifact is the task's whole answer");
    check(answer.startsWith("Echo: survive the kill.") && answer.split(" ").length > 20, `the complete answer: ${answer}`);
    const e = await codeOf((async () => { for await (const _ of client2.resubscribeTask({ id })); })());
    check(e && e.code === -32004, `a finished task cannot be subscribed to: ${JSON.stringify(e)}`);
    return `task ${id}: ${events.length} events after the kill, ${answer.length} bytes`;
  },
};

await run(cases, only);
