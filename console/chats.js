// chats: the chat list (GET /chats, then live from GET /chats/watch) and the chat view (GET
// /chats/{id}/stream: committed messages, parts as they stream, tool calls, receipts,
// retries, errors), with the interrupt and archive buttons and a send box.

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c);
  return e;
}

/** A readable line per content part of a stored message (ARCHITECTURE.md §3, "Content parts"). */
function partText(p) {
  switch (p.type) {
    case "text":
      return p.text;
    case "reasoning":
      return `(reasoning) ${p.text ?? ""}`;
    case "tool-call":
      return `[tool call ${p.tool_name} ${JSON.stringify(p.args ?? {})}]`;
    case "tool-result":
      return `[${p.is_error ? "tool error" : "tool result"} ${p.tool_name}: ${JSON.stringify(p.result)}]`;
    default:
      return `[${p.type}]`;
  }
}

const FAMILY_REFRESH_MS = 1000;

export class ChatsView {
  constructor(api) {
    this.api = api;
    this.chats = new Map();
    this.watch = undefined; // AbortController of the watch
    this.stream = undefined; // AbortController of the open chat's stream
    this.chatId = undefined;
    $("new-chat").onsubmit = (e) => this.s_create(e);
    $("send").onsubmit = (e) => this.s_send(e);
    $("interrupt").onclick = () => this.s_action(() => this.api.call("POST", `/api/v2/chats/${this.chatId}/interrupt`));
    $("archive").onclick = () =>
      this.s_action(async () => {
        await this.api.call("PATCH", `/api/v2/chats/${this.chatId}`, { archived: true });
        location.hash = "#/chats";
      });
  }

  async enter(chatId) {
    if (!this.watch) {
      this.watch = new AbortController();
      try {
        const out = await this.api.call("GET", "/api/v2/chats?limit=100");
        for (const c of out.chats ?? out ?? []) this.chats.set(c.id, c);
      } catch (err) {
        this.s_note(`chat list: ${err.message}`);
      }
      this.s_render_list();
      this.families = setInterval(() => this.s_refresh_families(), FAMILY_REFRESH_MS);
      this.api.follow("/api/v2/chats/watch", {
        signal: this.watch.signal,
        onEvent: (type, data) => {
          if (data?.chat?.id) {
            this.chats.set(data.chat.id, data.chat);
            this.s_render_list();
            if (data.chat.id === this.chatId) this.s_status(data.chat.status);
          }
        },
      });
    }
    if (chatId !== this.chatId) this.s_open(chatId);
  }

  leave(full = false) {
    this.s_open(undefined);
    if (full) {
      this.watch?.abort();
      this.watch = undefined;
      clearInterval(this.families);
      this.chats.clear();
    }
  }

  // The watch tells of a member's state, not of the worker that takes it: while a family has a
  // member at work, its root (whose JSON embeds the family with each member's worker_id) is
  // read again every FAMILY_REFRESH_MS.
  async s_refresh_families() {
    const busy = new Set(["running", "interrupting", "requires_action"]);
    const members = [...this.chats.values()].flatMap((c) => [c, ...(c.children ?? [])]);
    const roots = new Set(members.filter((m) => m.root_chat_id && busy.has(m.status)).map((m) => m.root_chat_id));
    for (const id of roots) {
      try {
        const root = await this.api.call("GET", `/api/v2/chats/${id}`);
        this.chats.set(root.id, root);
        for (const m of root.children ?? []) this.chats.set(m.id, m);
      } catch (err) {
        this.s_note(`family of ${id}: ${err.message}`);
      }
    }
    if (roots.size) this.s_render_list();
  }

  // The roots, newest first, each followed by its subagent family as a tree (ARCHITECTURE.md
  // §3, "Families"): a member's state, and its worker while one holds it. A root's JSON embeds
  // its family; the watch brings each member's own updates, which win.
  s_render_list() {
    const ul = $("chat-list");
    ul.replaceChildren();
    const all = new Map();
    for (const c of this.chats.values()) for (const m of c.children ?? []) all.set(m.id, m);
    for (const c of this.chats.values()) all.set(c.id, c);
    const byAge = (a, b) => String(a.created_at).localeCompare(String(b.created_at));
    const kids = (id) => [...all.values()].filter((m) => m.parent_chat_id === id).sort(byAge);
    const add = (c, depth) => {
      const status = c.waiting_on_agents ? "waiting_on_agents" : c.status;
      const li = el(
        "li",
        {
          "data-chat": c.id,
          ...(c.parent_chat_id ? { "data-parent": c.parent_chat_id } : {}),
          class: `${c.id === this.chatId ? "selected" : ""} ${c.archived ? "archived" : ""} ${depth ? "child" : ""}`,
          style: `padding-left: ${0.5 + 1.25 * depth}em`,
        },
        el("span", { class: `status ${c.status}`, textContent: status }),
        " ",
        c.title || c.id,
        ...(c.worker_id ? [" ", el("span", { class: "worker", textContent: c.worker_id.slice(0, 8) })] : []),
      );
      li.onclick = (e) => (e.stopPropagation(), (location.hash = `#/chats/${c.id}`));
      ul.append(li);
      for (const k of kids(c.id)) add(k, depth + 1);
    };
    const roots = [...all.values()].filter((c) => !c.parent_chat_id).sort((a, b) => byAge(b, a));
    for (const c of roots) add(c, 0);
  }

