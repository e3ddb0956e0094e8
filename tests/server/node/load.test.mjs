// ctest's entry to the load test: load.mjs at its fixed size (16 clients x 50 requests,
// --parallel 8), as a node:test case, so its figures show in the test output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

test('load: 16 clients x 50 mixed requests, none failed or lost, each equal to its lone run, no leak', () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const r = spawnSync(process.execPath, [path.join(here, 'load.mjs'), '--clients', '16', '--requests', '50', '--parallel', '8'],
                      { encoding: 'utf8', timeout: 300000 });
  process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  assert.equal(r.status, 0, 'load.mjs failed');
});
