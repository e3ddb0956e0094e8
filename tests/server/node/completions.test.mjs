// loom serve with stories260K (a base model) through the official OpenAI Node client:
// completions (streaming and not), n > 1, stop strings, embeddings, errors, a client
// abort mid-stream, SSE framing as curl sees it, and greedy text equal to `loom run`'s.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startServer, loomRun, metrics, until, postJson } from './harness.mjs';

describe('loom serve: completions and embeddings (stories260K)', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--parallel', '4']);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code, seconds } = await server.stop();
    assert.equal(code, 0, `loom serve exited ${code} on SIGTERM:\n${server.stderr()}`);
    assert.ok(seconds < 10, `shutdown took ${seconds} s`);
  });

  test('GET /v1/models and /health', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, 'stories260K.bin');
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: 'ok' });
  });

  test('greedy completion equals loom run for the same prompt', async () => {
    for (const prompt of ['Once upon a time', 'The little dog']) {
      const r = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 40, temperature: 0 });
      const cli = loomRun(['--prompt', prompt, '--max-tokens', '40']);
      assert.equal(prompt + r.choices[0].text, cli);
      assert.equal(r.object, 'text_completion');
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 40);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 40);
    }
  });

  test('streaming completion: the chunks join to the non-streaming text, usage last', async () => {
    const body = { model: 'm', prompt: 'Once upon a time', max_tokens: 30, temperature: 0 };
    const whole = await client.completions.create(body);
    const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, 'length');
    assert.deepEqual(usage, whole.usage);
  });

  test('n > 1: forked choices, greedy ones equal, seeded ones reproducible', async () => {
    const greedy = await client.completions.create({ prompt: 'One day', max_tokens: 20, temperature: 0, n: 3 });
    assert.equal(greedy.choices.length, 3);
    assert.deepEqual(greedy.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of greedy.choices) assert.equal(c.text, greedy.choices[0].text);
    assert.equal(greedy.usage.completion_tokens, 60);
    const seeded = { prompt: 'One day', max_tokens: 20, temperature: 1, n: 3, seed: 11 };
    const a = await client.completions.create(seeded);
    const b = await client.completions.create(seeded);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, 'three seeded choices should not all be equal');
  });

  test('stop strings end the text before them with finish_reason stop', async () => {
    const full = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 30, temperature: 0 });
    const text = full.choices[0].text;
    const stop = ' little';
    assert.ok(text.includes(stop), text);
    const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [stop, 'zzz'] });
    assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  test('logprobs: one entry per token, the top alternatives best first', async () => {
    const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 5; i++) {
      const top = Object.entries(lp.top_logprobs[i]);
      assert.equal(top.length, 2);
      assert.ok(top[0][1] >= top[1][1]);
      assert.equal(top[0][0], lp.tokens[i]);  // greedy picks the best
      assert.ok(lp.token_logprobs[i] <= 0);
    }
  });

  test('embeddings: float and base64 agree, unit length', async () => {
    const f = await client.embeddings.create({ model: 'm', input: ['Once upon a time', 'The cat'], encoding_format: 'float' });
    assert.equal(f.data.length, 2);
    assert.equal(f.data[0].embedding.length, 64);
    const norm = Math.hypot(...f.data[0].embedding);
    assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
    assert.equal(f.usage.prompt_tokens, f.usage.total_tokens);
    const raw = await postJson(server.url, '/v1/embeddings', { input: 'Once upon a time', encoding_format: 'base64' });
    assert.equal(raw.status, 200);
    const bytes = Buffer.from(raw.json.data[0].embedding, 'base64');
    const floats = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
    assert.deepEqual(Array.from(floats), f.data[0].embedding.map(Math.fround));
  });

  test('errors: bad JSON, wrong types, max_tokens over the context, unknown fields ignored', async () => {
    const bad = await postJson(server.url, '/v1/completions', '{"prompt": ');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.type, 'invalid_request_error');
    assert.equal(bad.json.error.code, 'invalid_json');
    for (const [body, param] of [[{ prompt: 'x', max_tokens: 'ten' }, 'max_tokens'],
                                 [{ prompt: 'x', temperature: 5 }, 'temperature'],
                                 [{ prompt: 'x', n: 99 }, 'n'],
                                 [{ prompt: 'x', stop: 7 }, 'stop'],
                                 [{ max_tokens: 3 }, 'prompt']]) {
      await assert.rejects(client.completions.create(body), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.param, param);
        return true;
      });
    }
    await assert.rejects(client.completions.create({ prompt: 'Once', max_tokens: 600 }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.code, 'context_length_exceeded');
      assert.match(e.message, /maximum context length is 512 tokens/);
      return true;
    });
    const ok = await client.completions.create({ prompt: 'Once', max_tokens: 2, temperature: 0, user: 'u', foo: { bar: [1] } });
    assert.equal(ok.choices[0].text.length > 0, true);
    await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }] }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.code, 'no_chat_template');
      return true;
    });
    const missing = await fetch(`${server.url}/v1/nothing`);
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.code, 'unknown_url');
    const big = await postJson(server.url, '/v1/completions', JSON.stringify({ prompt: 'x'.repeat(2 << 20) }));
    assert.equal(big.status, 413);
    assert.equal(big.json.error.code, 'request_too_large');
  });

  test('a client abort mid-stream cancels its sequences and frees the KV blocks', async () => {
    const before = await metrics(server.url);
    const controller = new AbortController();
    const stream = await client.completions.create(
      { prompt: 'Once upon a time', max_tokens: 480, temperature: 1, n: 2, stream: true, logit_bias: { 2: -100 } },
      { signal: controller.signal });
    let chunks = 0;
    // (The client ends the iteration quietly when its request is aborted.)
    for await (const _ of stream) {
      if (++chunks === 3) {
        controller.abort();
        break;
      }
    }
    assert.equal(chunks, 3);
    await until('the cancel', async () => {
      const m = await metrics(server.url);
      return m.loom_jobs_cancelled_total === before.loom_jobs_cancelled_total + 1 && m.loom_active_sequences === 0;
    });
    const m = await metrics(server.url);
    assert.equal(m.loom_kv_blocks_used, 0);
    assert.equal(m.loom_kv_blocks_free, m.loom_kv_blocks_total);
    assert.ok(m.loom_generated_tokens_total - before.loom_generated_tokens_total < 2 * 480);
  });

  test('curl: SSE framing is data: lines of JSON, blank-line separated, ending with data: [DONE]', () => {
    const r = spawnSync('curl', ['-sN', '-i', `${server.url}/v1/completions`, '-H', 'Content-Type: application/json',
      '-d', JSON.stringify({ prompt: 'Once upon a time', max_tokens: 6, temperature: 0, stream: true })], { encoding: 'utf8' });
    if (r.error) return;  // no curl on this machine
    const [head, body] = r.stdout.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /Content-Type: text\/event-stream/i);
    assert.match(head, /Transfer-Encoding: chunked/i);
    const events = body.split('\n\n');
    assert.equal(events.pop(), '');  // the stream ends with a blank line
    assert.equal(events.pop(), 'data: [DONE]');
    assert.equal(events.length, 7);  // 6 tokens, then the finish
    let text = '';
    for (const e of events) {
      assert.match(e, /^data: \{.*\}$/s);
      assert.ok(!e.slice(6).includes('\n'), 'one line per event');
      const chunk = JSON.parse(e.slice(6));
      assert.equal(chunk.object, 'text_completion');
      text += chunk.choices[0].text;
    }
    const whole = loomRun(['--prompt', 'Once upon a time', '--max-tokens', '6']);
    assert.equal('Once upon a time' + text, whole);
    assert.equal(JSON.parse(events.at(-1).slice(6)).choices[0].finish_reason, 'length');
  });
});

