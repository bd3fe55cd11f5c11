// openai_sdk_test.mjs - the official OpenAI Node SDK as the client of
// `infer serve` (tiny-pycode-target on the CPU backend): completions and
// chat, streaming and not, n=2, stop, logprobs and include_usage. Every
// response goes through the SDK's parsing, and every text equals
// `infer generate`'s for the same prompt, seed and temperature.
//
// usage: node openai_sdk_test.mjs INFER ARTIFACT CHAT_TEMPLATE NODE_MODULES
import { execFileSync, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const [infer, artifact, chatTemplate, nodeModules] = process.argv.slice(2);
const require = createRequire(nodeModules + '/');
const OpenAI = require('openai');

function generate(prompts, maxTokens, temperature = 0, seed = 0) {
  const args = ['generate', artifact, '--max-new-tokens', String(maxTokens),
    '--temperature', String(temperature), '--seed', String(seed), '--json'];
  for (const p of prompts) args.push('--prompt', p);
  return execFileSync(infer, args, { encoding: 'utf8' })
    .trim().split('\n').map((line) => JSON.parse(line).text);
}

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(infer, ['serve', artifact, '--port', '0',
      '--chat-template', chatTemplate, '--served-model-name', 'tiny']);
    let log = '';
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on('exit', (code) => reject(new Error(`infer serve exited ${code}: ${log}`)));
  });
}

const { proc, port } = await startServer();
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused' });
const prompt = 'def fib(n):';
let failures = 0;
async function check(name, body) {
  try {
    await body();
    console.log(`[ OK ] ${name}`);
  } catch (e) {
    failures++;
    console.log(`[FAIL] ${name}: ${e.stack}`);
  }
}

await check('models', async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, 'tiny');
});

await check('completion (greedy) equals infer generate', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, generate([prompt], 24)[0]);
  assert.equal(r.usage.completion_tokens, 24);
});

await check('streamed completion (sampled, seeded) equals infer generate', async () => {
  const stream = await client.completions.create({
    model: 'tiny', prompt, max_tokens: 24, temperature: 0.8, seed: 3, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) text += chunk.choices[0].text;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, generate([prompt], 24, 0.8, 3)[0]);
  assert.ok(usage && usage.completion_tokens > 0 && usage.prompt_tokens > 0, JSON.stringify(usage));
});

await check('n=2 equals two seeded requests of infer generate', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt, max_tokens: 16, temperature: 1.0, seed: 5, n: 2 });
  const want = generate([prompt, prompt], 16, 1.0, 5);
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.text), want);
});

await check('stop ends the text before the stop string', async () => {
  const full = generate([prompt], 32)[0];
  const stop = 'return';
  assert.ok(full.includes(stop), full);
  const r = await client.completions.create({ model: 'tiny', prompt, max_tokens: 32, temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await check('completion logprobs', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt, max_tokens: 8, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 8; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 2);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...top.map(([, v]) => v)) - lp.token_logprobs[i]) < 1e-9);
  }
});

const chatRendered = '<|user|>def fib(n):\n<|assistant|>';
await check('chat completion equals infer generate on the rendered prompt', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 20, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, generate([chatRendered], 20)[0]);
});

await check('streamed chat with logprobs and include_usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 12,
    temperature: 0.7, seed: 11, stream: true, logprobs: true, top_logprobs: 2,
    stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let tokens = 0;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    const c = chunk.choices[0];
    role = c.delta.role || role;
    text += c.delta.content || '';
    if (c.logprobs) {
      for (const t of c.logprobs.content) {
        tokens++;
        assert.ok(t.top_logprobs.length <= 2 && t.logprob <= 0);
      }
    }
    finish = c.finish_reason || finish;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, generate([chatRendered], 12, 0.7, 11)[0]);
  assert.equal(tokens, 12);
  assert.equal(usage.completion_tokens, 12);
  assert.equal(finish, 'length');
});

await check('an error is the SDK\'s APIError with the status', async () => {
  await assert.rejects(
    client.completions.create({ model: 'other', prompt, max_tokens: 2 }),
    (e) => e.status === 404 && /does not exist/.test(e.message));
  await assert.rejects(
    client.completions.create({ model: 'tiny', prompt, max_tokens: 2, temperature: 'hot' }),
    (e) => e.status === 400 && e.param === 'temperature');
});

proc.kill('SIGTERM');
const code = await new Promise((resolve) => proc.on('exit', resolve));
assert.equal(code, 0);
process.exit(failures ? 1 : 0);
