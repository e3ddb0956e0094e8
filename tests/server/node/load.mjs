// A bounded load test of loom serve with the official OpenAI Node client: C concurrent
// clients x R mixed requests each (completions and chat, streaming and not, greedy and
// seeded sampling, every 7th stream aborted mid-way), on stories260K. Fails (exit 1) on
// any failed or lost response, on any text that differs from the same request served
// alone (batch invariance end to end), when the KV pool is not empty afterwards, or when
// the resident memory does not come back to its warm baseline. Prints requests/s,
// aggregate tokens/s and p50/p99 of time to first token and of latency.
// Usage: node load.mjs [--clients 16] [--requests 50] [--parallel 8] [--model PATH] [--max-tokens 40]
import OpenAI from 'openai';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, metrics, until, STORIES } from './harness.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const clients = Number(arg('clients', 16));
const perClient = Number(arg('requests', 50));
const parallel = Number(arg('parallel', 8));
const maxTokens = Number(arg('max-tokens', 40));
const model = arg('model', STORIES);
const here = path.dirname(fileURLToPath(import.meta.url));

const prompts = ['Once upon a time', 'The cat', 'One day', 'Lily and Tom went to the park', 'The sun was',
                 'A big dog', 'Tim had a red ball', 'Mom said'];
// 24 distinct requests; request j of the run is spec j % 24, streamed or not, maybe aborted.
const specs = [];
for (let i = 0; i < 24; i++) {
  const chat = i % 3 === 2;
  const prompt = prompts[i % prompts.length];
  const sampling = i % 2 === 0 ? { temperature: 0 } : { temperature: 0.9, seed: 1000 + i };
  const base = { model: 'stories', max_tokens: 8 + ((i * 7) % (maxTokens - 7)), ...sampling };
  specs.push(chat ? { chat, body: { ...base, messages: [{ role: 'user', content: prompt }] } }
                  : { chat, body: { ...base, prompt } });
}

const pct = (v, p) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

// One request; returns its text, completion tokens and timings (ms).
async function run(client, spec, stream, abortAfter = 0) {
  const t0 = performance.now();
  let ttft = null;
  const api = spec.chat ? client.chat.completions : client.completions;
  if (!stream) {
    const r = await api.create(spec.body);
    const text = spec.chat ? r.choices[0].message.content : r.choices[0].text;
    return { text, tokens: r.usage.completion_tokens, latency: performance.now() - t0, ttft: null };
  }
  const controller = new AbortController();
  const s = await api.create({ ...spec.body, stream: true, stream_options: { include_usage: true } },
                             { signal: controller.signal });
  let text = '';
  let tokens = 0;
  let chunks = 0;
  try {
    for await (const chunk of s) {
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      for (const c of chunk.choices) {
        const piece = spec.chat ? (c.delta.content ?? '') : c.text;
        if (piece && ttft === null) ttft = performance.now() - t0;
        text += piece;
      }
      if (abortAfter && ++chunks === abortAfter) {
        controller.abort();
        return { aborted: true };
      }
    }
  } catch (e) {
    if (!abortAfter) throw e;
    return { aborted: true };
  }
  return { text, tokens, latency: performance.now() - t0, ttft };
}

const server = await startServer(['--model', model, '--parallel', String(parallel), '--queue', '256',
                                  '--chat-template', path.join(here, 'plain-chat.jinja')]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
let failed = 0;
const problems = [];
try {
  // Each request alone, one at a time: the texts the load must reproduce.
  const alone = [];
  for (const spec of specs) alone.push((await run(client, spec, false)).text);
  // Warm-up at full concurrency, then the baseline: the pool, threads and buffers are made.
  await Promise.all(Array.from({ length: clients }, (_, c) => run(client, specs[c % specs.length], c % 2 === 1)));
  await until('idle', async () => (await metrics(server.url)).loom_active_sequences === 0);
  const baseline = (await metrics(server.url)).loom_process_resident_memory_bytes;

  const latencies = [];
  const ttfts = [];
  let tokens = 0;
  let aborted = 0;
  let completed = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; i < perClient; i++) {
      const j = c * perClient + i;
      const spec = specs[j % specs.length];
      const stream = j % 2 === 1;
      const abortAfter = stream && j % 7 === 3 ? 2 : 0;
      try {
        const r = await run(client, spec, stream, abortAfter);
        if (r.aborted) {
          aborted++;
          continue;
        }
        completed++;
        latencies.push(r.latency);
        if (r.ttft !== null) ttfts.push(r.ttft);
        tokens += r.tokens;
        if (r.text !== alone[j % specs.length]) {
          failed++;
          problems.push(`request ${j} (spec ${j % specs.length}, stream ${stream}): text differs from its lone run`);
        }
      } catch (e) {
        failed++;
        problems.push(`request ${j}: ${e}`);
      }
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  await until('the pool to empty', async () => {
    const m = await metrics(server.url);
    return m.loom_active_sequences === 0 && m.loom_kv_blocks_used === 0 && m.loom_queue_depth === 0;
  });
  const m = await metrics(server.url);
  const rss = m.loom_process_resident_memory_bytes;
  const total = clients * perClient;
  console.log(`load: ${clients} clients x ${perClient} requests (--parallel ${parallel}): ${completed} completed, ` +
              `${aborted} aborted, ${failed} failed, ${total - completed - aborted - failed} lost`);
  console.log(`load: ${(total / seconds).toFixed(1)} requests/s, ${(tokens / seconds).toFixed(1)} tokens/s aggregate ` +
              `(${tokens} tokens in ${seconds.toFixed(2)} s)`);
  console.log(`load: time to first token p50 ${pct(ttfts, 50).toFixed(1)} ms, p99 ${pct(ttfts, 99).toFixed(1)} ms; ` +
              `latency p50 ${pct(latencies, 50).toFixed(1)} ms, p99 ${pct(latencies, 99).toFixed(1)} ms`);
  console.log(`load: RSS warm ${(baseline / 2 ** 20).toFixed(1)} MiB, after ${(rss / 2 ** 20).toFixed(1)} MiB; ` +
              `KV blocks used ${m.loom_kv_blocks_used} of ${m.loom_kv_blocks_total}; cancelled jobs ${m.loom_jobs_cancelled_total}`);
  if (completed + aborted + failed !== total) problems.push('responses were lost');
  if (aborted === 0) problems.push('no request was aborted');
  // Freed memory may stay with the allocator in part; a leak grows with the request count.
  // A sanitized build keeps freed memory in quarantine (its leak checker runs at exit instead).
  if (process.env.LOOM_SANITIZED) {
    console.log('load: RSS not compared (sanitized build: freed memory stays in quarantine; LeakSanitizer checks at exit)');
  } else if (rss > baseline * 1.1 + 16 * 2 ** 20) {
    problems.push(`RSS grew from ${baseline} to ${rss} bytes`);
  }
} finally {
  const stopped = await server.stop();
  if (stopped.code !== 0) problems.push(`loom serve exited ${stopped.code} (${stopped.signal})`);
}
for (const p of problems.slice(0, 20)) console.log(`FAILED: ${p}`);
process.exit(problems.length || failed ? 1 : 0);
