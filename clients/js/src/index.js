// @chatfleet/ai-sdk-agent: an AI SDK agent over a chatfleet cluster (README.md).
export { ChatfleetAgent } from "./agent.js";
export { ChatfleetClient } from "./client.js";
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
