// Pages of other sites against a token-less `askloop serve` on loopback, in
// a real browser (Debian's chromium driven by playwright-core): a form that
// submits itself to the API, a `no-cors` fetch, and a page whose name is
// pointed at 127.0.0.1 (DNS rebinding). None may change a run; the
// server's own page, in the same browser, can.
//
// Started by the Rust test `cross_site` (crates/askloop-cli/tests/cross_site.rs),
// which runs `askloop serve` and passes, in the environment:
//   ASKLOOP_WEB_URL  the server (no token), http://127.0.0.1:PORT
//   ASKLOOP_RUN_ID   a run waiting on a question

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { launchWithProfile, requiredEnv } from './browser.mjs';

const env = (name) => requiredEnv(name, 'cross_site');
const BASE = env('ASKLOOP_WEB_URL');
const RUN = env('ASKLOOP_RUN_ID');
const PORT = new URL(BASE).port;
const RUN_URL = `${BASE}/api/runs/${encodeURIComponent(RUN)}`;
const PATIENCE = 20_000;

let browser;
let context;
let attacker;
let attackerBase;
// Every request the attacker's pages made reach their end here, so the test
// knows when the browser has sent them.
const reported = [];

/// Serves the attacker's pages: one submits a form to the API, one sends
/// `no-cors` fetches and reports when they settled.
function attackerPages(request, response) {
  const url = new URL(request.url, 'http://attacker');
  if (url.pathname === '/report') {
    reported.push(url.searchParams.get('what'));
    response.end('ok');
    return;
  }
  response.setHeader('content-type', 'text/html; charset=utf-8');
  if (url.pathname === '/form') {
    response.end(`<!doctype html><title>win a prize</title>
      <form id="f" method="POST" enctype="text/plain" action="${RUN_URL}/cancel">
        <input name="x" value="1"></form>
      <script>document.getElementById('f').submit();</script>`);
    return;
  }
  response.end(`<!doctype html><title>win a prize</title><script>
    const send = (path, init) => fetch('${RUN_URL}' + path, { method: 'POST', mode: 'no-cors', ...init })
      .catch(() => {}).finally(() => fetch('/report?what=' + encodeURIComponent(path)));
    send('/cancel', { body: 'x', headers: { 'content-type': 'text/plain' } });
    send('/retry', {});
  </script>`);
}

async function storedStatus() {
  const response = await fetch(RUN_URL);
  assert.equal(response.status, 200);
  return (await response.json()).status;
}

before(async () => {
  attacker = createServer(attackerPages);
  await new Promise((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  // `localhost` and 127.0.0.1 are other sites for the browser (another
  // host, another port).
  attackerBase = `http://localhost:${attacker.address().port}`;
  browser = await launchWithProfile({
    // What DNS rebinding achieves: a name of the attacker's that resolves
    // to this machine.
    args: ['--host-resolver-rules=MAP rebound.test 127.0.0.1'],
  });
  context = browser.context;
});

after(async () => {
  await browser?.close();
  attacker?.close();
});

test('a form another site submits to the API is refused and the run stays waiting', async () => {
  const page = await context.newPage();
  const answered = page.waitForResponse((r) => r.url().endsWith('/cancel'), { timeout: PATIENCE });
  await page.goto(`${attackerBase}/form`);
  const response = await answered;
  assert.equal(response.status(), 403);
  assert.equal((await response.json()).error.code, 'cross_site');
  assert.equal(await storedStatus(), 'suspended');
  await page.close();
});

test('no-cors fetches of another site change nothing', async () => {
  const page = await context.newPage();
  await page.goto(`${attackerBase}/fetch`);
  await page.waitForFunction(() => true);
  const deadline = Date.now() + PATIENCE;
  while (reported.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual([...reported].sort(), ['/cancel', '/retry']);
  assert.equal(await storedStatus(), 'suspended');
  await page.close();
});

test('a page whose name is pointed at this machine is refused before it can read or change a run', async () => {
  const page = await context.newPage();
  const response = await page.goto(`http://rebound.test:${PORT}/runs/${encodeURIComponent(RUN)}`);
  assert.equal(response.status(), 403);
  const outcome = await page.evaluate(async (run) => {
    const read = await fetch(`/api/runs/${encodeURIComponent(run)}`);
    const cancel = await fetch(`/api/runs/${encodeURIComponent(run)}/cancel`, { method: 'POST' });
    return { read: read.status, cancel: cancel.status, code: (await cancel.json()).error.code };
  }, RUN);
  assert.deepEqual(outcome, { read: 403, cancel: 403, code: 'host_not_allowed' });
  assert.equal(await storedStatus(), 'suspended');
  await page.close();
});

test("the server's own page in the same browser can still cancel the run", async () => {
  const page = await context.newPage();
  await page.goto(`${BASE}/runs/${encodeURIComponent(RUN)}`);
  const status = await page.evaluate(
    async (run) => (await fetch(`/api/runs/${encodeURIComponent(run)}/cancel`, { method: 'POST' })).status,
    RUN,
  );
  assert.equal(status, 200);
  assert.equal(await storedStatus(), 'cancelled');
  await page.close();
});
