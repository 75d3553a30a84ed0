// Drives chatfleet's A2A endpoint with the official JavaScript client at v0.3 (@a2a-js/sdk
// 0.3.x: the v0.3 method names message/send, message/stream, tasks/get, tasks/cancel,
// tasks/resubscribe, and the v0.3 shapes).
//   A2A_OTHER=BASE_URL_2 node a2a_client_v03.mjs BASE_URL TOKEN [CASE...]
// As a2a_client.mjs: BASE_URL_2 is a second gateway of the cluster; one "ok CASE ..." line per
// passing case; "kill gateway 0" asks the driving test to kill -9 the gateway at BASE_URL.
// Cases: card, text, invalid_schema_json, stream, cancel_durable, push_configs, push_inline,
// push_inline_invalid, push_inline_limit, resubscribe_after_kill, stream_early_parts,
// subscribe_mid_episode, subscribe_queued, files.
import { EXT, check, checkDelivered, checkDeltas, connect, drain, run, sleep, waitState, webhook } from "./a2a_common.mjs";

const { base, only, other, authFetch, client, client2 } = await connect();

// The JSON-RPC error a call failed with ({code, message, data}), or null when it did not fail.
async function errorOf(promise) {
  try {
    await promise;
  } catch (e) {
    return e.errorResponse?.error ?? { message: e.message };
  }
  return null;
}

