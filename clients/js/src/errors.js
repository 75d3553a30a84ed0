// Errors the package throws: every one extends ChatfleetError, so callers branch with
// instanceof and read structured fields instead of parsing messages.

/** Base class of every error this package throws. */
export class ChatfleetError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = this.constructor.name;
  }
}

/** An HTTP request to the gateway failed: status, method, path and the gateway's envelope
 * ({"message","detail"?,"validations"?}). */
export class ChatfleetApiError extends ChatfleetError {
  /** @param {{status:number, method:string, path:string, body?:any}} o */
  constructor({ status, method, path, body }) {
    const detail = body && typeof body === "object" ? body.detail || body.message : undefined;
    super(`${method} ${path} -> ${status}${detail ? `: ${detail}` : ""}`);
    this.status = status;
    this.method = method;
    this.path = path;
    this.body = body;
    /** @type {{field:string, detail:string}[]} */
    this.validations = (body && body.validations) || [];
  }
}

/** The turn ended in the chat's error state (the server's last_error: kind, message, the
 * provider's HTTP status, retryable). */
export class ChatfleetChatError extends ChatfleetError {
  /** @param {{chatId:string, kind?:string, message?:string, retryable?:boolean,
   *   statusCode?:number}} o */
  constructor({ chatId, kind, message, retryable, statusCode }) {
    super(`chat ${chatId} failed: ${kind || "error"}${message ? `: ${message}` : ""}`);
    this.chatId = chatId;
    this.kind = kind || "error";
    this.retryable = Boolean(retryable);
    this.statusCode = statusCode;
  }
}

/** A structured request ended with a failed or canceled receipt (ARCHITECTURE.md §8):
 * code is validation_exhausted, not_produced, generation_failed, configuration_error, or a
 * cancellation code. Accepts both receipt shapes: {"status","code"} and
 * {"status","error":{"code","message"}}. */
export class ChatfleetStructuredOutputError extends ChatfleetError {
  /** @param {{chatId:string, requestId:string, status:string, code:string, detail?:string}} o */
  constructor({ chatId, requestId, status, code, detail }) {
    super(`structured output ${status}: ${code}${detail ? `: ${detail}` : ""}`);
    this.chatId = chatId;
    this.requestId = requestId;
    this.status = status;
    this.code = code;
  }
}

/** The event stream could not be re-established within its redial budget. */
export class ChatfleetStreamError extends ChatfleetError {
  /** @param {{chatId:string, attempts:number, cause?:unknown}} o */
  constructor({ chatId, attempts, cause }) {
    super(`the stream of chat ${chatId} was lost after ${attempts} failed dials`, { cause });
    this.chatId = chatId;
    this.attempts = attempts;
  }
}

/** The caller's AbortSignal fired: the server-side run was interrupted. */
export class ChatfleetAbortError extends ChatfleetError {
  /** @param {{chatId?:string, interrupted:boolean, cause?:unknown}} o */
  constructor({ chatId, interrupted, cause }) {
    super(`aborted${interrupted ? ` (chat ${chatId} interrupted)` : ""}`, { cause });
    this.chatId = chatId;
    this.interrupted = interrupted;
  }
}
