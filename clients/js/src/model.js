// model: a LanguageModelV4 (@ai-sdk/provider) whose "model call" advances one chatfleet chat.
// The server runs the agent loop; one doStream is one segment of a turn: it sends the newest
// user message (its file parts uploaded first, files.js; creating the chat on the first turn,
// with the client tools as dynamic tools and the system prompt) or submits the client tools'
// results, then follows the chat's event stream until the segment ends (turn.js). The AI
// SDK's loop and the server's meet at the client-tool boundary: a segment that pauses in
// requires_action finishes with "tool-calls", the SDK runs the tools' execute, and the next
// doStream submits their results.

import { ChatfleetAbortError } from "./errors.js";
import { userContent } from "./files.js";
import { Turn } from "./turn.js";

/** The response_format name rule (ARCHITECTURE.md §8): ^[A-Za-z0-9_-]{1,64}$. */
const formatName = (name) => (String(name ?? "result").replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64) || "result");

/** A tool-result part's output as chatfleet's {output, is_error}. */
function toolOutput(output) {
  switch (output?.type) {
    case "json":
    case "text":
    case "content":
      return { output: output.value ?? null, is_error: false };
    case "error-text":
    case "error-json":
      return { output: output.value ?? null, is_error: true };
    case "execution-denied":
      return { output: output.reason ?? "execution denied", is_error: true };
    default:
      return { output: output ?? null, is_error: false };
  }
}

/** response_format for a json responseFormat (the schema as given: zod's JSON Schema or
 * the caller's own). */
export function responseFormatOf(rf) {
  if (rf?.type !== "json") return undefined;
  const json_schema = { name: formatName(rf.name), schema: rf.schema ?? {} };
  if (rf.description) json_schema.description = String(rf.description).slice(0, 1024);
  return { type: "json_schema", json_schema };
}

export class ChatfleetLanguageModel {
  /**
   * @param {{client: import('./client.js').ChatfleetClient, model?:string, chatId?:string}} o
   *   model: a model config name (client.listModels()); the gateway's default without one.
   *   chatId: continue an existing chat (its tools were fixed when it was created).
   */
  constructor({ client, model, chatId }) {
    this.specificationVersion = "v4";
    this.provider = "chatfleet";
    this.modelId = model ?? "default";
    // Every URL "supported": the SDK then hands file parts' URLs over as they are instead of
    // downloading them, and files.js refuses them (the agent never fetches on its own).
    this.supportedUrls = { "*": [/^/] };
    this.client = client;
    this.configName = model;
    this.chatId = chatId;
    this.lastMessageId = 0; // the newest message id this session has seen
    this.handled = new Set(); // tool call ids handed to the caller
    this.requestId = undefined; // the open structured request of the current turn
    this.inFlight = undefined; // {chatId, done} of the segment being followed
  }

  /** Forgets the chat: the next turn creates a new one. */
  reset() {
    this.chatId = undefined;
    this.lastMessageId = 0;
    this.handled.clear();
    this.requestId = undefined;
  }

  async s_newest(chatId, signal) {
    const [m] = await this.client.getMessages(chatId, { limit: 1 }, signal);
    return m?.id ?? 0;
  }

  /** Starts a segment: sends what the prompt adds; returns the Turn to follow. */
  async s_start(options, emit) {
    const { prompt, tools = [], responseFormat, abortSignal } = options;
    const clientTools = new Set(tools.filter((t) => t.type === "function").map((t) => t.name));
    const structured = responseFormat?.type === "json";
    const last = prompt[prompt.length - 1];
    const common = { emit, clientTools, structured, handled: this.handled };
    if (last?.role === "tool") {
      const results = last.content
        .filter((p) => p.type === "tool-result")
        .map((p) => ({ tool_call_id: p.toolCallId, ...toolOutput(p.output) }));
      const baseline = Math.max(this.lastMessageId, await this.s_newest(this.chatId, abortSignal));
      await this.client.submitToolResults(this.chatId, results, abortSignal);
      return new Turn({ ...common, chatId: this.chatId, userId: baseline, baseline, requestId: this.requestId, ran: true });
    }
    const lastUser = [...prompt].reverse().find((m) => m.role === "user");
    if (!lastUser) throw new TypeError("chatfleet: the prompt has no user message");
    const content = await userContent(this.client, lastUser, abortSignal);
    const response_format = responseFormatOf(responseFormat);
    if (!this.chatId) {
      const system = prompt.filter((m) => m.role === "system").map((m) => m.content).join("\n\n");
      const body = { content };
      if (system) body.system_prompt = system;
      if (this.configName) body.model = this.configName;
      if (response_format) body.response_format = response_format;
      const dyn = tools
        .filter((t) => t.type === "function")
        .map((t) => ({ name: t.name, description: t.description ?? "", input_schema: t.inputSchema ?? { type: "object" } }));
      if (dyn.length > 0) body.dynamic_tools = dyn;
      const chat = await this.client.createChat(body, abortSignal);
      this.chatId = chat.id;
      this.requestId = undefined;
      return new Turn({ ...common, chatId: this.chatId, baseline: 0 });
    }
    const baseline = Math.max(this.lastMessageId, await this.s_newest(this.chatId, abortSignal));
    const out = await this.client.sendMessage(this.chatId, { content, ...(response_format ? { response_format } : {}) }, abortSignal);
    this.requestId = out?.message?.structured_output_request_id ?? out?.queued_message?.structured_output_request_id;
    return new Turn({ ...common, chatId: this.chatId, baseline, userId: out?.message?.id, requestId: this.requestId });
  }

