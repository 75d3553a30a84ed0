// chats: the chat list (GET /chats, then live from GET /chats/watch) and the chat view (GET
// /chats/{id}/stream: committed messages, parts as they stream, tool calls, receipts,
// retries, errors), with the interrupt and archive buttons and a send box that attaches files.
// A message's file parts show by name: a download link while the file is among the chat's
// live files (GET /chats/{id} "files"), "expired" once it was evicted (ARCHITECTURE.md §3,
// "Files"). The link fetches the bytes with the token and hands them over as an object URL.

import { EXTENSIONS, mediaTypeOf } from "./api.js";

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
    this.files = undefined; // the open chat's live files by id; undefined until read
    this.objectUrls = []; // downloads handed to the browser, revoked when the chat closes
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
    for (const u of this.objectUrls) URL.revokeObjectURL(u);
    this.objectUrls = [];
    this.files = undefined;
    this.filesReading = undefined;
    this.filesCover = new Map(); // message id -> the revision the files were read after
    if (!chatId) return;
    this.messages = new Map();
    this.shown = new Map(); // message id -> the message, to draw again when the files change
    this.s_refresh_files();
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
        this.shown.clear();
        $("messages").replaceChildren();
        this.s_refresh_files(); // a clear releases the chat's files
        return this.s_note("history reset");
      default:
        return undefined;
    }
  }

  // Draws m (again when redraw: the chat's files changed).
  s_message(m, redraw = false) {
    if (!m || m.deleted) return;
    const so = m.structured_output;
    const parts = (m.content ?? []).filter((p) => p.type !== "file");
    const attached = (m.content ?? []).filter((p) => p.type === "file" && p.file_id);
    const text = so
      ? so.status === "succeeded"
        ? `receipt ${so.status}: ${JSON.stringify(so.value)}`
        : `receipt ${so.status}: ${so.code ?? so.error?.code ?? "?"}`
      : parts.map(partText).join("\n");
    const li = el(
      "li",
      { "data-id": String(m.id), "data-role": m.role, class: so ? "receipt" : "" },
      el("span", { class: "role", textContent: m.role }),
      text,
    );
    // The files list tells of this revision's files once it was read after it was shown.
    const known = this.files !== undefined && this.filesCover.get(m.id) === (m.revision ?? 0);
    if (attached.length > 0) {
      li.append(el("div", { class: "attachments" }, ...attached.map((p) => this.s_attachment(p, known))));
    }
    const old = this.messages.get(m.id);
    if (old) old.replaceWith(li);
    else $("messages").append(li);
    this.messages.set(m.id, li);
    this.shown.set(m.id, m);
    // A message (or revision) newer than the last read of the files linked its own and may
    // have evicted older ones: read them again. (An older one's missing file is expired.)
    if (!redraw && attached.length > 0 && !known) this.s_refresh_files();
    if (m.role === "assistant") {
      this.live = "";
      $("live").textContent = "";
    }
  }

  // One attachment of a message: while the file is live, a link that fetches its bytes with
  // the token on the first click and hands them to the browser as an object URL (a plain
  // link could not send the Authorization header); "expired" once the chat no longer lists
  // it (evicted past the chat's cap, or released by a clear); just its name until a read of
  // the list tells (known).
  s_attachment(p, known) {
    const name = p.name || p.file_id;
    const attrs = { "data-file": p.file_id, title: p.media_type ?? "" };
    const live = this.files?.has(p.file_id);
    if (!live && !known) return el("span", { ...attrs, class: "attachment pending", textContent: name });
    if (!live) {
      return el(
        "span",
        { ...attrs, class: "attachment expired" },
        el("span", { class: "name", textContent: name }),
        " ",
        el("em", { textContent: "expired" }),
      );
    }
    const a = el("a", { ...attrs, class: "attachment", href: "#", download: name, textContent: name });
    a.onclick = async (e) => {
      if (a.dataset.ready) return; // the object URL is in place: the browser downloads it
      e.preventDefault();
      try {
        const url = URL.createObjectURL(await this.api.download(p.file_id));
        this.objectUrls.push(url);
        a.href = url;
        a.dataset.ready = "true";
        a.click();
      } catch (err) {
        this.s_note(`download ${name}: ${err.message}`, "error");
      }
    };
    return a;
  }

  // Reads the open chat's live files and draws the messages with attachments again; one read
  // at a time, and one more when asked during it.
  async s_refresh_files() {
    if (this.filesReading) {
      this.filesAgain = true;
      return;
    }
    const chatId = this.chatId;
    this.filesReading = true;
    do {
      this.filesAgain = false;
      // Every message revision shown by now was committed, its files linked, before this read.
      const cover = new Map([...this.shown].map(([id, m]) => [id, m.revision ?? 0]));
      try {
        const chat = await this.api.call("GET", `/api/v2/chats/${chatId}`);
        if (chatId !== this.chatId) return;
        this.files = new Map((chat.files ?? []).map((f) => [f.id, f]));
        this.filesCover = cover;
      } catch (err) {
        this.s_note(`files: ${err.message}`, "error");
      }
    } while (this.filesAgain && chatId === this.chatId);
    if (chatId !== this.chatId) return;
    this.filesReading = undefined;
    for (const m of this.shown.values()) {
      if ((m.content ?? []).some((p) => p.type === "file")) this.s_message(m, true);
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

  // Sends the typed message with the chosen files: each uploaded first (a type the gateway
  // does not store is refused before anything is sent), then named by a file part after the
  // text.
  async s_send(e) {
    e.preventDefault();
    const text = $("send-text").value;
    const chosen = [...$("send-files").files];
    await this.s_action(async () => {
      const refused = chosen.find((f) => !mediaTypeOf(f));
      if (refused) throw new Error(`${refused.name}: not a type chatfleet stores (${EXTENSIONS})`);
      const content = [{ type: "text", text }];
      for (const f of chosen) {
        const up = await this.api.upload(f);
        content.push({ type: "file", file_id: up.id });
      }
      await this.api.call("POST", `/api/v2/chats/${this.chatId}/messages`, { content });
      $("send-text").value = "";
      $("send-files").value = "";
    });
  }
}
