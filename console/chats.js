// chats: the chat list (GET /chats, then live from GET /chats/watch) and the chat view (GET
// /chats/{id}/stream: committed messages, parts as they stream, tool calls, receipts,
// retries, errors), with the interrupt, pin and archive buttons, a labels editor and a send
// box that attaches files. The list can be searched (GET /chats?q=...&label=k:v, ARCHITECTURE.md
// §11, "Finding chats") and shows each chat's labels, pin, and the worker holding it with the
// age of its lease; the open chat's heading follows its title as it is generated.
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
const SEARCH_AGAIN_MS = 1000; // a filtered list is read again this long after a watch event

/** Labels typed as "k:v k2:v2" (pairs split by spaces or commas) as {k: v}; an Error naming a
 * pair without a key and a colon. */
export function parseLabels(text) {
  const labels = {};
  for (const pair of text.split(/[\s,]+/).filter(Boolean)) {
    const at = pair.indexOf(":");
    if (at <= 0) throw new Error(`label "${pair}": write key:value`);
    labels[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return labels;
}

/** A chat's labels as the editor shows them. */
function labelsText(labels) {
  return Object.entries(labels ?? {})
    .map(([k, v]) => `${k}:${v}`)
    .join(" ");
}

/** The order GET /chats answers in: pinned chats by pin_order, then the newest update first. */
function listOrder(a, b) {
  const pa = a.pin_order || Infinity;
  const pb = b.pin_order || Infinity;
  if (pa !== pb) return pa - pb;
  return String(b.updated_at).localeCompare(String(a.updated_at)) || String(b.id).localeCompare(String(a.id));
}

/** The worker holding c and its lease's age when read ("1a2b3c4d 0.4s"), or "". */
function holder(c) {
  if (!c.worker_id) return "";
  const age = c.lease_age_ms === undefined ? "" : ` ${(c.lease_age_ms / 1000).toFixed(1)}s`;
  return `${c.worker_id.slice(0, 8)}${age}`;
}

export class ChatsView {
  constructor(api) {
    this.api = api;
    this.chats = new Map();
    this.watch = undefined; // AbortController of the watch
    this.stream = undefined; // AbortController of the open chat's stream
    this.chatId = undefined;
    this.files = undefined; // the open chat's live files by id; undefined until read
    this.objectUrls = []; // downloads handed to the browser, revoked when the chat closes
    this.filter = { q: "", labels: {} };
    $("new-chat").onsubmit = (e) => this.s_create(e);
    $("search").onsubmit = (e) => this.s_search(e);
    $("labels").onsubmit = (e) => this.s_save_labels(e);
    $("pin").onclick = () =>
      this.s_action(async () => {
        const pinned = this.chats.get(this.chatId)?.pin_order > 0;
        await this.api.call("PATCH", `/api/v2/chats/${this.chatId}`, { pin_order: pinned ? 0 : 1 });
        await this.s_load_list();
        await this.s_refresh_open();
      });
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
      await this.s_load_list();
      this.families = setInterval(() => this.s_refresh_families(), FAMILY_REFRESH_MS);
      this.api.follow("/api/v2/chats/watch", {
        signal: this.watch.signal,
        onEvent: (type, data) => this.s_watched(data?.chat),
      });
    }
    if (chatId !== this.chatId) this.s_open(chatId);
  }

  // A chat the watch tells of: drawn at once when the list shows it (a search's list shows only
  // its results, so a chat it does not hold makes the search run again, a little later).
  s_watched(chat) {
    if (!chat?.id) return;
    if (this.s_filtered() && !this.chats.has(chat.id)) {
      clearTimeout(this.searchAgain);
      this.searchAgain = setTimeout(() => this.s_load_list(), SEARCH_AGAIN_MS);
      return;
    }
    this.chats.set(chat.id, chat);
    this.s_render_list();
    if (chat.id === this.chatId) this.s_header(chat);
  }

  s_filtered() {
    return this.filter.q !== "" || Object.keys(this.filter.labels).length > 0;
  }

  // Reads the list as GET /chats answers it for the current search (all of it when none).
  async s_load_list() {
    const params = new URLSearchParams({ limit: "100" });
    if (this.filter.q) params.set("q", this.filter.q);
    for (const [k, v] of Object.entries(this.filter.labels)) params.append("label", `${k}:${v}`);
    try {
      const out = await this.api.call("GET", `/api/v2/chats?${params}`);
      this.chats.clear();
      for (const c of out) this.chats.set(c.id, c);
    } catch (err) {
      this.s_note(`chat list: ${err.message}`, "error");
    }
    this.s_render_list();
  }

  async s_search(e) {
    e.preventDefault();
    try {
      this.filter = { q: $("search-q").value.trim(), labels: parseLabels($("search-labels").value) };
    } catch (err) {
      return this.s_note(err.message, "error");
    }
    await this.s_load_list();
  }

  async s_save_labels(e) {
    e.preventDefault();
    await this.s_action(async () => {
      await this.api.call("PATCH", `/api/v2/chats/${this.chatId}`, { labels: parseLabels($("labels-text").value) });
      await this.s_refresh_open();
    });
  }

  // The open chat read again: its title, state, pin, labels and holder in the heading.
  async s_refresh_open() {
    const chatId = this.chatId;
    if (!chatId) return;
    try {
      const chat = await this.api.call("GET", `/api/v2/chats/${chatId}`);
      if (chatId !== this.chatId) return;
      if (!this.s_filtered() || this.chats.has(chat.id)) this.chats.set(chat.id, chat);
      this.s_header(chat);
      this.s_render_list();
    } catch (err) {
      this.s_note(`chat: ${err.message}`, "error");
    }
  }

  // The open chat's heading from chat: the title (live: generated titles arrive after the
  // first answer), the state, who holds it, the pin button and the labels (left alone while
  // being typed in).
  s_header(chat) {
    $("chat-title").textContent = chat.title || chat.id;
    if (chat.status) this.s_status(chat.status);
    const h = holder(chat);
    $("chat-worker").textContent = h ? `worker ${h}` : "no worker";
    $("pin").textContent = chat.pin_order > 0 ? "Unpin" : "Pin";
    if (document.activeElement !== $("labels-text")) $("labels-text").value = labelsText(chat.labels);
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
  // read again every FAMILY_REFRESH_MS, and so is the open chat.
  async s_refresh_families() {
    this.s_refresh_open();
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

  // The roots in the list's order (pins first, then the newest update), each followed by its
  // subagent family as a tree (ARCHITECTURE.md §3, "Families"): a member's state, its labels
  // and pin, and its worker (with its lease's age) while one holds it. A root's JSON embeds
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
        el("span", { class: "title", textContent: c.title || c.id }),
        ...(c.pin_order > 0 ? [el("span", { class: "pinned", textContent: `pinned ${c.pin_order}` })] : []),
        ...Object.entries(c.labels ?? {}).map(([k, v]) => el("span", { class: "label", textContent: `${k}:${v}` })),
        ...(c.worker_id ? [" ", el("span", { class: "worker", textContent: holder(c) })] : []),
      );
      li.onclick = (e) => (e.stopPropagation(), (location.hash = `#/chats/${c.id}`));
      ul.append(li);
      for (const k of kids(c.id)) add(k, depth + 1);
    };
    const roots = [...all.values()].filter((c) => !c.parent_chat_id).sort(listOrder);
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
    $("chat-status").textContent = "";
    this.s_header(this.chats.get(chatId) ?? { id: chatId });
    this.s_refresh_open();
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
