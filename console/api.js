// api: the gateway's REST and SSE API from the page, with the signed-in token on every call
// (fetch, since EventSource cannot send an Authorization header). Streams are redialed with
// backoff and resume after the newest message id seen (ARCHITECTURE.md §7.3, "Resume").

const BACKOFF_MIN_MS = 200;
const BACKOFF_MAX_MS = 5000;

export class ApiError extends Error {
  constructor(status, method, path, body) {
    super(`${method} ${path}: ${status}${body && body.detail ? ` (${body.detail})` : ""}`);
    this.status = status;
    this.body = body;
  }
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  /** One REST call; the parsed body, or ApiError. */
  async call(method, path, body) {
    const res = await fetch(path, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
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
