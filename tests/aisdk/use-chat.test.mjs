// The example page (examples/use-chat: React's useChat from @ai-sdk/react)
// in a real browser against askloop serve: bundled here with esbuild,
// served from another origin than the server's (so CORS is on the path),
// driven by Debian's chromium through playwright-core (tests/web's
// launcher). Run by crates/askloop-cli/tests/aisdk.rs with ASKLOOP_URL,
// ASKLOOP_API_TOKEN, ASKLOOP_PAGE_PORT (the port the server allows as an
// origin) and ASKLOOP_SCREENSHOT (where to put a picture of a question; one
// of the answered question goes next to it, `-answered.png`).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { build } from 'esbuild';
import { launch } from '../web/browser.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const example = join(here, '../../examples/use-chat');
const base = process.env.ASKLOOP_URL;
const token = process.env.ASKLOOP_API_TOKEN;
const port = Number(process.env.ASKLOOP_PAGE_PORT);
const screenshot = process.env.ASKLOOP_SCREENSHOT;
assert.ok(base && token && port, 'ASKLOOP_URL, ASKLOOP_API_TOKEN and ASKLOOP_PAGE_PORT must be set');

let page_server;
let browser;

before(async () => {
  const bundled = await build({
    entryPoints: [join(example, 'App.jsx')],
    bundle: true,
    format: 'esm',
    jsx: 'automatic',
    write: false,
    // The example has no node_modules of its own here: these are its packages.
    nodePaths: [join(here, 'node_modules')],
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
  const files = {
    '/': ['text/html', readFileSync(join(example, 'index.html'))],
    '/app.js': ['text/javascript', bundled.outputFiles[0].contents],
  };
  page_server = createServer((request, response) => {
    const file = files[new URL(request.url, 'http://page').pathname];
    if (!file) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { 'content-type': file[0] }).end(file[1]);
  });
  await new Promise((resolve) => page_server.listen(port, '127.0.0.1', resolve));
  browser = await launch();
});

after(async () => {
  await browser?.close();
  page_server?.close();
});

// A fresh page on `agent`; its errors fail the test.
async function pageFor(agent) {
  const context = await browser.newContext({ viewport: { width: 800, height: 600 } });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => message.type() === 'error' && errors.push(message.text()));
  // useChat's `resume` asks for a stream of the chat as the page opens.
  const reattached = page.waitForResponse((r) => r.url().endsWith('/stream'));
  const query = new URLSearchParams({ server: base, agent, token });
  await page.goto(`http://127.0.0.1:${port}/?${query}`);
  return { page, errors, reattached };
}

async function send(page, text) {
  await page.getByLabel('Message').fill(text);
  await page.getByRole('button', { name: 'Send' }).click();
}

test('a question from ask_user is answered in the page, and the run ends with its text shown', async () => {
  const { page, errors, reattached } = await pageFor('assistant');
  const resume = await reattached;
  assert.equal(resume.status(), 204, 'no stream of this chat yet: nothing to re-attach to');
  assert.match(resume.url(), new RegExp(`^${base}/chat/assistant/[^/]+/stream$`));

  await send(page, 'Deploy the app.');
  const question = page.getByRole('group', { name: 'Which environment should I deploy to?' });
  await question.waitFor();
  assert.equal(await question.getByRole('button').count(), 2);
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

  const answer = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/chat/assistant'));
  await question.getByRole('button', { name: 'staging' }).click();
  const body = (await answer).postDataJSON();
  assert.equal(body.resumeData, 'staging');
  assert.ok(body.runId && body.toolCallId, JSON.stringify(body));
  await page.getByText(/^Deploying to .*staging/).waitFor();
  await question.getByText('User answered: staging').waitFor();
  assert.equal(await question.getByRole('button').count(), 0, 'an answered question offers no answers');
  // The text shows before the stream's end is read: wait for the chat to settle.
  await page.locator('.status', { hasText: 'Status: ready' }).waitFor({ timeout: 10_000 });
  if (screenshot) await page.screenshot({ path: screenshot.replace(/\.png$/, '-answered.png'), fullPage: true });
  assert.deepEqual(errors, []);
});

test('a call that needs approval is approved in the page; the tool runs and the chat goes on', async () => {
  const { page, errors } = await pageFor('writer');
  await send(page, 'Write the deploy notes.');
  const approve = page.getByRole('button', { name: 'Approve' });
  await approve.waitFor();
  await approve.click();
  await page.getByText(/^Done: /).waitFor();
  assert.equal(await page.locator('.tool .state').textContent(), 'output-available');
  assert.equal(await page.getByRole('button', { name: 'Approve' }).count(), 0);
  assert.deepEqual(errors, []);
});
