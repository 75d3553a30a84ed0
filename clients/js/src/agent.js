// agent: ChatfleetAgent, an AI SDK Agent (ai@7's Agent interface: version "agent-v1", id,
// tools, generate(), stream()) over one chatfleet chat. It is the SDK's own ToolLoopAgent
// driving ChatfleetLanguageModel (model.js), so results are the SDK's GenerateTextResult and
// StreamTextResult, client tools run their execute in this process, and Output gives the
// validated structured value.

import { ToolLoopAgent, stepCountIs } from "ai";
import { ChatfleetClient } from "./client.js";
import { ChatfleetLanguageModel } from "./model.js";

export class ChatfleetAgent {
  /**
   * @param {object} settings
   * @param {ChatfleetClient} [settings.client] or baseUrl + token (default CHATFLEET_URL,
   *   CHATFLEET_TOKEN)
   * @param {string} [settings.baseUrl]
   * @param {string} [settings.token]
   * @param {string} [settings.model] a model config name (listModels()); the default else
   * @param {string} [settings.instructions] the chat's system prompt (fixed at creation)
   * @param {import('ai').ToolSet} [settings.tools] client tools, declared as dynamic tools
   * @param {any} [settings.output] Output.object({schema}) etc.: the request's response_format
   * @param {string} [settings.chatId] continue an existing chat
   * @param {any} [settings.stopWhen] default stepCountIs(64)
   * Other ToolLoopAgent settings pass through; maxRetries defaults to 0 (a retry would send
   * the turn twice).
   */
  constructor(settings = {}) {
    const { client, baseUrl, token, model, chatId, stopWhen, maxRetries, ...rest } = settings;
    this.version = "agent-v1";
    this.client = client ?? new ChatfleetClient({ baseUrl, token });
    this.languageModel = new ChatfleetLanguageModel({ client: this.client, model, chatId });
    this.inner = new ToolLoopAgent({
      ...rest,
      model: this.languageModel,
      stopWhen: stopWhen ?? stepCountIs(64),
      maxRetries: maxRetries ?? 0,
    });
  }

  get id() {
    return this.inner.id;
  }

  get tools() {
    return this.inner.tools;
  }

  /** The chat of this session, undefined before the first turn creates it. */
  get chatId() {
    return this.languageModel.chatId;
  }

  /** One turn, to its end (GenerateTextResult). */
  generate(options) {
    return this.inner.generate({ maxRetries: 0, ...options });
  }

  /** One turn as it streams (StreamTextResult). */
  stream(options) {
    return this.inner.stream({ maxRetries: 0, ...options });
  }

  /** The next turn starts a new chat. */
  resetSession() {
    this.languageModel.reset();
  }

  /** Interrupts the chat's run: {interrupted: true, chatId} or {interrupted: false}. */
  async interrupt({ signal } = {}) {
    if (!this.chatId) return { interrupted: false };
    await this.client.interruptChat(this.chatId, signal);
    return { interrupted: true, chatId: this.chatId };
  }

  /** Archives the chat: {archived: true, chatId} or {archived: false}. */
  async archive({ signal } = {}) {
    if (!this.chatId) return { archived: false };
    await this.client.archiveChat(this.chatId, signal);
    return { archived: true, chatId: this.chatId };
  }

  /** The gateway's model configs. */
  listModels({ signal } = {}) {
    return this.client.listModels(signal);
  }
}
