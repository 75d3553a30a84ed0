// The cases of tests/integration/test_js_agent.c: each runs the package with the real ai@7
// and zod against a real cluster and prints "ok CASE ..." only when every check held.
// Usage: node test/agent_cases.mjs URL TOKEN CASE (from clients/js, after npm install). The resume case prints "KILL_GATEWAY" once
// text is streaming and expects the harness to kill and restart the gateway then.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { Output, jsonSchema, tool } from "ai";
import { z } from "zod";
import {
  ChatfleetAbortError,
  ChatfleetAgent,
  ChatfleetChatError,
  ChatfleetClient,
  ChatfleetStructuredOutputError,
  receiptFailure,
} from "../src/index.js";

const [url, token, name] = process.argv.slice(2);
const client = new ChatfleetClient({ baseUrl: url, token });

/** The committed assistant text of the chat's newest turn (after its last user message). */
async function committedText(chatId) {
  const msgs = (await client.getMessages(chatId, { limit: 100 })).sort((a, b) => a.id - b.id);
  const lastUser = msgs.filter((m) => m.role === "user").at(-1);
  return msgs
    .filter((m) => m.role === "assistant" && m.id > lastUser.id && !m.structured_output)
    .flatMap((m) => m.content.filter((p) => p.type === "text").map((p) => p.text))
    .join("");
}

