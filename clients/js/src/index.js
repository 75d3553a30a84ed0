// @chatfleet/ai-sdk-agent: an AI SDK agent over a chatfleet cluster (README.md).
export { ChatfleetAgent } from "./agent.js";
export { ChatfleetClient, contentDisposition } from "./client.js";
export { MEDIA_TYPES } from "./files.js";
export { ChatfleetLanguageModel, responseFormatOf } from "./model.js";
export { receiptFailure } from "./turn.js";
export {
  ChatfleetError,
  ChatfleetApiError,
  ChatfleetChatError,
  ChatfleetStructuredOutputError,
  ChatfleetStreamError,
  ChatfleetAbortError,
} from "./errors.js";