  /** POST /interrupt for the chat being followed, once; never throws. */
  async s_interrupt(chatId) {
    if (!chatId) return false;
    try {
      await this.client.interruptChat(chatId, AbortSignal.timeout(8000));
      return true;
    } catch {
      return false;
    }
  }

  async doStream(options) {
    const signal = options.abortSignal;
    const stop = new AbortController(); // ends the event stream when the segment is over
    let turn;
    let finished = false;
    const self = this;
    const stream = new ReadableStream({
      async start(controller) {
        const emit = (part) => controller.enqueue(part);
        const onAbort = async () => {
          stop.abort();
          if (finished) return;
          finished = true;
          const interrupted = await self.s_interrupt(turn?.chatId ?? self.chatId);
          controller.error(new ChatfleetAbortError({ chatId: turn?.chatId ?? self.chatId, interrupted, cause: signal.reason }));
        };
        if (signal?.aborted) return onAbort();
        signal?.addEventListener("abort", onAbort, { once: true });
        try {
          emit({ type: "stream-start", warnings: [] });
          turn = await self.s_start(options, emit);
          emit({ type: "response-metadata", id: turn.chatId, modelId: self.modelId, timestamp: new Date() });
          const events = self.client.streamEvents(turn.chatId, { afterId: turn.baseline, signal: stop.signal });
          for await (const ev of events) {
            if (ev.type === "message" && ev.data?.message?.id > self.lastMessageId) self.lastMessageId = ev.data.message.id;
            await turn.onEvent(ev, self.client);
            if (turn.done) break;
          }
          if (finished) return;
          if (!turn.done) throw new ChatfleetAbortError({ chatId: turn.chatId, interrupted: false });
          finished = true;
          turn.finish();
          controller.close();
        } catch (err) {
          if (finished) return;
          finished = true;
          controller.error(err);
        } finally {
          stop.abort();
          signal?.removeEventListener("abort", onAbort);
        }
      },
      async cancel() {
        // The consumer tore the stream down: interrupt the server-side run too.
        stop.abort();
        if (!finished) {
          finished = true;
          await self.s_interrupt(turn?.chatId ?? self.chatId);
        }
      },
    });
    return { stream, request: { body: { chat_id: this.chatId } } };
  }

  /** The same segment, collected: text and reasoning joined per block, tool calls and
   * results, the finish reason and usage. Rejects with the segment's error. */
  async doGenerate(options) {
    const { stream } = await this.doStream(options);
    const content = [];
    const blocks = new Map();
    let finishReason = { unified: "other", raw: undefined };
    let usage;
    let response;
    let structuredOutputText;
    for await (const part of stream) {
      switch (part.type) {
        case "text-start":
        case "reasoning-start": {
          const c = { type: part.type === "text-start" ? "text" : "reasoning", text: "" };
          blocks.set(part.id, c);
          content.push(c);
          break;
        }
        case "text-delta":
        case "reasoning-delta":
          blocks.get(part.id).text += part.delta;
          break;
        case "tool-call":
        case "tool-result":
          content.push(part);
          break;
        case "response-metadata":
          response = { id: part.id, modelId: part.modelId, timestamp: part.timestamp };
          break;
        case "finish":
          finishReason = part.finishReason;
          usage = part.usage;
          break;
        default:
          break;
      }
    }
    if (options.responseFormat?.type === "json") {
      structuredOutputText = content.filter((c) => c.type === "text").map((c) => c.text).join("");
    }
    return { content, finishReason, usage, warnings: [], response, structuredOutputText };
  }
}
