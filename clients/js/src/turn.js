// turn: follows one segment of a turn on the chat's event stream and turns it into AI SDK
// LanguageModelV4 stream parts (text deltas, provider-executed tool calls and results, the
// client tool calls the server waits for, finish with usage). A segment ends when the chat
// settles (waiting, error), pauses for client tools (requires_action) or, for a structured
// request, when its receipt arrives. The text ledger follows cli/ask.c: a committed message
// yields only the tail the streamed parts did not show, a replayed part nothing, and a
// rewrite that deltas cannot express is suppressed rather than shown twice.

import { ChatfleetChatError, ChatfleetStructuredOutputError } from "./errors.js";

/** The finalizer tool the server offers for structured requests (ARCHITECTURE.md §8): it is
 * the server's, never shown as a call. */
const FINALIZER = "submit_structured_output";

const textOf = (m) =>
  (m?.content ?? [])
    .filter((p) => p?.type === "text" && typeof p.text === "string")
    .map((p) => p.text)
    .join("");

/** The code of a failed receipt in either shape: {"code"} or {"error":{"code","message"}}. */
export function receiptFailure(so) {
  const code = so?.code ?? so?.error?.code ?? "unknown";
  const detail = so?.error?.message;
  return { code, detail };
}

export class Turn {
  /**
   * @param {{chatId:string, emit:(part:object)=>void, clientTools:Set<string>,
   *   structured:boolean, userId?:number, baseline:number, requestId?:string,
   *   handled:Set<string>, ran?:boolean}} o
   *   userId: our user message when known; else the first user message after baseline.
   *   handled: the tool call ids already handed to the caller (kept across segments).
   */
  constructor(o) {
    Object.assign(this, o);
    this.ran = Boolean(o.ran);
    this.episodeKey = "";
    this.episode = "";
    this.shown = "";
    this.printed = new Map(); // message id -> the text shown for it
    this.usage = new Map(); // message id -> its usage
    this.textId = undefined;
    this.reasoningId = undefined;
    this.blocks = 0;
    this.finishReason = undefined; // set when the segment is over
  }

  get done() {
    return this.finishReason !== undefined;
  }

  /** Emits visible text: a text block, or for a structured request a reasoning block (its
   * text is the value's JSON, nothing else). */
  s_text(delta) {
    if (!delta) return;
    if (this.structured) {
      if (!this.reasoningId) {
        this.reasoningId = `r${++this.blocks}`;
        this.emit({ type: "reasoning-start", id: this.reasoningId });
      }
      this.emit({ type: "reasoning-delta", id: this.reasoningId, delta });
      return;
    }
    if (!this.textId) {
      this.textId = `t${++this.blocks}`;
      this.emit({ type: "text-start", id: this.textId });
    }
    this.emit({ type: "text-delta", id: this.textId, delta });
  }

  s_close_blocks() {
    if (this.textId) this.emit({ type: "text-end", id: this.textId });
    if (this.reasoningId) this.emit({ type: "reasoning-end", id: this.reasoningId });
    this.textId = this.reasoningId = undefined;
  }

  /** Handles one deduplicated stream event (client.streamEvents); may throw a typed error. */
  async onEvent(ev, client) {
    const d = ev.data;
    switch (ev.type) {
      case "message":
        return this.s_message(d?.message);
      case "message_part":
        return this.s_part(d?.message_part);
      case "preview_reset":
        this.episode = "";
        this.episodeKey = "";
        return;
      case "action_required":
        return this.s_action(d?.action_required?.tool_calls ?? []);
      case "status":
        return this.s_status(d?.status?.status, client);
      default:
        return;
    }
  }

  s_part(mp) {
    const part = mp?.part;
    if (!this.userId || mp?.role !== "assistant" || part?.type !== "text" || !part.text) return;
    const key = `${mp.history_version}:${mp.generation_attempt}`;
    if (key !== this.episodeKey) {
      this.episodeKey = key; // another episode: its text starts over
      this.episode = "";
    }
    this.ran = true;
    this.episode += part.text;
    if (this.episode.startsWith(this.shown) && this.episode.length > this.shown.length) {
      this.s_text(this.episode.slice(this.shown.length));
      this.shown = this.episode;
    }
  }

  s_message(m) {
    if (!m || typeof m.id !== "number") return;
    const so = m.structured_output;
    if (so && (so.request_id === this.requestId || (!this.requestId && this.userId && m.id > this.userId))) {
      return this.s_receipt(so);
    }
    if (m.role === "user") {
      if (!this.userId && m.id > this.baseline) {
        if (!this.structured || !this.requestId || m.structured_output_request_id === this.requestId) {
          this.userId = m.id;
          this.requestId ??= m.structured_output_request_id;
        }
      }
      return;
    }
    if (!this.userId || m.id <= this.userId) return;
    if (m.role === "assistant" && !so) this.s_assistant(m);
    else if (m.role === "tool") this.s_tool_results(m);
  }

