// loom serve's chat completions through the official OpenAI Node client, on a tiny
// Qwen2 model from the reference set with Qwen2.5's chat template: streaming and not,
// n > 1, logprobs, and greedy text equal to `loom run --chat`'s.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, loomRun, haveReference, QWEN, QWEN_TEMPLATE } from './harness.mjs';

describe('loom serve: chat completions (qwen2-tiny, Qwen2.5 template)', { skip: haveReference ? false : `reference data absent (${QWEN})` }, () => {
  let server;
  let client;
  const messages = [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: 'Name a colour.' }];
  before(async () => {
    server = await startServer(['--model', QWEN, '--chat-template', QWEN_TEMPLATE, '--parallel', '4', '--ctx', '256']);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
  });

  test('greedy chat reply equals loom run --chat', async () => {
    const r = await client.chat.completions.create({ model: 'qwen', messages: [messages[1]], max_tokens: 24, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    const cli = loomRun(['--model', QWEN, '--template', QWEN_TEMPLATE, '--chat', '--prompt', messages[1].content,
                         '--max-tokens', '24', '--ctx', '256']);
    assert.equal(r.choices[0].message.content + '\n', cli);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 10);  // the rendered template, not just the message
  });

  test('streaming chat: role first, content deltas join to the whole reply, usage chunk', async () => {
    const body = { model: 'qwen', messages, max_completion_tokens: 20, temperature: 0 };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let first = true;
    let content = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (first) {
          assert.equal(c.delta.role, 'assistant');
          first = false;
        }
        content += c.delta.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(content, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.deepEqual(usage, whole.usage);
  });

  test('n = 3 with a seed, and logprobs with top_logprobs', async () => {
    const r = await client.chat.completions.create({ messages, max_tokens: 12, temperature: 1, n: 3, seed: 5,
                                                     logprobs: true, top_logprobs: 2 });
    assert.equal(r.choices.length, 3);
    for (const c of r.choices) {
      const lp = c.logprobs.content;
      assert.ok(lp.length >= 1);
      for (const t of lp) {
        assert.equal(t.top_logprobs.length, 2);
        assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
        assert.ok(t.logprob <= t.top_logprobs[0].logprob + 1e-6);
        assert.ok(Array.isArray(t.bytes));
      }
    }
    const again = await client.chat.completions.create({ messages, max_tokens: 12, temperature: 1, n: 3, seed: 5 });
    assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
  });

  test('chat errors: missing messages, a bad role, image parts, tools', async () => {
    for (const [body, param] of [[{}, 'messages'],
                                 [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role'],
                                 [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0].type'],
                                 [{ messages, tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools']]) {
      await assert.rejects(client.chat.completions.create(body), (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.param, param);
        return true;
      });
    }
  });
});
