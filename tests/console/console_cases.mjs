// The operator console in headless Chromium (puppeteer-core), against a real cluster; run by
// tests/integration/test_console.c. Usage: node console_cases.mjs URL ADMIN_TOKEN OUT_DIR (the
// cluster's CHATFLEET_CHAT_MAX_ATTACHMENTS must be 1: the expired step relies on it).
// Prints "KILL_WORKER <worker_id>" when the harness must kill the worker holding the long
// chat, then "ok console ..." when every check held; screenshots of each view go to OUT_DIR.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import puppeteer from "puppeteer-core";

const [url, token, out] = process.argv.slice(2);
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const errors = [];

async function api(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  assert.ok(res.ok, `${method} ${path}: ${res.status}`);
  return res.status === 204 ? undefined : res.json();
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
const shot = (page, name) => page.screenshot({ path: `${out}/${name}.png`, fullPage: true });

// Downloads from the page (an attachment's link) land here, to be compared with what was sent.
const downloads = `${out}/downloads`;
mkdirSync(downloads, { recursive: true });

/** Polls fn until it is truthy, failing after ms with what. */
async function until(fn, what, ms = 30000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  downloadBehavior: { policy: "allow", downloadPath: downloads },
});
let rc = 1;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  page.setDefaultTimeout(30000);

  // Sign in: /console redirects to /console/index.html, the sign-in form, then the chat list.
  await page.goto(`${url}/console`);
  assert.ok(page.url().endsWith("/console/index.html"), page.url());
  await page.waitForSelector("#signin:not([hidden])");
  await shot(page, "01-signin");
  await page.type("#token", token);
  await page.click("#signin-form button");
  await page.waitForSelector("#chats:not([hidden])");
  const me = await api("GET", "/api/v2/users/me");
  await page.waitForFunction((n) => document.getElementById("whoami").textContent.startsWith(n), {}, me.name);
  assert.equal(await text(page, "#whoami"), `${me.name} (admin)`);
  await shot(page, "02-chats");
  console.log(`step signin user=${me.name}`);

  // A chat started from the page streams into it while the worker produces it: text seen
  // while running is a strict prefix of the committed answer.
  await page.type("#new-text", "Tell me a story [sim:slow 60] [sim:words 100]");
  await page.click("#new-chat button");
  await page.waitForFunction(() => /^#\/chats\/[0-9a-f-]{36}$/.test(location.hash));
  const chatId = await page.evaluate(() => location.hash.slice(8));
  await page.waitForFunction(() => document.getElementById("live").textContent.length > 30);
  const partial = await text(page, "#live");
  const statusWhileStreaming = await text(page, "#chat-status");
  await shot(page, "03-chat-streaming");
  await page.waitForSelector('#messages li[data-role="assistant"]', { timeout: 60000 });
  await page.waitForFunction(() => document.getElementById("chat-status").textContent === "waiting");
  const answer = (await text(page, '#messages li[data-role="assistant"]')).replace(/^assistant/, "");
  assert.equal(statusWhileStreaming, "running");
  assert.ok(answer.startsWith(partial) && partial.length < answer.length, `${partial} / ${answer}`);
  assert.ok(await page.$(`#chat-list li[data-chat="${chatId}"]`), "the chat is not in the list");
  // The heading follows the generated title (it began as the fallback, the first prompt).
  const titled = (await api("GET", `/api/v2/chats/${chatId}`)).title;
  await page.waitForFunction((t) => document.getElementById("chat-title").textContent === t, {}, titled);
  assert.ok(!titled.startsWith("Tell me a story [sim"), `the title is still the fallback: ${titled}`);
  await shot(page, "04-chat-done");
  console.log(`step stream partial=${partial.length} answer=${answer.length}`);

  // Files: a text file chosen in the send box goes up with the typed message; the user message
  // lists it by name with a link, and the link's download (fetched with the token, handed over
  // as an object URL) holds the file's bytes.
  const noteName = "console-note.txt";
  const noteText = "Tides follow the moon.\n";
  writeFileSync(`${out}/${noteName}`, noteText);
  const chooser = await page.$("#send-files");
  await chooser.uploadFile(`${out}/${noteName}`);
  await page.type("#send-text", "Read this [sim:words 3]");
  await page.click("#send button");
  const link = `#messages li[data-role="user"] a.attachment[data-file]`;
  await page.waitForSelector(link);
  assert.equal(await text(page, link), noteName);
  const [firstMsg, firstFile] = await page.$eval(link, (a) => [a.closest("li").dataset.id, a.dataset.file]);
  const listed = (await api("GET", `/api/v2/chats/${chatId}`)).files;
  assert.deepEqual(listed.map((f) => [f.id, f.name, f.mime_type]), [[firstFile, noteName, "text/plain"]]);
  await page.click(link);
  const saved = `${downloads}/${noteName}`;
  await until(() => existsSync(saved) && readFileSync(saved, "utf8") === noteText, `the download of ${noteName}`);
  await page.waitForFunction(() => document.getElementById("chat-status").textContent === "waiting");
  await shot(page, "05-attachment");
  console.log(`step attach file=${firstFile}`);

  // The cluster's cap is one file per chat: a second upload sent to the chat (over REST)
  // evicts the first, and the page marks the first message's attachment expired, with no link.
  const up = await fetch(`${url}/api/v2/chats/files`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "text/markdown",
      "content-disposition": 'attachment; filename="second.md"',
    },
    body: "# Second\n",
  });
  assert.equal(up.status, 201);
  const second = await up.json();
  await api("POST", `/api/v2/chats/${chatId}/messages`, {
    content: [{ type: "text", text: "And this [sim:words 2]" }, { type: "file", file_id: second.id }],
  });
  const expired = `#messages li[data-id="${firstMsg}"] .attachment.expired[data-file="${firstFile}"]`;
  await page.waitForSelector(expired);
  assert.equal(await page.$(`#messages li[data-id="${firstMsg}"] a.attachment`), null);
  assert.ok((await text(page, expired)).includes("expired"));
  await page.waitForSelector(`#messages a.attachment[data-file="${second.id}"]`);
  await shot(page, "06-expired");
  console.log("step expired");

  // The cluster view: a long chat's lease under its worker; that worker killed, the view
  // shows the chat taken over by another worker, within the lease (plus the acquire poll).
  const long = await api("POST", "/api/v2/chats", {
    content: [{ type: "text", text: "A long one [sim:slow 250] [sim:words 400]" }],
  });
  // Created elsewhere, it reaches the open list through the watch, running.
  await page.waitForSelector(`#chat-list li[data-chat="${long.id}"] .status.running`);
  console.log("step watch");
  await page.goto(`${url}/console/index.html#/cluster`);
  await page.waitForSelector(`#workers tr[data-chat="${long.id}"]`);
  const before = await page.$eval(`#workers tr[data-chat="${long.id}"]`, (e) => e.dataset.worker);
  const staleMs = Number(await text(page, "#lease-stale"));
  const broker = await text(page, "#broker");
  assert.ok(broker.startsWith("reachable, 2 worker(s) registered"), broker);
  await shot(page, "07-cluster");
  const killedAt = Date.now();
  console.log(`KILL_WORKER ${before}`);
  const takeover = `#takeovers li.takeover[data-chat="${long.id}"][data-from="${before}"]`;
  await page.waitForSelector(takeover, { timeout: 60000 });
  const tookMs = Date.now() - killedAt;
  const after = await page.$eval(takeover, (e) => e.dataset.to);
  assert.notEqual(after, before);
  await page.waitForSelector(`#workers table[data-worker="${after}"] tr[data-chat="${long.id}"] td.fresh`);
  // The lease goes stale after staleMs; an acquirer finds it within its poll (500 ms in the
  // harness), and the page polls every second: this bound is generous for a loaded machine.
  assert.ok(tookMs < staleMs + 15000, `the takeover showed after ${tookMs} ms`);
  await shot(page, "08-takeover");
  console.log(`step takeover from=${before} to=${after} ms=${tookMs} stale=${staleMs}`);

  // A family as a tree: a chat that spawns two slow subagents shows them under it, each with
  // its state and, while one holds it, its worker.
  const fam = await api("POST", "/api/v2/chats", {
    content: [{ type: "text", text: "Fan out [sim:spawn 2][sim:child slow 100][sim:child words 80]" }],
  });
  await page.goto(`${url}/console/index.html#/chats`);
  const kid = `#chat-list li.child[data-parent="${fam.id}"]`;
  await page.waitForFunction((s) => document.querySelectorAll(s).length === 2, {}, kid);
  await page.waitForFunction((s) => [...document.querySelectorAll(s)].some((e) => e.querySelector(".worker")), {}, kid);
  const order = await page.$$eval("#chat-list li", (ls) => ls.map((e) => e.dataset.chat));
  const at = order.indexOf(fam.id);
  const kids = await page.$$eval(kid, (ls) => ls.map((e) => e.dataset.chat));
  assert.deepEqual(order.slice(at + 1, at + 3).sort(), [...kids].sort(), "the children do not follow their parent");
  await shot(page, "09-family");
  await page.waitForFunction((s) => [...document.querySelectorAll(s)].every((e) => e.querySelector(".status.waiting")), { timeout: 60000 }, kid);
  console.log(`step family children=${kids.length}`);

  // Finding chats: a word only one chat's message holds finds it alone; a label filters; the
  // chat view's labels editor and pin button write through PATCH and the list shows both.
  const word = `zebrafinch${Date.now() % 100000}`;
  const found = await api("POST", "/api/v2/chats", {
    content: [{ type: "text", text: `About the ${word} [sim:words 2]` }],
    labels: { team: "blue" },
  });
  await page.goto(`${url}/console/index.html#/chats`);
  await page.waitForSelector(`#chat-list li[data-chat="${found.id}"]`);
  await page.type("#search-q", word);
  await page.click("#search button");
  await page.waitForFunction(
    (id) => [...document.querySelectorAll("#chat-list li")].map((e) => e.dataset.chat).join() === id,
    {},
    found.id,
  );
  await page.$eval("#search-q", (e) => (e.value = ""));
  await page.type("#search-labels", "team:blue");
  await page.click("#search button");
  await page.waitForFunction(
    (id) => [...document.querySelectorAll("#chat-list li")].map((e) => e.dataset.chat).join() === id,
    {},
    found.id,
  );
  assert.equal(await text(page, `#chat-list li[data-chat="${found.id}"] .label`), "team:blue");
  await shot(page, "10-search");
  await page.goto(`${url}/console/index.html#/chats/${found.id}`);
  await page.waitForFunction(() => document.getElementById("labels-text").value === "team:blue");
  await page.$eval("#labels-text", (e) => (e.value = ""));
  await page.type("#labels-text", "team:blue env:prod");
  await page.click("#labels button");
  await until(async () => (await api("GET", `/api/v2/chats/${found.id}`)).labels.env === "prod", "labels saved");
  await page.click("#pin");
  await until(async () => (await api("GET", `/api/v2/chats/${found.id}`)).pin_order === 1, "pinned");
  await page.waitForFunction(() => document.getElementById("pin").textContent === "Unpin");
  await page.$eval("#search-labels", (e) => (e.value = ""));
  await page.click("#search button");
  await page.waitForFunction(
    (id) => document.querySelector("#chat-list li")?.dataset.chat === id,
    {},
    found.id,
  );
  assert.equal(await text(page, `#chat-list li[data-chat="${found.id}"] .pinned`), "pinned 1");
  await page.click("#pin");
  await until(async () => (await api("GET", `/api/v2/chats/${found.id}`)).pin_order === 0, "unpinned");
  await shot(page, "11-labels-pin");
  console.log("step search_labels_pin");

  // Interrupt and archive from the chat view; while it runs, the heading names its worker.
  await page.goto(`${url}/console/index.html#/chats/${long.id}`);
  await page.waitForFunction(() => document.getElementById("chat-status").textContent === "running");
  await page.waitForFunction(() => /^worker [0-9a-f]{8} \d+\.\ds$/.test(document.getElementById("chat-worker").textContent));
  await page.click("#interrupt");
  await page.waitForFunction(() => document.getElementById("chat-status").textContent === "waiting");
  await page.click("#archive");
  await page.waitForFunction(() => location.hash === "#/chats");
  await page.waitForSelector(`#chat-list li.archived[data-chat="${long.id}"]`);
  assert.equal((await api("GET", `/api/v2/chats/${long.id}`)).archived, true);
  await shot(page, "12-archived");
  console.log("step interrupt_archive");

  assert.deepEqual(errors, [], "console errors");
  console.log(`ok console takeover_ms=${tookMs} stale_ms=${staleMs}`);
  rc = 0;
} catch (e) {
  console.error(`FAIL console: ${e?.stack ?? e}`);
  if (errors.length) console.error(`console errors: ${JSON.stringify(errors)}`);
} finally {
  await browser.close();
}
process.exit(rc);
