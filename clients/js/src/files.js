// files: the file parts of a user message as chatfleet file parts (ARCHITECTURE.md §3,
// "Files"). The AI SDK hands the model a user's FilePart ({type:"file", data, mediaType,
// filename}) and ImagePart ({type:"image", image, mediaType}) as LanguageModelV4 file parts,
// their data tagged: {type:"data", data: Uint8Array | base64 string} (a Uint8Array,
// ArrayBuffer, Buffer, base64 string or data: URL given by the caller), {type:"text", text},
// {type:"url", url} or {type:"reference"}. Each part with bytes is uploaded to
// POST /api/v2/chats/files and named in the message by {"type":"file","file_id"}. A URL is
// refused: fetching it would reach the network on the caller's behalf, so the model declares
// every URL supported (model.js) to keep the SDK from downloading it, and this refuses it.

/** The media types the gateway stores (POST /chats/files; others are a 400). */
export const MEDIA_TYPES = [
  "application/json",
  "application/pdf",
  "image/gif",
  "image/jpeg",
  "image/png",
  "image/webp",
  "text/csv",
  "text/markdown",
  "text/plain",
];

/** The bytes of a base64 string; a TypeError when it is not base64. */
function fromBase64(text) {
  let binary;
  try {
    binary = atob(text.replace(/\s+/g, ""));
  } catch {
    throw new TypeError("chatfleet: a file part's data is a string that is not base64 (a URL string is not fetched)");
  }
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/** The upload a V4 file part asks for: {bytes, mediaType, filename}; a TypeError for what
 * chatfleet cannot store (a URL, a provider reference, a media type it does not take). */
export function uploadOf(part) {
  const data = part.data;
  let bytes;
  switch (data?.type) {
    case "data":
      bytes = typeof data.data === "string" ? fromBase64(data.data) : new Uint8Array(data.data);
      break;
    case "text":
      bytes = new TextEncoder().encode(data.text);
      break;
    case "url":
      throw new TypeError(
        `chatfleet: a file part given by URL (${String(data.url).slice(0, 200)}) is not supported: ` +
          "the agent does not fetch URLs; pass the file's bytes (Uint8Array, ArrayBuffer, Buffer or base64)",
      );
    default:
      throw new TypeError(`chatfleet: a file part of data type ${data?.type} is not supported (bytes only)`);
  }
  const mediaType = String(part.mediaType ?? "").split(";")[0].trim().toLowerCase();
  if (!MEDIA_TYPES.includes(mediaType)) {
    throw new TypeError(
      `chatfleet: a file part of media type ${part.mediaType || "(none)"} is not supported; ` +
        `chatfleet stores ${MEDIA_TYPES.join(", ")} (an image part needs its type or bytes of a known image format)`,
    );
  }
  const filename = part.filename ?? undefined;
  if (filename !== undefined && (/[\u0000-\u001f\u007f]/.test(filename) || new TextEncoder().encode(filename).length > 255)) {
    throw new TypeError("chatfleet: a file name must hold no control character and be at most 255 bytes");
  }
  return { bytes, mediaType, filename };
}

/**
 * The chatfleet content of a user message (a V4 prompt message): its parts in order, adjacent
 * text parts joined, each file part uploaded. Every file part is checked before the first
 * upload, so a refused one sends nothing; an upload the gateway refuses rejects with its
 * ChatfleetApiError (the files uploaded before it stay stored, unattached).
 * @param {import('./client.js').ChatfleetClient} client
 * @returns {Promise<object[]>}
 */
export async function userContent(client, message, signal) {
  const parts = Array.isArray(message.content) ? message.content : [{ type: "text", text: message.content }];
  const planned = parts.map((p) => {
    if (p.type === "text") return { text: p.text };
    if (p.type === "file") return { upload: uploadOf(p) };
    throw new TypeError(`chatfleet: a user message part of type ${p.type} is not supported (text and file only)`);
  });
  const content = [];
  for (const p of planned) {
    if (p.upload) {
      const file = await client.uploadFile(p.upload, signal);
      content.push({ type: "file", file_id: file.id });
    } else if (content.at(-1)?.type === "text") {
      content.at(-1).text += p.text;
    } else {
      content.push({ type: "text", text: p.text });
    }
  }
  return content.length > 0 ? content : [{ type: "text", text: "" }];
}
