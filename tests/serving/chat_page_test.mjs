// chat_page_test.mjs - the chat page at / of `infer serve`
// (tiny-pycode-target on the CPU backend) in headless Chromium, driven by
// playwright-core as a person would: set the settings, type, send. Each
// streamed reply must equal the text of a non-streamed greedy request for
// the same messages and settings, and must have reached the page in more
// than one DOM update. Stop mid-reply aborts the request on the server and
// leaves the page usable; a server error shows its message; with --api-key
// the page itself stays public and asks for the key on the 401.
//
// usage: node chat_page_test.mjs INFER ARTIFACT CHAT_TEMPLATE NODE_MODULES
//                                CHROMIUM
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const [infer, artifact, chatTemplate, nodeModules, chromiumPath] =
  process.argv.slice(2);
const require = createRequire(nodeModules + '/');
const { chromium } = require('playwright-core');

// Servers still running when the test exits (a failure outside check())
// are killed with it.
const running = new Set();
process.on('exit', () => {
  for (const proc of running) proc.kill('SIGKILL');
});

function startServer(...args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(infer, ['serve', artifact, '--port', '0',
      '--chat-template', chatTemplate, '--served-model-name', 'tiny', ...args]);
    running.add(proc);
    let log = '';
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ proc, url: `http://127.0.0.1:${m[1]}/` });
    });
    proc.on('exit', (code) => reject(new Error(`infer serve exited ${code}: ${log}`)));
  });
}

async function stopServer(server) {
  server.proc.kill('SIGTERM');
  const code = await new Promise((resolve) => server.proc.on('exit', resolve));
  running.delete(server.proc);
  assert.equal(code, 0);
}

/// The reply of a non-streamed greedy chat completion.
async function greedyReply(server, messages, maxTokens, key) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const r = await fetch(server.url + 'v1/chat/completions', {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: 'tiny', messages, temperature: 0, max_tokens: maxTokens }),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body.choices[0].message.content;
}

async function abortedRequests(server) {
  const text = await (await fetch(server.url + 'metrics')).text();
  const m = text.match(/request_success_total\{[^}]*finished_reason="abort"\} (\d+)/);
  return m ? Number(m[1]) : 0;
}

let failures = 0;
async function check(name, body) {
  const start = Date.now();
  try {
    await body();
    console.log(`[ OK ] ${name} (${Date.now() - start} ms)`);
  } catch (e) {
    failures++;
    console.log(`[FAIL] ${name}: ${e.stack}`);
  }
}

/// The chat page of one browser context, with what the tests look at.
class ChatPage {
  static async open(browser, url) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const self = new ChatPage(page);
    page.on('console', (m) => self.console.push(m.text()));
    page.on('pageerror', (e) => self.pageErrors.push(e.message));
    page.on('request', (r) => {
      if (r.url().endsWith('/v1/chat/completions')) self.requests.push(JSON.parse(r.postData()));
    });
    const response = await page.goto(url);
    assert.equal(response.status(), 200);
    // Counts the DOM updates of the reply being written: one entry (its
    // length) per MutationObserver callback.
    await page.evaluate(() => {
      window.replyLengths = [];
      new MutationObserver(() => {
        const reply = document.querySelector('#messages .message.assistant:last-child');
        if (reply) window.replyLengths.push(reply.textContent.length);
      }).observe(document.getElementById('messages'),
        { childList: true, subtree: true, characterData: true });
    });
    return self;
  }

  constructor(page) {
    this.page = page;
    this.console = [];
    this.pageErrors = [];
    this.requests = [];
  }

  async waitForModel() {
    await this.page.waitForFunction(() => document.getElementById('model').textContent === 'tiny');
  }

  async settings({ system, temperature, maxTokens }) {
    if (!(await this.page.locator('details').evaluate((d) => d.open)))
      await this.page.click('summary');
    if (system !== undefined) await this.page.fill('#system', system);
    if (temperature !== undefined) await this.page.fill('#temperature', String(temperature));
    if (maxTokens !== undefined) await this.page.fill('#max-tokens', String(maxTokens));
  }

  /// Types `text` and sends it (the Send button, or Enter).
  async send(text, { enter = false } = {}) {
    await this.page.evaluate(() => { window.replyLengths = []; });
    await this.page.fill('#input', text);
    if (enter) await this.page.press('#input', 'Enter');
    else await this.page.click('#send');
  }

  /// The last reply once it stopped streaming: {state, text, updates}.
  async reply() {
    const reply = await this.page.waitForSelector(
      '#messages .message.assistant:last-child:not([data-state="streaming"])');
    return {
      state: await reply.getAttribute('data-state'),
      text: await reply.textContent(),
      updates: await this.page.evaluate(() => window.replyLengths),
    };
  }

  /// The conversation as the page shows it.
  transcript() {
    return this.page.$$eval('#messages .message', (elements) => elements.map((e) => ({
      role: e.classList.contains('user') ? 'user' : 'assistant',
      content: e.textContent,
    })));
  }
}

