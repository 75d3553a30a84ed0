// api: the gateway's REST and SSE API from the page, with the signed-in token on every call
// (fetch, since EventSource cannot send an Authorization header). Streams are redialed with
// backoff and resume after the newest message id seen (ARCHITECTURE.md §7.3, "Resume").

const BACKOFF_MIN_MS = 200;
const BACKOFF_MAX_MS = 5000;

/** The media types the gateway stores (POST /chats/files), by file extension. */
export const MEDIA_TYPES = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  pdf: "application/pdf",
  json: "application/json",
  csv: "text/csv",
  md: "text/markdown",
  txt: "text/plain",
};

/** The extensions of MEDIA_TYPES, as a message shows them. */
export const EXTENSIONS = Object.keys(MEDIA_TYPES).map((e) => `.${e}`).join(" ");

/** The media type a File is uploaded as: its extension's, else the browser's when the
 * gateway stores it; undefined otherwise. */
export function mediaTypeOf(file) {
  const ext = /\.([^.]+)$/.exec(file.name)?.[1].toLowerCase();
  if (ext && MEDIA_TYPES[ext]) return MEDIA_TYPES[ext];
  return Object.values(MEDIA_TYPES).includes(file.type) ? file.type : undefined;
}

/** The Content-Disposition of an upload named name (RFC 6266): quoted with '_' for what a
 * header cannot carry, and as RFC 8187 UTF-8 (filename*) when it is not plain ASCII. */
export function contentDisposition(name) {
  const quoted = name.replace(/[^\x20-\x7e]/g, "_").replace(/["\\]/g, "\\$&");
  if (/^[\x20-\x7e]*$/.test(name)) return `attachment; filename="${quoted}"`;
  const utf8 = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${quoted}"; filename*=UTF-8''${utf8}`;
}

export class ApiError extends Error {
  constructor(status, method, path, body) {
    const v = body?.validations?.[0];
    const detail = body?.detail ?? (v ? `${v.field}: ${v.detail}` : undefined);
    super(`${method} ${path}: ${status}${detail ? ` (${detail})` : ""}`);
    this.status = status;
    this.body = body;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  /** One REST call; the parsed body, or ApiError. */
  call(method, path, body) {
    const headers = body !== undefined ? { "content-type": "application/json" } : {};
    return this.s_exchange(method, path, headers, body !== undefined ? JSON.stringify(body) : undefined);
  }

  /** Uploads a File (POST /chats/files, the browser streams it from disk): {id, name,
   * mime_type, size_bytes, sha256}, or ApiError (400 when its bytes are not of its type, 413
   * over 10 MiB or the quota); an Error before anything is sent for a type not stored. */
  upload(file) {
    const type = mediaTypeOf(file);
    if (!type) return Promise.reject(new Error(`${file.name}: not a type chatfleet stores (${EXTENSIONS})`));
    const headers = { "content-type": type, "content-disposition": contentDisposition(file.name) };
    return this.s_exchange("POST", "/api/v2/chats/files", headers, file);
  }

  /** A chat file's bytes as a Blob (GET /chats/files/{id} with the token, which a plain link
   * could not send), or ApiError. */
  async download(fileId) {
    const path = `/api/v2/chats/files/${fileId}`;
    const res = await fetch(path, { headers: { authorization: `Bearer ${this.token}` } });
    if (!res.ok) throw new ApiError(res.status, "GET", path);
    return res.blob();
  }

  async s_exchange(method, path, headers, body) {
    const res = await fetch(path, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...headers },
      body,
    });
    const text = await res.text();
    let parsed;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    if (!res.ok) throw new ApiError(res.status, method, path, parsed);
    return parsed;
  }

  /** Calls onEvent(type, data) for every SSE event of path until signal aborts, redialing
   * after a drop; a message event moves the resume point (after_id) when resume is set.
   * A 4xx other than 429 ends it with onEnd(error). */
  async follow(path, { signal, resume = false, onEvent, onEnd }) {
    let afterId = 0;
    let backoff = BACKOFF_MIN_MS;
    while (!signal.aborted) {
      try {
        const url = resume ? `${path}?after_id=${afterId}` : path;
        const res = await fetch(url, {
          headers: { authorization: `Bearer ${this.token}`, accept: "text/event-stream" },
          signal,
        });
        if (res.status >= 400 && res.status < 500 && res.status !== 429) {
          onEnd?.(new ApiError(res.status, "GET", path));
          return;
        }
        if (res.ok) {
          for await (const ev of sse(res.body)) {
            backoff = BACKOFF_MIN_MS;
            const id = ev.data?.message?.id;
            if (ev.event === "message" && typeof id === "number" && id > afterId) afterId = id;
            onEvent(ev.event, ev.data);
          }
        }
      } catch (err) {
        if (signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }
}

/** The events of an SSE body: {event, data (parsed JSON)}. */
async function* sse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}