  s_open(chatId) {
    this.stream?.abort();
    this.stream = undefined;
    this.chatId = chatId;
    $("chat-view").hidden = !chatId;
    this.s_render_list();
    if (!chatId) return;
    this.messages = new Map();
    this.parts = new Set();
    this.episode = "";
    this.live = "";
    $("messages").replaceChildren();
    $("events").replaceChildren();
    $("live").textContent = "";
    const chat = this.chats.get(chatId);
    $("chat-title").textContent = chat?.title || chatId;
    $("chat-status").textContent = "";
    this.stream = new AbortController();
    this.api.follow(`/api/v2/chats/${chatId}/stream`, {
      signal: this.stream.signal,
      resume: true,
      onEvent: (type, data) => this.s_event(type, data),
      onEnd: (err) => this.s_note(`stream ended: ${err.message}`),
    });
  }

  s_event(type, data) {
    switch (type) {
      case "message":
        return this.s_message(data.message);
      case "message_part":
        return this.s_part(data.message_part);
      case "preview_reset":
        this.live = "";
        $("live").textContent = "";
        return this.s_note("preview reset (a new attempt)");
      case "status":
        this.s_status(data.status.status);
        return this.s_note(`status ${data.status.status}`);
      case "action_required":
        return this.s_note(
          `waiting for tool results: ${data.action_required.tool_calls.map((c) => c.tool_name).join(", ")}`,
        );
      case "retry":
        return this.s_note(`retry ${JSON.stringify(data.retry)}`);
      case "error":
        return this.s_note(`error ${JSON.stringify(data.error)}`, "error");
      case "history_reset":
        this.messages.clear();
        $("messages").replaceChildren();
        return this.s_note("history reset");
      default:
        return undefined;
    }
  }

  s_message(m) {
    if (!m || m.deleted) return;
    const so = m.structured_output;
    const text = so
      ? so.status === "succeeded"
        ? `receipt ${so.status}: ${JSON.stringify(so.value)}`
        : `receipt ${so.status}: ${so.code ?? so.error?.code ?? "?"}`
      : (m.content ?? []).map(partText).join("\n");
    const li = el(
      "li",
      { "data-id": String(m.id), "data-role": m.role, class: so ? "receipt" : "" },
      el("span", { class: "role", textContent: m.role }),
      text,
    );
    const old = this.messages.get(m.id);
    if (old) old.replaceWith(li);
    else $("messages").append(li);
    this.messages.set(m.id, li);
    if (m.role === "assistant") {
      this.live = "";
      $("live").textContent = "";
    }
  }

  s_part(mp) {
    const key = `${mp.history_version}:${mp.generation_attempt}:${mp.seq}`;
    if (this.parts.has(key)) return;
    this.parts.add(key);
    const episode = `${mp.history_version}:${mp.generation_attempt}`;
    if (episode !== this.episode) {
      this.episode = episode;
      this.live = "";
    }
    const p = mp.part ?? {};
    if (p.type === "text") this.live += p.text;
    else if (p.type === "tool-call") this.live += `\n[tool call ${p.tool_name}]\n`;
    else if (p.status) this.live += `\n[${p.status}]\n`;
    $("live").textContent = this.live;
  }

  s_status(status) {
    const s = $("chat-status");
    s.textContent = status;
    s.className = `status ${status}`;
  }

  s_note(text, cls = "") {
    $("events").append(el("li", { class: cls, textContent: `${new Date().toISOString().slice(11, 23)} ${text}` }));
  }

  async s_action(fn) {
    try {
      await fn();
    } catch (err) {
      this.s_note(err.message, "error");
    }
  }

  async s_create(e) {
    e.preventDefault();
    const text = $("new-text").value;
    await this.s_action(async () => {
      const chat = await this.api.call("POST", "/api/v2/chats", { content: [{ type: "text", text }] });
      $("new-text").value = "";
      this.chats.set(chat.id, chat);
      location.hash = `#/chats/${chat.id}`;
    });
  }

  async s_send(e) {
    e.preventDefault();
    const text = $("send-text").value;
    await this.s_action(async () => {
      await this.api.call("POST", `/api/v2/chats/${this.chatId}/messages`, { content: [{ type: "text", text }] });
      $("send-text").value = "";
    });
  }
}