/// Asserts that `updates` (reply lengths per DOM update) show a reply that
/// grew over more than one update to `length`.
function assertStreamed(updates, length) {
  const lengths = [...new Set(updates.filter((n) => n > 0))];
  assert.ok(lengths.length > 1, `one DOM update only: ${JSON.stringify(updates)}`);
  assert.ok(lengths[0] < length && lengths.at(-1) === length, JSON.stringify(updates));
}

const browser = await chromium.launch({
  executablePath: chromiumPath,
  // Chromium's sandbox refuses to run as root.
  args: process.getuid() === 0 ? ['--no-sandbox'] : [],
});
const server = await startServer();
const system = 'You write Python.';
const chat = await ChatPage.open(browser, server.url);

await check('the page loads the model name', async () => {
  await chat.waitForModel();
  assert.equal(await chat.page.title(), 'infer chat');
});

await check('the SSE parser: events split anywhere across chunks', async () => {
  const stream = 'data: {"a":1}\r\n\r\n: keep-alive\n\ndata:{"b":\ndata: 2}\r\r' +
    'event: x\nid: 7\ndata: [DONE]\n\n';
  const want = ['{"a":1}', '{"b":\n2}', '[DONE]'];
  const results = await chat.page.evaluate((text) => {
    const out = [];
    for (let i = 0; i <= text.length; i++) {
      const parser = new SseParser();
      out.push([...parser.push(text.slice(0, i)), ...parser.push(text.slice(i))]);
    }
    const parser = new SseParser();
    out.push([...text].flatMap((c) => parser.push(c)));
    return out;
  }, stream);
  for (const events of results) assert.deepEqual(events, want);
});

await check('a streamed reply equals the non-streamed greedy reply', async () => {
  await chat.settings({ system, temperature: 0, maxTokens: 64 });
  await chat.send('def fib(n):');
  const reply = await chat.reply();
  assert.equal(reply.state, 'done');
  const messages = [{ role: 'system', content: system }, { role: 'user', content: 'def fib(n):' }];
  assert.equal(reply.text, await greedyReply(server, messages, 64));
  assertStreamed(reply.updates, reply.text.length);
  const sent = chat.requests.at(-1);
  assert.deepEqual(sent, { messages, stream: true, model: 'tiny', temperature: 0, max_tokens: 64 });
});

await check('a second turn sends the history (Enter sends)', async () => {
  await chat.send('def fact(n):', { enter: true });
  const reply = await chat.reply();
  assert.equal(reply.state, 'done');
  const messages = [{ role: 'system', content: system }, ...await chat.transcript()];
  assert.equal(messages.length, 5);
  assert.equal(messages[3].content, 'def fact(n):');
  assert.equal(reply.text, await greedyReply(server, messages.slice(0, -1), 64));
  assertStreamed(reply.updates, reply.text.length);
});