async function waitStatus(chatId, want, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const chat = await client.getChat(chatId);
    if (chat.status === want) return chat;
    if (Date.now() > end) throw new Error(`chat ${chatId} is ${chat.status}, not ${want}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const cases = {
  async models() {
    const agent = new ChatfleetAgent({ baseUrl: url, token });
    const models = await agent.listModels();
    assert.ok(models.some((m) => m.name === "sim"), JSON.stringify(models));
    return `${models.length} model(s)`;
  },

  async generate() {
    const agent = new ChatfleetAgent({ baseUrl: url, token, instructions: "Be brief." });
    assert.equal(agent.version, "agent-v1");
    const r = await agent.generate({ prompt: "hello there [sim:words 5]" });
    assert.ok(r.text.startsWith("Echo: hello there."), r.text);
    assert.equal(r.text, await committedText(agent.chatId));
    assert.equal(r.finishReason, "stop");
    assert.ok(r.usage.outputTokens > 0, JSON.stringify(r.usage));
    // A second turn reuses the chat (one chat per instance).
    const first = agent.chatId;
    const r2 = await agent.generate({ prompt: "again [sim:words 2]" });
    assert.equal(agent.chatId, first);
    assert.ok(r2.text.startsWith("Echo: again."), r2.text);
    return `chat=${first}`;
  },

  async stream() {
    const agent = new ChatfleetAgent({ baseUrl: url, token });
    const r = await agent.stream({ prompt: "stream please [sim:slow 10] [sim:words 30]" });
    const deltas = [];
    let finish;
    const order = [];
    for await (const part of r.fullStream) {
      order.push(part.type);
      if (part.type === "text-delta") deltas.push(part.text);
      if (part.type === "finish") finish = part;
    }
    const text = deltas.join("");
    assert.ok(deltas.length > 10, `only ${deltas.length} deltas`);
    assert.equal(text, await committedText(agent.chatId));
    assert.equal(text, await r.text);
    assert.ok(finish, `no finish part in ${order.join(",")}`);
    assert.equal(order.at(-1), "finish");
    assert.ok(finish.totalUsage.outputTokens > 0, JSON.stringify(finish.totalUsage));
    assert.ok(finish.totalUsage.inputTokens > 0, JSON.stringify(finish.totalUsage));
    return `deltas=${deltas.length} usage=${finish.totalUsage.inputTokens}/${finish.totalUsage.outputTokens}`;
  },

  async tool() {
    const calls = [];
    const agent = new ChatfleetAgent({
      baseUrl: url,
      token,
      tools: {
        // The sim calls a dynamic tool with {"question": <the prompt>}.
        weather: tool({
          description: "The weather for a question.",
          inputSchema: z.object({ question: z.string() }),
          execute: async ({ question }) => {
            calls.push(question);
            return { question, tempC: 21 };
          },
        }),
      },
    });
    const r = await agent.generate({ prompt: "weather? [sim:dynamic weather]" });
    assert.equal(calls.length, 1, `execute ran ${calls.length} times`);
    const toolCalls = r.steps.flatMap((s) => s.toolCalls);
    assert.equal(toolCalls.length, 1);
    assert.equal(toolCalls[0].toolName, "weather");
    const results = r.steps.flatMap((s) => s.toolResults);
    assert.deepEqual(results[0].output, { question: calls[0], tempC: 21 });
    // The server's model saw the result: the sim's reply quotes it.
    assert.ok(r.text.includes('"tempC":21'), r.text);
    assert.equal((await client.getChat(agent.chatId)).status, "waiting");
    return `steps=${r.steps.length} text=${JSON.stringify(r.text)}`;
  },

  async server_tool() {
    // A tool the worker runs itself streams as a provider-executed call and its result.
    const agent = new ChatfleetAgent({ baseUrl: url, token });
    const r = await agent.stream({ prompt: "what time is it [sim:tool time]" });
    const parts = [];
    for await (const part of r.fullStream) parts.push(part);
    const call = parts.find((p) => p.type === "tool-call");
    const result = parts.find((p) => p.type === "tool-result");
    assert.ok(call, JSON.stringify(parts.map((p) => p.type)));
    assert.equal(call.toolName, "time");
    assert.equal(call.providerExecuted, true);
    assert.ok(result, JSON.stringify(parts.map((p) => p.type)));
    assert.equal(result.toolCallId, call.toolCallId);
    assert.equal(parts.filter((p) => p.type === "tool-call").length, 1);
    assert.ok((await r.text).startsWith("Tool results: time="), await r.text);
    return `result=${JSON.stringify(result.output)}`;
  },

  async structured() {
    const City = z.object({ city: z.string(), population: z.number().int() });
    const agent = new ChatfleetAgent({ baseUrl: url, token, output: Output.object({ schema: City }) });
    const r = await agent.generate({ prompt: "a city please" });
    const parsed = City.parse(r.output);
    const receipt = (await client.getMessages(agent.chatId)).find((m) => m.structured_output);
    assert.equal(receipt.structured_output.status, "succeeded");
    assert.deepEqual(r.output, receipt.structured_output.value);
    // A JSON Schema works the same way.
    const agent2 = new ChatfleetAgent({
      baseUrl: url,
      token,
      output: Output.object({
        schema: jsonSchema({
          type: "object",
          properties: { n: { type: "integer", minimum: 3 } },
          required: ["n"],
          additionalProperties: false,
        }),
      }),
    });
    const r2 = await agent2.generate({ prompt: "a number" });
    assert.ok(Number.isInteger(r2.output.n) && r2.output.n >= 3, JSON.stringify(r2.output));
    return `output=${JSON.stringify(parsed)} n=${r2.output.n}`;
  },

  async structured_failure() {
    // Both receipt shapes name their code.
    assert.equal(receiptFailure({ status: "failed", code: "not_produced" }).code, "not_produced");
    assert.equal(
      receiptFailure({ status: "failed", error: { code: "validation_exhausted", message: "m" } }).code,
      "validation_exhausted",
    );
    const agent = new ChatfleetAgent({
      baseUrl: url,
      token,
      output: Output.object({ schema: z.object({ city: z.string() }) }),
    });
    const err = await agent.generate({ prompt: "a city [sim:schema-wrong 3]" }).then(
      () => assert.fail("generate() resolved"),
      (e) => e,
    );
    assert.ok(err instanceof ChatfleetStructuredOutputError, `${err?.name}: ${err?.message}`);
    assert.equal(err.code, "validation_exhausted");
    assert.equal(err.chatId, agent.chatId);
    // The streaming form surfaces the same typed error.
    const agent2 = new ChatfleetAgent({
      baseUrl: url,
      token,
      output: Output.object({ schema: z.object({ city: z.string() }) }),
    });
    const s = await agent2.stream({ prompt: "a city [sim:schema-wrong 3]" });
    let streamErr;
    try {
      for await (const part of s.fullStream) if (part.type === "error") streamErr = part.error;
    } catch (e) {
      streamErr = e;
    }
    assert.ok(streamErr instanceof ChatfleetStructuredOutputError, String(streamErr));
    assert.equal(streamErr.code, "validation_exhausted");
    return `code=${err.code}`;
  },

  async chat_error() {
    // A provider failure the server does not retry ends the turn in the error state.
    const agent = new ChatfleetAgent({ baseUrl: url, token });
    const err = await agent.generate({ prompt: "fail [sim:fail 400]" }).then(
      () => assert.fail("generate() resolved"),
      (e) => e,
    );
    assert.ok(err instanceof ChatfleetChatError, `${err?.name}: ${err?.message}`);
    assert.equal(err.kind, "provider");
    assert.equal(err.statusCode, 400);
    assert.equal(err.retryable, false);
    return `kind=${err.kind} status=${err.statusCode}`;
  },

  async abort() {
    const agent = new ChatfleetAgent({ baseUrl: url, token });
    const ac = new AbortController();
    const r = await agent.stream({ prompt: "long [sim:slow 100] [sim:words 400]", abortSignal: ac.signal });
    let deltas = 0;
    let err;
    try {
      for await (const d of r.textStream) {
        if (++deltas === 3) ac.abort();
      }
    } catch (e) {
      err = e;
    }
    assert.ok(deltas >= 3);
    const chatId = agent.chatId;
    // The server-side run was interrupted: the chat ends waiting long before the 40 s the
    // reply would take, with the interrupted partial answer committed.
    const chat = await waitStatus(chatId, "waiting", 20000);
    const text = await committedText(chatId);
    assert.ok(text.length > 0 && text.split(" ").length < 400, `committed ${text.length} chars`);
    return `deltas=${deltas} err=${err?.name ?? "none"} status=${chat.status}`;
  },

  async resume() {
    let dials = 0;
    const resumeClient = new ChatfleetClient({ baseUrl: url, token, onDial: () => dials++ });
    const agent = new ChatfleetAgent({ client: resumeClient });
    const r = await agent.stream({ prompt: "survive [sim:slow 40] [sim:words 150]" });
    const deltas = [];
    let signalled = false;
    for await (const d of r.textStream) {
      deltas.push(d);
      if (deltas.length === 5 && !signalled) {
        signalled = true;
        console.log("KILL_GATEWAY");
      }
    }
    const text = deltas.join("");
    const committed = await committedText(agent.chatId);
    assert.ok(signalled);
    assert.ok(dials >= 2, `only ${dials} dial(s): the stream never dropped`);
    assert.equal(text, committed, "streamed text differs from the committed answer");
    return `dials=${dials} deltas=${deltas.length} chars=${text.length}`;
  },
};

cases.subagents = async function subagents() {
  // The turn spawns two children that run on the cluster's workers and waits for them (an
  // agent wait, which asks nothing of the client): generate() ends once, with the parent's
  // answer to the children's results, and the family reads back as a tree.
  const agent = new ChatfleetAgent({ baseUrl: url, token });
  const r = await agent.generate({ prompt: "fan out [sim:spawn 2][sim:child words 3]" });
  assert.equal(r.finishReason, "stop");
  assert.ok(r.text.includes("wait_agent="), r.text);
  assert.equal(r.text, await committedText(agent.chatId));
  const kids = await client.getSubagents(agent.chatId);
  assert.equal(kids.length, 2, JSON.stringify(kids));
  for (const [k, c] of kids.entries()) {
    assert.equal(c.parent_chat_id, agent.chatId);
    assert.equal(c.status, "waiting");
    assert.ok(r.text.includes(`task ${k + 1} of 2`), r.text);
    assert.deepEqual(await client.getSubagents(c.id), []);
  }
  return `children=${kids.map((c) => c.id).join(",")}`;
};

// A 1x1 PNG, and the SHA-256 (hex) of bytes as the gateway reports it.
const PNG_BASE64 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII=";
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

cases.files = async function files() {
  // A text file part (a Uint8Array with its name) and an image part (base64, the SDK's
  // deprecated ImagePart) reach the chat as uploads: the chat's files list both with their
  // media types and the SHA-256 of the bytes, and the user message holds its text then one
  // file part per upload, in order, each naming a listed file.
  const note = new TextEncoder().encode("Tides follow the moon.\n");
  const agent = new ChatfleetAgent({ baseUrl: url, token });
  const r = await agent.generate({
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "What do these say? [sim:words 3]" },
          { type: "file", data: note, mediaType: "text/plain", filename: "tides.txt" },
          { type: "image", image: PNG_BASE64, mediaType: "image/png" },
        ],
      },
    ],
  });
  assert.equal(r.finishReason, "stop");
  const chat = await client.getChat(agent.chatId);
  assert.equal(chat.files.length, 2, JSON.stringify(chat.files));
  const byType = Object.fromEntries(chat.files.map((f) => [f.mime_type, f]));
  assert.equal(byType["text/plain"]?.name, "tides.txt");
  assert.equal(byType["text/plain"].sha256, sha256(note));
  assert.equal(byType["image/png"]?.sha256, sha256(Buffer.from(PNG_BASE64, "base64")));
  const msgs = (await client.getMessages(agent.chatId)).sort((a, b) => a.id - b.id);
  const user = msgs.find((m) => m.role === "user");
  assert.deepEqual(
    user.content.map((p) => [p.type, p.file_id, p.media_type]),
    [
      ["text", undefined, undefined],
      ["file", byType["text/plain"].id, "text/plain"],
      ["file", byType["image/png"].id, "image/png"],
    ],
  );
  // A file by URL is refused before anything is sent (every part is checked before the first
  // upload): no chat, and no fetch of the URL.
  const other = new ChatfleetAgent({ baseUrl: url, token });
  await assert.rejects(
    other.generate({
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "and this?" },
            { type: "file", data: note, mediaType: "text/plain", filename: "first.txt" },
            { type: "file", data: new URL("https://example.invalid/report.pdf"), mediaType: "application/pdf" },
          ],
        },
      ],
    }),
    (e) => /given by URL \(https:\/\/example\.invalid\/report\.pdf\) is not supported/.test(String(e?.message)),
  );
  assert.equal(other.chatId, undefined);
  return `chat=${agent.chatId} files=${chat.files.map((f) => f.mime_type).join(",")}`;
};

const run = cases[name];
if (!run) {
  console.error(`unknown case ${name}`);
  process.exit(2);
}
try {
  const detail = await run();
  console.log(`ok ${name} ${detail}`);
  process.exit(0);
} catch (e) {
  console.error(`FAIL ${name}: ${e?.stack ?? e}`);
  process.exit(1);
}
