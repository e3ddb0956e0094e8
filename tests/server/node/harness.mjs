// Starts `loom serve` for the Node tests: a free loopback port (--port 0; the server prints
// the address it bound), waits for it, stops it with SIGTERM and checks it exits 0.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

export const LOOM = process.env.LOOM_CLI;
if (!LOOM || !existsSync(LOOM)) throw new Error(`LOOM_CLI must name the loom binary (got ${LOOM})`);
export const SOURCE_DIR = process.env.LOOM_SOURCE_DIR;
export const STORIES = path.join(SOURCE_DIR, 'examples/models/stories260K/stories260K.bin');
export const REFERENCE = process.env.LOOM_REFERENCE_DIR || path.join(SOURCE_DIR, '../shared/reference');
// A tiny model with a tokenizer whose vocabulary has <|im_start|>/<|im_end|>, served with
// a real chat template (Qwen2.5's) from the reference set.
export const QWEN = path.join(REFERENCE, 'models/qwen2-tiny/hf');
export const QWEN_TEMPLATE = path.join(REFERENCE, 'chat/templates/Qwen-Qwen2.5-7B-Instruct.jinja');
export const haveReference = existsSync(QWEN) && existsSync(QWEN_TEMPLATE);

export async function startServer(args = []) {
  const proc = spawn(LOOM, ['serve', '--port', '0', '--no-report', '--quiet', '--threads', '2', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`loom serve did not start:\n${stderr}`)), 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', () => reject(new Error(`loom serve exited before listening:\n${stderr}`)));
  });
  return {
    url,
    proc,
    stderr: () => stderr,
    // SIGTERM: a graceful stop; resolves with the exit code and the seconds it took.
    async stop() {
      const t0 = Date.now();
      proc.kill('SIGTERM');
      const { code, signal } = await exited;
      return { code, signal, seconds: (Date.now() - t0) / 1000 };
    },
  };
}

// `loom run` on the same model and prompt, greedy: what the server must reproduce.
export function loomRun(args) {
  const r = spawnSync(LOOM, ['run', '--no-report', '--temperature', '0', '--threads', '2', ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`loom run failed: ${r.stderr}`);
  return r.stdout;
}

// The Prometheus text of /metrics as name -> value (labelled series are left out).
export async function metrics(url, headers = {}) {
  const body = await (await fetch(`${url}/metrics`, { headers })).text();
  const out = {};
  for (const line of body.split('\n')) {
    const m = line.match(/^([a-z_]+) (\S+)$/);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

export async function until(what, fn, seconds = 10) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function postJson(url, route, body, headers = {}) {
  const res = await fetch(`${url}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}