  s_assistant(m) {
    this.ran = true;
    if (m.usage) this.usage.set(m.id, m.usage);
    const text = textOf(m);
    const before = this.printed.get(m.id) ?? this.shown;
    if (text.startsWith(before)) this.s_text(text.slice(before.length));
    this.printed.set(m.id, text);
    this.shown = "";
    this.episode = "";
    for (const p of m.content ?? []) {
      if (p?.type !== "tool-call" || p.tool_name === FINALIZER) continue;
      if (this.clientTools.has(p.tool_name)) continue; // handed over on action_required
      if (this.handled.has(p.tool_call_id)) continue;
      this.handled.add(p.tool_call_id);
      this.emit({
        type: "tool-call",
        toolCallId: p.tool_call_id,
        toolName: p.tool_name,
        input: p.args_text ?? JSON.stringify(p.args ?? {}),
        providerExecuted: true,
        dynamic: true,
      });
    }
  }

  s_tool_results(m) {
    for (const p of m.content ?? []) {
      if (p?.type !== "tool-result" || p.tool_name === FINALIZER) continue;
      if (this.clientTools.has(p.tool_name)) continue; // the caller's own result
      const key = `result:${p.tool_call_id}`;
      if (this.handled.has(key)) continue;
      this.handled.add(key);
      this.emit({
        type: "tool-result",
        toolCallId: p.tool_call_id,
        toolName: p.tool_name,
        result: p.result ?? null,
        isError: Boolean(p.is_error),
        dynamic: true,
      });
    }
  }

  s_receipt(so) {
    this.ran = true;
    if (so.status === "succeeded") {
      this.s_close_blocks();
      const id = `t${++this.blocks}`;
      this.emit({ type: "text-start", id });
      this.emit({ type: "text-delta", id, delta: JSON.stringify(so.value ?? null) });
      this.emit({ type: "text-end", id });
      this.finishReason = { unified: "stop", raw: "receipt" };
      return;
    }
    const { code, detail } = receiptFailure(so);
    throw new ChatfleetStructuredOutputError({
      chatId: this.chatId,
      requestId: so.request_id,
      status: so.status ?? "failed",
      code,
      detail,
    });
  }

  s_action(calls) {
    if (!this.userId) return;
    let any = false;
    for (const c of calls) {
      if (!c?.tool_call_id || this.handled.has(c.tool_call_id)) continue;
      this.handled.add(c.tool_call_id);
      any = true;
      this.emit({
        type: "tool-call",
        toolCallId: c.tool_call_id,
        toolName: c.tool_name,
        input: typeof c.args === "string" ? c.args : JSON.stringify(c.args ?? {}),
        ...(this.clientTools.has(c.tool_name) ? {} : { dynamic: true }),
      });
    }
    if (any) this.finishReason = { unified: "tool-calls", raw: "requires_action" };
  }

  async s_status(status, client) {
    if (!status || !this.userId) return;
    if (status === "running" || status === "interrupting") {
      this.ran = true;
      return;
    }
    if (status === "requires_action") {
      this.ran = true;
      return; // action_required follows in the same sync
    }
    if (status === "error") {
      const chat = await client.getChat(this.chatId).catch(() => undefined);
      const e = chat?.last_error ?? {};
      throw new ChatfleetChatError({
        chatId: this.chatId,
        kind: e.kind,
        message: e.message ?? e.detail,
        retryable: e.retryable,
        statusCode: e.status,
      });
    }
    // waiting: the end of the turn, unless nothing of it was seen yet (a status replayed
    // before the turn started).
    if (status === "waiting" && this.ran) {
      if (this.structured) {
        throw new ChatfleetStructuredOutputError({
          chatId: this.chatId,
          requestId: this.requestId,
          status: "failed",
          code: "no_receipt",
          detail: "the turn ended without a receipt",
        });
      }
      this.finishReason = { unified: "stop", raw: "waiting" };
    }
  }

  /** The turn's usage summed over its assistant messages, as LanguageModelV4Usage (the raw
   * wire usage of each message is kept in raw). */
  totalUsage() {
    let input = 0;
    let output = 0;
    let any = false;
    const raw = [];
    for (const u of this.usage.values()) {
      any = true;
      input += Number(u.input_tokens ?? 0);
      output += Number(u.output_tokens ?? 0);
      raw.push(u);
    }
    return {
      inputTokens: {
        total: any ? input : undefined,
        noCache: any ? input : undefined,
        cacheRead: undefined,
        cacheWrite: undefined,
      },
      outputTokens: { total: any ? output : undefined, text: any ? output : undefined, reasoning: undefined },
      raw: { messages: raw },
    };
  }

  /** Closes open blocks and emits the finish part. */
  finish() {
    this.s_close_blocks();
    this.emit({ type: "finish", finishReason: this.finishReason, usage: this.totalUsage() });
  }
}
