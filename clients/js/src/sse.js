// sse: reads one Server-Sent Events response body into {event, data, id} records
// (https://html.spec.whatwg.org/multipage/server-sent-events.html, the parts chatfleet's
// gateway writes: event, data, id and comment lines). data is parsed as JSON.

/** Yields each event of a fetch Response body; ends when the body ends. A data field that is
 * not JSON is yielded as its text.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<{event:string, data:any, id:string|undefined}>} */
export async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buf = "";
  let event = "message";
  let data = [];
  let id;
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.search(/\r\n|\n|\r/)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(buf[nl] === "\r" && buf[nl + 1] === "\n" ? nl + 2 : nl + 1);
      if (line === "") {
        if (data.length > 0) {
          const text = data.join("\n");
          let parsed;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = text;
          }
          yield { event, data: parsed, id };
        }
        event = "message";
        data = [];
        id = undefined;
        continue;
      }
      if (line.startsWith(":")) continue; // a keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
      else if (field === "id") id = value;
    }
  }
}