await check('Stop mid-reply aborts it on the server; the page stays usable', async () => {
  const aborted = await abortedRequests(server);
  await chat.settings({ maxTokens: 1500 });
  await chat.send('class Tree:');
  await chat.page.waitForFunction(() =>
    document.querySelector('#messages .message.assistant:last-child').textContent.length > 0);
  assert.ok(await chat.page.isEnabled('#stop'));
  assert.ok(await chat.page.isDisabled('#send'));
  await chat.page.click('#stop');
  const stopped = await chat.reply();
  assert.equal(stopped.state, 'stopped');
  assert.ok(stopped.text.length > 0);
  assert.ok(await chat.page.isDisabled('#stop'));
  assert.ok(await chat.page.isEnabled('#send'));
  for (let i = 0; i < 100 && await abortedRequests(server) === aborted; i++)
    await new Promise((r) => setTimeout(r, 50));
  assert.equal(await abortedRequests(server), aborted + 1);
  // The stopped reply stays in the history, as shown.
  await chat.settings({ maxTokens: 16 });
  await chat.send('import os');
  const reply = await chat.reply();
  assert.equal(reply.state, 'done');
  const messages = [{ role: 'system', content: system }, ...await chat.transcript()];
  assert.equal(messages.length, 9);
  assert.equal(messages[6].content, stopped.text);
  assert.equal(reply.text, await greedyReply(server, messages.slice(0, -1), 16));
});

await check('a server error shows its message and gives the text back', async () => {
  const before = await chat.transcript();
  await chat.settings({ maxTokens: 5000 });
  await chat.send('too long');
  await chat.page.waitForSelector('#error:not([hidden])');
  assert.match(await chat.page.textContent('#error'), /maximum context length is 2048 tokens/);
  assert.deepEqual(await chat.transcript(), before);
  assert.equal(await chat.page.inputValue('#input'), 'too long');
  assert.ok(await chat.page.isEnabled('#send'));
});

await check('New chat clears the conversation', async () => {
  await chat.page.click('#new-chat');
  assert.deepEqual(await chat.transcript(), []);
  await chat.settings({ maxTokens: 8 });
  await chat.send('x = 1');
  const reply = await chat.reply();
  assert.equal(reply.text, await greedyReply(server,
    [{ role: 'system', content: system }, { role: 'user', content: 'x = 1' }], 8));
});

await check('the Content-Security-Policy holds', async () => {
  assert.deepEqual(chat.pageErrors, []);
  assert.deepEqual(chat.console.filter((m) => /Content Security Policy/.test(m)), []);
  // An inline script the page did not ship does not run.
  const ran = await chat.page.evaluate(() => {
    window.injected = false;
    const script = document.createElement('script');
    script.textContent = 'window.injected = true;';
    document.body.append(script);
    return window.injected;
  });
  assert.equal(ran, false);
});

await stopServer(server);

const keyed = await startServer('--api-key', 'sekret');
await check('with --api-key the page is public and asks for the key', async () => {
  const page = await ChatPage.open(browser, keyed.url);
  await page.page.waitForSelector('#key-form:not([hidden])');
  assert.match(await page.page.textContent('#error'), /API key/);
  await page.page.fill('#api-key', 'sekret');
  await page.page.click('#key-form button');
  await page.waitForModel();
  assert.ok(await page.page.isHidden('#key-form'));
  assert.ok(await page.page.isHidden('#error'));
  await page.settings({ temperature: 0, maxTokens: 8 });
  await page.send('def main():');
  const reply = await page.reply();
  assert.equal(reply.state, 'done');
  assert.equal(reply.text, await greedyReply(keyed,
    [{ role: 'user', content: 'def main():' }], 8, 'sekret'));
  // The key is kept (localStorage): a reload needs no form.
  await page.page.reload();
  await page.waitForModel();
  assert.ok(await page.page.isHidden('#key-form'));
  // Forgetting it asks again.
  await page.settings({});
  await page.page.click('#forget-key');
  await page.page.waitForSelector('#key-form:not([hidden])');
  assert.ok(await page.page.isHidden('#forget-key'));
});
await stopServer(keyed);

await browser.close();
process.exit(failures ? 1 : 0);
