// client: chatfleet's REST + SSE API (api-gateway/README.md, ARCHITECTURE.md §7 and §11) for
// one user token. Every call is one fetch; streams are redialed with backoff and deduplicated
// the way ARCHITECTURE.md §7.3 "Resume" asks of a client (cli/clistream.c does the same in C).

import { ChatfleetApiError, ChatfleetStreamError } from "./errors.js";
import { sseEvents } from "./sse.js";

/** The Content-Disposition of an upload named name (RFC 6266): the name quoted, with '_' for
 * each character outside printable ASCII (a header value is bytes), and as RFC 8187 UTF-8
 * (filename*) when it is not plain ASCII, which the gateway prefers. */
export function contentDisposition(name) {
  const quoted = String(name).replace(/[^\x20-\x7e]/g, "_").replace(/["\\]/g, "\\$&");
  if (/^[\x20-\x7e]*$/.test(name)) return `attachment; filename="${quoted}"`;
  const utf8 = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${quoted}"; filename*=UTF-8''${utf8}`;
}

/** Redial backoff: from BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS, reset once an event
 * arrives; FAILURES_MAX failed dials in a row end the stream (about 40 s at the cap). */
export const BACKOFF_MIN_MS = 100;
export const BACKOFF_MAX_MS = 2000;
export const FAILURES_MAX = 25;

/** Statuses of a dial that are worth another try; any other 4xx ends the stream at once. */
const RETRYABLE_4XX = new Set([408, 425, 429]);

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

export class ChatfleetClient {
  /**
   * @param {{baseUrl?:string, token?:string, fetch?:typeof fetch,
   *   failuresMax?:number, onDial?:(d:{path:string, attempt:number, afterId:number})=>void}} o
   *   baseUrl and token default from CHATFLEET_URL and CHATFLEET_TOKEN.
   */
  constructor(o = {}) {
    const env = typeof process !== "undefined" ? process.env : {};
    this.baseUrl = String(o.baseUrl ?? env.CHATFLEET_URL ?? "").replace(/\/+$/, "");
    this.token = o.token ?? env.CHATFLEET_TOKEN;
    if (!this.baseUrl) throw new TypeError("ChatfleetClient: baseUrl (or CHATFLEET_URL) is required");
    if (!this.token) throw new TypeError("ChatfleetClient: token (or CHATFLEET_TOKEN) is required");
    this.fetch = o.fetch ?? globalThis.fetch.bind(globalThis);
    this.failuresMax = o.failuresMax ?? FAILURES_MAX;
    this.onDial = o.onDial;
  }

  /** One REST call; resolves to the parsed body (undefined for 204), rejects with
   * ChatfleetApiError on any other status than ok. */
  request(method, path, body, signal) {
    const headers = body !== undefined ? { "content-type": "application/json" } : {};
    return this.s_exchange(method, path, headers, body !== undefined ? JSON.stringify(body) : undefined, signal);
  }

  /** One request of raw body (a string, bytes or undefined) with headers and the token; the
   * answer as request() gives it. */
  async s_exchange(method, path, headers, body, signal) {
    const res = await this.fetch(this.baseUrl + path, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...headers },
      body,
      signal,
    });
    const text = await res.text();
    let parsed;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    if (!res.ok) throw new ChatfleetApiError({ status: res.status, method, path, body: parsed });
    return parsed;
  }

  /** The model configs the gateway offers: [{name, provider, model, is_default, ...}]. */
  async listModels(signal) {
    const out = await this.request("GET", "/api/v2/chats/models", undefined, signal);
    return Array.isArray(out) ? out : (out?.models ?? []);
  }

  /** POST /chats: {content, system_prompt?, model?, dynamic_tools?, response_format?, title?}. */
  createChat(body, signal) {
    return this.request("POST", "/api/v2/chats", body, signal);
  }

  /** POST /chats/files: bytes (a Uint8Array) stored as a chat file of mediaType, named
   * filename (optional; sent in Content-Disposition, RFC 6266) → {id, name, mime_type,
   * size_bytes, sha256}. The gateway refuses bytes not of the type (400, field Content-Type)
   * and a file over 10 MiB or the owner's quota (413), as ChatfleetApiError. */
  uploadFile({ bytes, mediaType, filename }, signal) {
    const headers = { "content-type": mediaType };
    if (filename) headers["content-disposition"] = contentDisposition(filename);
    return this.s_exchange("POST", "/api/v2/chats/files", headers, bytes, signal);
  }

  getChat(chatId, signal) {
    return this.request("GET", `/api/v2/chats/${chatId}`, undefined, signal);
  }

  /** The chat's subagents as a tree (ARCHITECTURE.md §3, "Families"): [{...chat, children:
   * [...]}], its direct children oldest first, each with its own. A root's JSON embeds its
   * whole family flat (each member with parent_chat_id); a child's is read from its root. */
  async getSubagents(chatId, signal) {
    const chat = await this.getChat(chatId, signal);
    const root = chat.root_chat_id ? await this.getChat(chat.root_chat_id, signal) : chat;
    const family = root.children ?? [];
    const under = (id) =>
      family.filter((m) => m.parent_chat_id === id).map((m) => ({ ...m, children: under(m.id) }));
    return under(chatId);
  }

  /** The chat's messages, newest first (the gateway's default order), limit at most 100. */
  async getMessages(chatId, { limit = 100, afterId, beforeId } = {}, signal) {
    const q = new URLSearchParams({ limit: String(limit) });
    if (afterId !== undefined) q.set("after_id", String(afterId));
    if (beforeId !== undefined) q.set("before_id", String(beforeId));
    const out = await this.request("GET", `/api/v2/chats/${chatId}/messages?${q}`, undefined, signal);
    return out?.messages ?? [];
  }

  /** POST /messages: {content, busy_behavior?, response_format?} → {queued, message?, ...}. */
  sendMessage(chatId, body, signal) {
    return this.request("POST", `/api/v2/chats/${chatId}/messages`, body, signal);
  }

  /** Answers pending dynamic tool calls: [{tool_call_id, output, is_error}]. */
  submitToolResults(chatId, results, signal) {
    return this.request("POST", `/api/v2/chats/${chatId}/tool-results`, { results }, signal);
  }

  interruptChat(chatId, signal) {
    return this.request("POST", `/api/v2/chats/${chatId}/interrupt`, undefined, signal);
  }

  archiveChat(chatId, signal) {
    return this.request("PATCH", `/api/v2/chats/${chatId}`, { archived: true }, signal);
  }

  /**
   * The chat's event stream from after message afterId, as deduplicated events {type, data,
   * id}: redialed on any drop (resuming after the newest message id seen), each message
   * revision, part (history_version, generation_attempt, seq), status change and
   * action_required call passed once. Ends when the consumer stops or signal aborts; throws
   * ChatfleetApiError on a 4xx dial (other than 408/425/429) and ChatfleetStreamError after
   * failuresMax failed dials in a row.
   * @returns {AsyncGenerator<{type:string, data:any, id:number|undefined}>}
   */
  async *streamEvents(chatId, { afterId = 0, signal } = {}) {
    const seen = new Set();
    let status;
    let lastId = afterId;
    let failures = 0;
    let backoff = BACKOFF_MIN_MS;
    let attempt = 0;
    let lastError;
    const path = `/api/v2/chats/${chatId}/stream`;
    while (!signal?.aborted) {
      attempt++;
      this.onDial?.({ path, attempt, afterId: lastId });
      const local = new AbortController();
      const onAbort = () => local.abort();
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        const res = await this.fetch(`${this.baseUrl}${path}?after_id=${lastId}`, {
          headers: { authorization: `Bearer ${this.token}`, accept: "text/event-stream" },
          signal: local.signal,
        });
        if (!res.ok) {
          const body = await res.text().catch(() => "");
          const err = new ChatfleetApiError({ status: res.status, method: "GET", path, body });
          if (res.status >= 400 && res.status < 500 && !RETRYABLE_4XX.has(res.status)) throw err;
          lastError = err;
        } else {
          for await (const ev of sseEvents(res.body)) {
            failures = 0;
            backoff = BACKOFF_MIN_MS;
            const type = ev.event;
            const data = ev.data;
            if (type === "message") {
              const m = data?.message;
              const key = `m:${m?.id}:${m?.revision}`;
              if (seen.has(key)) continue;
              seen.add(key);
              if (typeof m?.id === "number" && m.id > lastId) lastId = m.id;
            } else if (type === "message_part") {
              const p = data?.message_part;
              const key = `p:${p?.history_version}:${p?.generation_attempt}:${p?.seq}`;
              if (seen.has(key)) continue;
              seen.add(key);
            } else if (type === "status") {
              const s = data?.status?.status;
              if (s === status) continue;
              status = s;
            } else if (type === "action_required") {
              const ids = (data?.action_required?.tool_calls ?? []).map((c) => c.tool_call_id);
              const key = `a:${ids.sort().join(",")}`;
              if (seen.has(key)) continue;
              seen.add(key);
            }
            yield { type, data, id: ev.id !== undefined ? Number(ev.id) : undefined };
          }
        }
      } catch (err) {
        if (err instanceof ChatfleetApiError && !RETRYABLE_4XX.has(err.status)) throw err;
        if (signal?.aborted) return;
        lastError = err;
      } finally {
        signal?.removeEventListener("abort", onAbort);
        local.abort(); // the consumer stopped, or a redial: close this connection
      }
      if (signal?.aborted) return;
      if (++failures >= this.failuresMax) {
        throw new ChatfleetStreamError({ chatId, attempts: failures, cause: lastError });
      }
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }

  /** Lifecycle events of all the user's chats (created, status_change, title_change,
   * archived, action_required), redialed like streamEvents; ends when signal aborts. */
  async *watchChats({ signal } = {}) {
    let failures = 0;
    let backoff = BACKOFF_MIN_MS;
    const path = "/api/v2/chats/watch";
    while (!signal?.aborted) {
      try {
        const res = await this.fetch(this.baseUrl + path, {
          headers: { authorization: `Bearer ${this.token}`, accept: "text/event-stream" },
          signal,
        });
        if (!res.ok) {
          const err = new ChatfleetApiError({ status: res.status, method: "GET", path });
          if (res.status < 500 && !RETRYABLE_4XX.has(res.status)) throw err;
        } else {
          for await (const ev of sseEvents(res.body)) {
            failures = 0;
            backoff = BACKOFF_MIN_MS;
            yield { type: ev.event, data: ev.data };
          }
        }
      } catch (err) {
        if (err instanceof ChatfleetApiError) throw err;
        if (signal?.aborted) return;
      }
      if (++failures >= this.failuresMax) throw new ChatfleetStreamError({ chatId: "*", attempts: failures });
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }
}