// One raw JSON-RPC POST to BASE_URL/a2a; returns the parsed body.
async function rpc(body) {
  const r = await authFetch(`${base.replace(/\/$/, "")}/a2a`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return JSON.parse(await r.text());
}

// Every task of the caller, counted through the v1 ListTasks (v0.3 has no list).
async function taskCount(contextId) {
  const r = await rpc({ jsonrpc: "2.0", id: 1, method: "ListTasks", params: contextId ? { contextId } : {} });
  check(r.result, `ListTasks: ${JSON.stringify(r)}`);
  return r.result.totalSize;
}

let n = 0;
function message(text, extra = {}) {
  return { kind: "message", messageId: `v03-${process.pid}-${++n}`, role: "user", parts: [{ kind: "text", text }], ...extra };
}

// The text deltas of a stream's events (working status messages), for checkDeltas.
const deltasOf = (events) =>
  events
    .filter((e) => e.kind === "status-update" && e.status.state === "working" && e.status.message)
    .map((e) => ({ mid: e.status.message.messageId, text: e.status.message.parts[0].text }));

// A stream's events end with one artifact, the answer, then the final completed status.
function checkEnd(who, events, answer) {
  const last = events[events.length - 1];
  check(last.kind === "status-update" && last.final && last.status.state === "completed", `${who} ends completed, final`);
  const arts = events.filter((e) => e.kind === "artifact-update");
  check(arts.length === 1 && arts[0].artifact.parts[0].text === answer, `${who}: one artifact, the answer`);
}

const cases = {
  async card() {
    const card = await client.getAgentCard();
    check(card.url === `${base.replace(/\/$/, "")}/a2a`, `the v0.3 url: ${card.url}`);
    check(card.capabilities.extensions.some((e) => e.uri === EXT), "the extension");
    return card.url;
  },

  async files() {
    // v0.3 FileParts: {kind:"file", file:{bytes (base64), mimeType, name}}; file.uri is refused.
    const note = "h\u00e9llo from a v0.3 file";
    const parts = [
      { kind: "text", text: "read the attachment" },
      { kind: "file", file: { bytes: Buffer.from(note, "utf8").toString("base64"), mimeType: "text/plain", name: "note.txt" } },
    ];
    const task = await client.sendMessage({ message: { ...message(""), parts } });
    check(task.status.state === "completed", `completed: ${task.status.state}`);
    check(task.artifacts[0].parts[0].text.includes(note), `the model saw the file: ${task.artifacts[0].parts[0].text}`);
    let err = null;
    try {
      await client.sendMessage({ message: { ...message(""), parts: [parts[0], { kind: "file", file: { uri: "http://127.0.0.1:9/x", mimeType: "text/plain" } }] } });
    } catch (e) {
      err = e;
    }
    check(err && String(err.message).includes("params.message.parts[1].file.uri"), `a uri is refused: ${err && err.message}`);
    return `task ${task.id}`;
  },

  async text() {
    const task = await client.sendMessage({ message: message("hello from v0.3") });
    check(task.kind === "task" && task.status.state === "completed", `completed: ${task.status.state}`);
    const text = task.artifacts[0].parts[0].text;
    check(text.includes("Echo: hello from v0.3."), `the answer: ${text}`);
    const again = await client.getTask({ id: task.id });
    check(again.status.state === "completed" && again.contextId === task.contextId, "tasks/get");
    return `task ${task.id}`;
  },

  async invalid_schema_json() {
    const task = await client.sendMessage({
      message: message("never runs", { extensions: [EXT] }),
      configuration: { acceptedOutputModes: ["application/json"] },
      metadata: { kediStructuredOutput: { version: 1, resultEncoding: "json-utf8", schemaJson: '{"type":', schema: { type: "object" } } },
    });
    check(task.status.state === "failed", `the task failed: ${task.status.state}`);
    check(task.metadata.kediStructuredOutput.code === "invalid_schema", "code invalid_schema");
    check(task.metadata.kediStructuredOutput.field === "params.metadata.kediStructuredOutput.schemaJson", "names schemaJson");
    return `${task.id} ${task.status.state}`;
  },

  async stream() {
    const events = [];
    for await (const ev of client.sendMessageStream({ message: message("[sim:slow 20] [sim:words 12] v03 stream") })) {
      events.push(ev);
    }
    check(events[0].kind === "task", "the first event is the task");
    const last = events[events.length - 1];
    check(last.kind === "status-update" && last.final && last.status.state === "completed", "ends completed, final");
    const art = events.find((e) => e.kind === "artifact-update");
    check(art && art.artifact.parts[0].text.startsWith("Echo: v03 stream."), "the artifact");
    return `${events.length} events`;
  },

  async cancel_durable() {
    check(client2, "A2A_OTHER names a second gateway");
    const task = await client.sendMessage({
      message: message("[sim:slow 100] [sim:words 300] cancel me in v0.3"),
      configuration: { blocking: false },
    });
    await waitState(client, task.id, ["working"]);
    const canceled = await client.cancelTask({ id: task.id });
    check(canceled.status.state === "canceled", `canceled: ${canceled.status.state}`);
    await sleep(1000);
    const got = await client2.getTask({ id: task.id });
    check(got.status.state === "canceled", `tasks/get on the other gateway: ${got.status.state}`);
    return `task ${task.id} canceled, read on ${other}`;
  },

  async push_configs() {
    // The v0.3 shapes of the push notification config methods (set, get, list, delete).
    const task = await client.sendMessage({ message: message("configs in v0.3") });
    const url = "http://127.0.0.1:9/hook"; // never reached: the task has ended
    const set = await client.setTaskPushNotificationConfig({
      taskId: task.id,
      pushNotificationConfig: { id: "v03-hook", url, token: "t", authentication: { schemes: ["Bearer"], credentials: "c" } },
    });
    check(set.taskId === task.id && set.pushNotificationConfig.id === "v03-hook", `set: ${JSON.stringify(set)}`);
    check(set.pushNotificationConfig.authentication.schemes[0] === "Bearer", "the v0.3 authentication shape");
    const got = await client2.getTaskPushNotificationConfig({ id: task.id, pushNotificationConfigId: "v03-hook" });
    check(got.pushNotificationConfig.url === url, `get on the other gateway: ${JSON.stringify(got)}`);
    const list = await client2.listTaskPushNotificationConfig({ id: task.id });
    check(Array.isArray(list) && list.length === 1 && list[0].pushNotificationConfig.id === "v03-hook", `list: ${JSON.stringify(list)}`);
    await client2.deleteTaskPushNotificationConfig({ id: task.id, pushNotificationConfigId: "v03-hook" });
    const after = await client2.listTaskPushNotificationConfig({ id: task.id });
    check(after.length === 0, "deleted");
    return `task ${task.id}: set, get, list, delete`;
  },

  async push_inline() {
    // Issue 34, item 4, in v0.3: message/send's configuration.pushNotificationConfig is stored
    // for the task it creates and delivered (WORKING then COMPLETED, each once); so is one on
    // a message/stream appended to the context; tasks/pushNotificationConfig/get and list show
    // them in the v0.3 shapes.
    check(client2, "A2A_OTHER names a second gateway");
    const hook = await webhook();
    const out = [];
    const task = await client.sendMessage({
      message: message("[sim:slow 50] [sim:words 20] v03 inline push"),
      configuration: {
        pushNotificationConfig: {
          id: "v03-inline", url: hook.url, token: "tok-v03",
          authentication: { schemes: ["Bearer"], credentials: "v03-s3cret" },
        },
      },
    });
    check(task.kind === "task" && task.status.state === "completed", `the blocking send completed: ${task.status.state}`);
    out.push(await checkDelivered(hook, "message/send", task.id, "tok-v03", "Bearer v03-s3cret"));
    const got = await client2.getTaskPushNotificationConfig({ id: task.id, pushNotificationConfigId: "v03-inline" });
    check(got.taskId === task.id && got.pushNotificationConfig.url === hook.url && got.pushNotificationConfig.token === "tok-v03" &&
      got.pushNotificationConfig.authentication.schemes[0] === "Bearer", `get on the other gateway: ${JSON.stringify(got)}`);
    const list = await client2.listTaskPushNotificationConfig({ id: task.id });
    check(list.length === 1 && list[0].pushNotificationConfig.id === "v03-inline", `list: ${JSON.stringify(list)}`);

    const events = await drain(client.sendMessageStream({
      message: message("[sim:slow 20] [sim:words 12] v03 inline push streamed", { contextId: task.contextId }),
      configuration: { pushNotificationConfig: { url: hook.url } },
    }), []);
    check(events[0].kind === "task" && events[0].id !== task.id, "message/stream's own task first");
    const streamed = events[0].id;
    out.push(await checkDelivered(hook, "message/stream", streamed, undefined, undefined));
    const own = await client2.listTaskPushNotificationConfig({ id: streamed });
    check(own.length === 1 && own[0].pushNotificationConfig.url === hook.url && own[0].pushNotificationConfig.id, `an id made by the agent: ${JSON.stringify(own)}`);

    await client.deleteTaskPushNotificationConfig({ id: task.id, pushNotificationConfigId: "v03-inline" });
    await client.deleteTaskPushNotificationConfig({ id: streamed, pushNotificationConfigId: own[0].pushNotificationConfig.id });
    hook.close();
    return out.join("; ");
  },

  async push_inline_invalid() {
    // A bad inline config is invalid params naming the field; nothing is stored.
    const ctx = (await client.sendMessage({ message: message("a v0.3 context for bad configs") })).contextId;
    const before = await taskCount();
    const inCtx = await taskCount(ctx);
    const at = "params.configuration.pushNotificationConfig";
    const url = "http://127.0.0.1:9/hook";
    const bad = [
      [{ url: "ftp://x" }, `${at}.url`],
      [{ url, token: "t\r\nX-Injected: 1" }, `${at}.token`],
      [{ url, authentication: { schemes: ["Bearer\r\nX-Injected: 1"], credentials: "c" } }, `${at}.authentication.schemes`],
    ];
    for (const [cfg, field] of bad) {
      for (const contextId of [undefined, ctx]) {
        const e = await errorOf(client.sendMessage({
          message: message("[sim:words 3] never stored", contextId ? { contextId } : {}),
          configuration: { pushNotificationConfig: cfg },
        }));
        check(e && e.code === -32602 && e.data?.field === field, `${JSON.stringify(cfg)}: invalid params naming ${field}: ${JSON.stringify(e)}`);
      }
    }
    const stream = await rpc({
      jsonrpc: "2.0", id: 8, method: "message/stream",
      params: { message: { kind: "message", messageId: `bad-${process.pid}`, role: "user", parts: [{ kind: "text", text: "never stored" }] }, configuration: { pushNotificationConfig: { url: "ftp://x" } } },
    });
    check(stream.error?.code === -32602 && stream.error.data.field === `${at}.url`, `message/stream too: ${JSON.stringify(stream)}`);
    const after = await taskCount();
    const afterCtx = await taskCount(ctx);
    check(after === before && afterCtx === inCtx, `no task stored: ${before} -> ${after}, in the context ${inCtx} -> ${afterCtx}`);
    return `refused ${bad.length} configs (x2) and a stream; tasks ${before} -> ${after}`;
  },

  async push_inline_limit() {
    // As a2a_client.mjs: a config over the user's CHATFLEET_PUSH_CONFIGS_MAX is an error answer
    // naming it, and the task it was for is canceled.
    const hook = await webhook();
    const holder = await client.sendMessage({ message: message("v03 holds configs") });
    const held = [];
    for (;;) {
      check(held.length < 10, "the per-user limit is reached within 10 configs");
      const e = await errorOf(client.setTaskPushNotificationConfig({ taskId: holder.id, pushNotificationConfig: { id: `fill-${held.length}`, url: hook.url } }));
      if (e) {
        check(e.code === -32602 && JSON.stringify(e).includes("CHATFLEET_PUSH_CONFIGS_MAX"), `the user's limit: ${JSON.stringify(e)}`);
        break;
      }
      held.push(`fill-${held.length}`);
    }
    const e = await errorOf(client.sendMessage({
      message: message("[sim:slow 100] [sim:words 200] v03 over the limit"),
      configuration: { pushNotificationConfig: { url: hook.url } },
    }));
    check(e && e.code === -32602 && e.data?.field === "params.configuration.pushNotificationConfig" && e.data.taskCanceled === true,
      `the limit is the answer: ${JSON.stringify(e)}`);
    const t = await client2.getTask({ id: e.data.taskId });
    check(t.status.state === "canceled", `its task was canceled: ${t.status.state}`);
    for (const id of held) await client.deleteTaskPushNotificationConfig({ id: holder.id, pushNotificationConfigId: id });
    hook.close();
    return `${held.length} configs held; task ${t.id} canceled`;
  },

  async stream_early_parts() {
    // As a2a_client.mjs: parts published before a stream's subscription reached the broker
    // (a race, run on four new chats at once).
    const runs = await Promise.all(
      [1, 2, 3, 4].map((i) => drain(client.sendMessageStream({ message: message(`[sim:slow 2] [sim:words 1000] v03 early ${i}`) }), [])),
    );
    const out = [];
    for (const [i, events] of runs.entries()) {
      check(events[0].kind === "task", "the first event is the task");
      const answer = (await client.getTask({ id: events[0].id })).artifacts[0].parts[0].text;
      checkEnd(`message/stream ${i + 1}`, events, answer);
      out.push(checkDeltas(`message/stream ${i + 1}`, deltasOf(events), answer));
    }
    return out.join("; ");
  },

  async subscribe_mid_episode() {
    // As a2a_client.mjs: tasks/resubscribe here and elsewhere once 30 deltas have streamed.
    check(client2, "A2A_OTHER names a second gateway");
    const it = client.sendMessageStream({ message: message("[sim:slow 10] [sim:words 400] v03 mid-episode") })[Symbol.asyncIterator]();
    const own = [];
    while (deltasOf(own).length < 30) {
      const r = await it.next();
      check(!r.done, "the turn is still streaming");
      own.push(r.value);
    }
    const id = own[0].id;
    const [, here, there] = await Promise.all([
      drain({ [Symbol.asyncIterator]: () => it }, own),
      drain(client.resubscribeTask({ id }), []),
      drain(client2.resubscribeTask({ id }), []),
    ]);
    const answer = (await client.getTask({ id })).artifacts[0].parts[0].text;
    check(answer.startsWith("Echo: v03 mid-episode.") && answer.split(" ").length > 400, `the answer: ${answer.slice(0, 60)}`);
    const out = [];
    for (const [who, events] of [["message/stream", own], ["tasks/resubscribe here", here], ["tasks/resubscribe elsewhere", there]]) {
      check(events[0].kind === "task" && events[0].id === id, `${who} starts with the task`);
      checkEnd(who, events, answer);
      out.push(checkDeltas(who, deltasOf(events), answer));
    }
    return out.join("; ");
  },

  async subscribe_queued() {
    // As a2a_client.mjs: a queued task's stream carries only its own turn's deltas.
    check(client2, "A2A_OTHER names a second gateway");
    const running = await client.sendMessage({ message: message("[sim:slow 200] [sim:tool time] [sim:words 6] v03 running"), configuration: { blocking: false } });
    const queued = await client.sendMessage({
      message: message("[sim:slow 5] [sim:words 100] v03 queued", { contextId: running.contextId }),
      configuration: { blocking: false },
    });
    check(queued.id.startsWith("q") && queued.status.state === "submitted", `a queued task: ${queued.id}`);
    const events = await drain(client2.resubscribeTask({ id: queued.id }), []);
    check(events[0].kind === "task" && events[0].status.state === "submitted", "the task first, submitted");
    const answer = (await client.getTask({ id: queued.id })).artifacts[0].parts[0].text;
    check(answer.startsWith("Echo: v03 queued."), `its own answer: ${answer.slice(0, 40)}`);
    checkEnd("tasks/resubscribe of a queued task", events, answer);
    return checkDeltas("tasks/resubscribe of a queued task", deltasOf(events), answer);
  },

  async resubscribe_after_kill() {
    check(client2, "A2A_OTHER names a second gateway");
    const it = client.sendMessageStream({ message: message("[sim:slow 100] [sim:words 60] v03 survives") })[Symbol.asyncIterator]();
    const first = (await it.next()).value;
    check(first.kind === "task", "the first event is the task");
    const id = first.id;
    await waitState(client2, id, ["working"]);
    console.log("kill gateway 0");
    try {
      while (!(await it.next()).done);
    } catch (e) {
      // the connection died with the gateway
    }
    const events = [];
    for await (const ev of client2.resubscribeTask({ id })) events.push(ev);
    check(events[0].kind === "task" && events[0].id === id && events[0].status.state === "working", "tasks/resubscribe starts with the working task");
    const arts = events.filter((e) => e.kind === "artifact-update");
    const finals = events.filter((e) => e.kind === "status-update" && e.final);
    check(arts.length === 1 && finals.length === 1 && finals[0].status.state === "completed", `one artifact, one final: ${arts.length} ${finals.length}`);
    check(events[events.length - 1] === finals[0], "the final status ends the stream");
    const answer = arts[0].artifact.parts[0].text;
    check(answer.startsWith("Echo: v03 survives.") && answer.split(" ").length > 20, `the complete answer: ${answer}`);
    const got = await client2.getTask({ id });
    check(got.artifacts[0].parts[0].text === answer, "the artifact is the task's answer");
    return `task ${id}: ${events.length} events after the kill`;
  },
};

await run(cases, only);