describe('loom serve: API key, queue limit, shutdown', () => {
  test('--api-key: every endpoint but /health needs the Bearer key', async () => {
    const server = await startServer(['--api-key', 'sk-loom-test']);
    try {
      const none = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
      await assert.rejects(none.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
      const noHeader = await fetch(`${server.url}/v1/models`);
      assert.equal(noHeader.status, 401);
      assert.match((await noHeader.json()).error.message, /didn't provide an API key/);
      assert.equal((await fetch(`${server.url}/metrics`)).status, 401);
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      const good = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-loom-test', maxRetries: 0 });
      const r = await good.completions.create({ prompt: 'Once', max_tokens: 3, temperature: 0 });
      assert.equal(r.usage.completion_tokens, 3);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('a full queue answers 429 with Retry-After; SIGTERM during a stream ends it and exits 0', async () => {
    const server = await startServer(['--parallel', '1', '--queue', '1', '--drain-timeout', '0.2']);
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const long = { prompt: 'Once upon a time', max_tokens: 480, temperature: 1, logit_bias: { 2: -100 }, stream: true };
    const running = await client.completions.create(long);
    const it = running[Symbol.asyncIterator]();
    await it.next();  // admitted and decoding: the queue is empty again
    const results = await Promise.all([0, 1, 2].map(() => postJson(server.url, '/v1/completions', { ...long, stream: false })
      .then((r) => r, (e) => ({ status: -1, e }))));
    // One waits in the queue (and is ended by the shutdown below); the others are refused at once.
    const refused = results.filter((r) => r.status === 429);
    assert.ok(refused.length >= 1, JSON.stringify(results.map((r) => r.status)));
    assert.equal(refused[0].headers.get('retry-after'), '1');
    assert.equal(refused[0].json.error.code, 'rate_limit_exceeded');
    while (!(await it.next()).done) { /* drain the first stream */ }
    // SIGTERM while a stream runs: it ends (finished, or cut with an error event), exit 0.
    const last = await client.completions.create(long);
    const it2 = last[Symbol.asyncIterator]();
    await it2.next();
    const stopping = server.stop();
    try {
      while (!(await it2.next()).done) { /* until the end */ }
    } catch (e) {
      assert.match(String(e), /shutting down/);
    }
    const stopped = await stopping;
    assert.equal(stopped.code, 0);
    assert.ok(stopped.seconds < 10, `shutdown took ${stopped.seconds} s`);
  });
});
