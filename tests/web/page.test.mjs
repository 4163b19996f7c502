// The askloop web page in a real browser: Debian's chromium driven by
// playwright-core, controls found by role and label as a person finds them.
//
// Started by the Rust test `web_page` (crates/askloop-cli/tests/web_page.rs),
// which runs `askloop serve` with scripted agents and passes, in the
// environment:
//   ASKLOOP_WEB_URL         the server (no token)
//   ASKLOOP_WEB_TOKEN_URL   a second server on the same store, with a token
//   ASKLOOP_WEB_TOKEN       that token
//   ASKLOOP_WEB_BUSY_URL    a third server, on a store of its own, that one
//                           test fills with more waiting runs than a page holds
//   ASKLOOP_BIN             the askloop binary (for `askloop run` in another process)
//   ASKLOOP_WEB_DB          the SQLite file both servers use
//   ASKLOOP_WEB_CLI_SCRIPT  the script `askloop run` plays
//   ASKLOOP_WEB_SCREENSHOTS where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { launchWithProfile, openPage, requiredEnv } from './browser.mjs';

const env = (name) => requiredEnv(name, 'web_page');
const BASE = env('ASKLOOP_WEB_URL');
const TOKEN_BASE = env('ASKLOOP_WEB_TOKEN_URL');
const TOKEN = env('ASKLOOP_WEB_TOKEN');
const BUSY = env('ASKLOOP_WEB_BUSY_URL');
const BIN = env('ASKLOOP_BIN');
const DB = env('ASKLOOP_WEB_DB');
const CLI_SCRIPT = env('ASKLOOP_WEB_CLI_SCRIPT');
const SHOTS = env('ASKLOOP_WEB_SCREENSHOTS');
mkdirSync(SHOTS, { recursive: true });

// Waits are for things to appear, bounded only so a broken page fails
// instead of hanging.
const PATIENCE = 20_000;

let browser;
let context;

before(async () => {
  browser = await launchWithProfile({ viewport: { width: 1200, height: 860 } });
  context = browser.context;
  context.setDefaultTimeout(PATIENCE);
});

after(async () => {
  await browser?.close();
});

/** Sends a chat message to an agent and returns the reply's turn. */
async function chat(page, agent, text) {
  await page.getByLabel('Agent').selectOption({ label: agent });
  await page.getByLabel('Message').fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  return page.locator('article.turn.assistant').last();
}

/** Runs `askloop run` in another process, as a person at a terminal would. */
function askloopRun(prompt) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, ['run', '--script', CLI_SCRIPT, prompt], {
      env: { ...process.env, ASKLOOP_DB: DB, ASKLOOP_API_TOKEN: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', reject);
    // 3: the run waits for an answer (see askloop --help).
    child.on('exit', (code) => (code === 0 || code === 3 ? resolve(out) : reject(new Error(`askloop run exited ${code}: ${out}`))));
  });
}

test('chat: the reply streams in and three questions of one step are answered in any order', async () => {
  const page = await openPage(context, BASE);
  const turn = await chat(page, 'Assistant', 'Plan the launch');
  await turn.getByText('Let me ask a few things first.').waitFor();
  const region = page.getByRole('form', { name: 'Which region should we launch in?' });
  const channels = page.getByRole('form', { name: 'Which channels should announce it?' });
  const name = page.getByRole('form', { name: 'What should the launch be called?' });
  await Promise.all([region.waitFor(), channels.waitFor(), name.waitFor()]);
  // Each option's description is shown.
  await region.getByText('Frankfurt; data stays in the EU').waitFor();
  await page.screenshot({ path: join(SHOTS, 'chat-question.png') });

  // Free text first, then the multi-select, then the single-select.
  await page.getByRole('textbox', { name: 'What should the launch be called?' }).fill('Aurora');
  await name.getByRole('button', { name: 'Send answer' }).click();
  await name.getByText('Answered: Aurora').waitFor();

  await channels.getByRole('checkbox', { name: 'Email' }).check();
  await channels.getByRole('checkbox', { name: 'Blog' }).check();
  await channels.getByRole('button', { name: 'Send answer' }).click();
  await channels.getByText('Answered: Email, Blog').waitFor();

  await region.getByRole('radio', { name: 'Europe' }).check();
  await region.getByRole('button', { name: 'Send answer' }).click();
  await region.getByText('Answered: Europe').waitFor();

  const reply = turn.getByText(/^All set: /);
  await reply.waitFor();
  for (const answer of ['User answered: Aurora', 'User answered: Email, Blog', 'User answered: Europe']) {
    assert.ok((await reply.textContent()).includes(answer), `the reply names ${answer}`);
  }
  await turn.getByText('Done', { exact: true }).waitFor();
  assert.deepEqual(page.problems, []);
  await page.close();
});

test('a rejected answer shows the server reason beside the form, which keeps what was entered', async () => {
  const page = await openPage(context, BASE);
  await chat(page, 'Assistant', 'Plan another launch');
  const channels = page.getByRole('form', { name: 'Which channels should announce it?' });
  const name = page.getByRole('form', { name: 'What should the launch be called?' });
  await channels.waitFor();

  // Nothing chosen: the server refuses (422) and says why.
  await channels.getByRole('button', { name: 'Send answer' }).click();
  await channels.getByRole('alert').getByText('a multi-select answer needs at least one label').waitFor();

  // Only spaces: refused; the text stays in the box.
  const box = page.getByRole('textbox', { name: 'What should the launch be called?' });
  await box.fill('   ');
  await name.getByRole('button', { name: 'Send answer' }).click();
  await name.getByRole('alert').getByText('the answer is empty').waitFor();
  assert.equal(await box.inputValue(), '   ');
  assert.equal(await box.isEnabled(), true, 'the form can be answered again');

  // Then a good answer goes through, and the reason goes away.
  await channels.getByRole('checkbox', { name: 'Push' }).check();
  await channels.getByRole('button', { name: 'Send answer' }).click();
  await channels.getByText('Answered: Push').waitFor();
  assert.equal(await channels.getByRole('alert').isVisible(), false);
  await page.close();
});

test('inbox: a question raised by askloop run in another process appears without reloading and is answered there', async () => {
  const page = await openPage(context, `${BASE}/inbox`);
  await page.getByRole('heading', { name: 'Inbox' }).waitFor();
  await page.locator('body[data-live="on"]').waitFor();
  const before = await page.getByRole('form', { name: 'Which environment should I deploy to?' }).count();

  const printed = await askloopRun('Deploy the site');
  assert.match(printed, /Which environment should I deploy to\?/);

  const card = page.locator('li.card', { has: page.getByRole('form', { name: 'Which environment should I deploy to?' }) }).first();
  await page.waitForFunction(
    (n) => document.querySelectorAll('form[aria-label="Which environment should I deploy to?"]').length > n,
    before,
  );
  // The count of waiting questions is in the navigation, on every view.
  await page.getByRole('navigation', { name: 'Main' }).locator('#inbox-count:not([hidden])').waitFor();
  await page.screenshot({ path: join(SHOTS, 'inbox.png') });

  await card.getByRole('radio', { name: 'staging' }).check();
  await card.getByRole('button', { name: 'Send answer' }).click();
  await card.getByText('Answered: staging', { exact: true }).waitFor();
  await card.getByText('All set: User answered: staging').waitFor();
  assert.deepEqual(page.problems, []);
  await page.close();
});

/** Starts a run on the busy server and returns once it waits on a person. */
async function startWaiting(agent, runId) {
  const response = await fetch(`${BUSY}/api/agents/${agent}/stream`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: `Ticket ${runId}`, runId }),
  });
  const body = await response.text();
  assert.equal(response.status, 200, body);
  assert.match(body, /tool-call-(suspended|approval)/, `${runId} waits: ${body.slice(0, 300)}`);
}

const BUSY_WAITING = 527;
const BUSY_AGENTS = ['support', 'release', 'deployer'];
const busyId = (n) => `busy-${String(n).padStart(4, '0')}`;

test('inbox: with more runs waiting than a page holds, the heading counts them all and reading on reaches the oldest', async () => {
  // The oldest alone first, then the others a few at a time.
  await startWaiting('support', busyId(0));
  for (let i = 1; i < BUSY_WAITING; i += 8) {
    const batch = [];
    for (let n = i; n < Math.min(i + 8, BUSY_WAITING); n += 1) batch.push(startWaiting(BUSY_AGENTS[n % 3], busyId(n)));
    await Promise.all(batch);
  }

  const page = await openPage(context, `${BUSY}/inbox`);
  const heading = page.getByRole('heading', { name: 'Inbox' });
  await heading.getByText('527 waiting', { exact: true }).waitFor();
  await page.getByRole('navigation', { name: 'Main' }).locator('#inbox-count', { hasText: /^527$/ }).waitFor();
  const cards = page.locator('li.card');
  // The footer counts the cards on the page (read together, in the page:
  // the next page may already be loading as the list's end comes near).
  const shown = await page.waitForFunction(() => {
    const n = document.querySelectorAll('li.card').length;
    return n > 0 && document.body.innerText.includes(`${n} of 527 shown`) ? n : false;
  });
  const firstPage = await shown.jsonValue();
  assert.ok(firstPage < BUSY_WAITING, `one page first, not every card at once (${firstPage} cards)`);
  await page.screenshot({ path: join(SHOTS, 'inbox-busy.png') });

  // "Show more" from the keyboard: the focus moves to the first card of a new page.
  await page.getByRole('button', { name: 'Show more' }).focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.activeElement?.matches('li.card'));
  const focused = await page.evaluate(() => [...document.querySelectorAll('li.card')].indexOf(document.activeElement));
  assert.ok(focused >= firstPage, `the focus is on a card of a new page (card ${focused})`);

  // Reading on: as the end of the list comes near, the next page loads.
  const oldest = page.locator(`li.card[data-run-id="${busyId(0)}"]`);
  while ((await oldest.count()) === 0) {
    const loaded = await cards.count();
    await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
    await page.waitForFunction((n) => document.querySelectorAll('li.card').length > n, loaded);
  }
  await oldest.scrollIntoViewIfNeeded();
  await oldest.getByRole('radio', { name: 'Refund' }).waitFor();
  await page.getByText('All 527 shown').waitFor();
  const ids = await cards.evaluateAll((els) => els.map((el) => el.dataset.runId));
  assert.equal(ids.length, BUSY_WAITING);
  assert.equal(new Set(ids).size, BUSY_WAITING, 'no run has two cards');
  assert.equal(ids[ids.length - 1], busyId(0), 'the oldest comes last');
  await page.screenshot({ path: join(SHOTS, 'inbox-busy-end.png') });

  // Live updates keep every page loaded: a question answered elsewhere
  // leaves, a new one comes on top, nothing is shown twice.
  const answer = await fetch(`${BUSY}/api/agents/release/resume-stream`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ runId: busyId(1), resumeData: 'It reads CSV files twice as fast' }),
  });
  assert.equal(answer.status, 200, await answer.text());
  await page.locator(`li.card[data-run-id="${busyId(1)}"]`).waitFor({ state: 'detached' });
  await heading.getByText('526 waiting', { exact: true }).waitFor();
  await startWaiting('support', 'busy-new');
  await page.locator('li.card[data-run-id="busy-new"]').waitFor();
  await heading.getByText('527 waiting', { exact: true }).waitFor();
  const after = await cards.evaluateAll((els) => els.map((el) => el.dataset.runId));
  assert.equal(after.length, BUSY_WAITING);
  assert.equal(new Set(after).size, BUSY_WAITING, 'no run has two cards');
  assert.equal(after[0], 'busy-new');
  assert.equal(after[after.length - 1], busyId(0));
  assert.deepEqual(page.problems, []);
  await page.close();
});

test('approve and decline a tool call', async () => {
  let page = await openPage(context, BASE);
  let turn = await chat(page, 'Deployer', 'Write the release notes');
  let approval = page.getByRole('form', { name: 'Approve write_file?' });
  await approval.waitFor();
  await approval.getByText('write_file').first().waitFor();
  await approval.getByText('"path": "NOTES.md"').waitFor();
  await approval.getByRole('button', { name: 'Approve' }).click();
  await approval.getByRole('status').filter({ hasText: 'Approved' }).waitFor();
  await turn.getByText(/^Done: /).waitFor();
  await page.close();

  page = await openPage(context, BASE);
  turn = await chat(page, 'Deployer', 'Write the release notes again');
  approval = page.getByRole('form', { name: 'Approve write_file?' });
  await approval.getByLabel('Reason (optional)').fill('Not before the review');
  await approval.getByRole('button', { name: 'Decline' }).click();
  await approval.getByRole('status').filter({ hasText: 'Declined: Not before the review' }).waitFor();
  await turn.getByText(/^Done: /).waitFor();
  await page.close();
});

test('run view: two calls waiting for approval are approved at once, each run once, the reply after both', async () => {
  const page = await openPage(context, BASE);
  const turn = await chat(page, 'Publisher', 'Publish the about and pricing pages');
  await page.getByRole('form', { name: 'Approve write_file?' }).nth(1).waitFor();
  const link = turn.getByRole('link', { name: /^Run / });
  const href = await link.getAttribute('href');
  await link.click();
  await page.waitForURL(`${BASE}${href}`);
  const all = page.getByRole('group', { name: 'Decide every approval' });
  await all.getByText('2 calls wait for approval.').waitFor();
  await page.screenshot({ path: join(SHOTS, 'run-approve-all.png'), fullPage: true });
  await all.getByRole('button', { name: 'Approve all 2' }).click();
  await page.getByText('completed', { exact: true }).waitFor();
  await page.getByText(/^Published: Wrote 8 bytes to about\.md; Wrote 10 bytes to pricing\.md$/).first().waitFor();
  // Each approval is recorded once, as made from the page's API call.
  const run = await (await fetch(`${BASE}/api${href}`)).json();
  assert.deepEqual(
    run.resolutions.map((r) => [r.kind, r.toolCallId !== undefined]),
    [
      ['approved', true],
      ['approved', true],
    ],
  );
  assert.equal(run.steps, 2, 'the model was called once after both approvals');
  assert.deepEqual(page.problems, []);
  await page.close();
});

test('an approval with edited arguments: refused while not JSON or not fitting the tool, then the file has the edited content', async () => {
  const page = await openPage(context, BASE);
  const turn = await chat(page, 'Deployer', 'Write the release notes, edited');
  const approval = page.getByRole('form', { name: 'Approve write_file?' });
  await approval.waitFor();
  await approval.getByRole('button', { name: 'Edit arguments' }).click();
  const editor = approval.getByLabel('Arguments of write_file (JSON)');
  await editor.fill('{"path": "EDITED.md", "content": ');
  await approval.getByRole('button', { name: 'Approve' }).click();
  await approval.getByRole('alert').filter({ hasText: 'not valid JSON' }).waitFor();
  await editor.fill('{"path": 5, "content": "x"}');
  await approval.getByRole('button', { name: 'Approve' }).click();
  await approval.getByRole('alert').filter({ hasText: "do not fit its tool's input" }).waitFor();
  await editor.fill('{"path": "EDITED.md", "content": "# Edited by a person\\n"}');
  await page.screenshot({ path: join(SHOTS, 'approval-edit.png') });
  await approval.getByRole('button', { name: 'Approve' }).click();
  await approval.getByRole('status').filter({ hasText: 'Approved with edited arguments' }).waitFor();
  await turn.getByText(/The user edited the arguments before approving/).waitFor();
  const written = join(dirname(DB), 'written', 'EDITED.md');
  assert.equal(readFileSync(written, 'utf8'), '# Edited by a person\n');
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("the model's reasoning shows folded above its reply, and opens to be read", async () => {
  const page = await openPage(context, BASE);
  const turn = await chat(page, 'Thinker', 'Where should we launch?');
  await turn.getByText('Launch in the Americas.').waitFor();
  const reasoning = turn.locator('details.reasoning');
  await reasoning.getByText('Reasoning').waitFor();
  assert.equal(await reasoning.getAttribute('open'), null, 'folded by default');
  await reasoning.getByText('Reasoning').click();
  await reasoning.getByText('Americas has the most sign-ups this quarter.').waitFor();
  await page.screenshot({ path: join(SHOTS, 'chat-reasoning.png') });
  assert.deepEqual(page.problems, []);
  await page.close();
});

test("an MCP server's form (elicitation) is filled in, refused while incomplete, then sent from the chat", async () => {
  // Tall enough for the whole form in its screenshot.
  const page = await openPage(context, BASE, { width: 1100, height: 1700 });
  const turn = await chat(page, 'Clerk', 'Sign me up');
  const form = page.getByRole('form', { name: 'Please provide inputs for the following fields:' });
  await form.waitFor();
  await form.getByText('everything · trigger-elicitation-request').waitFor();
  // Defaults from the server's schema are filled in.
  assert.equal(await form.getByLabel('String with default', { exact: true }).inputValue(), 'It was a dark and stormy night.');
  assert.equal(await form.getByLabel('Integer', { exact: true }).inputValue(), '42');

  // The required name is missing: the server refuses, the form keeps the rest.
  await form.getByRole('checkbox', { name: 'Boolean', exact: true }).check();
  await form.getByRole('button', { name: 'Send', exact: true }).click();
  await form.getByRole('alert').filter({ hasText: '"name" is a required property' }).waitFor();
  assert.ok(await form.getByRole('checkbox', { name: 'Boolean', exact: true }).isChecked());

  await form.getByRole('textbox', { name: 'String', exact: true }).fill('Ada Lovelace');
  await form.getByLabel('Titled Single Select Enum', { exact: true }).selectOption({ label: 'Wonder Woman' });
  await form.getByRole('checkbox', { name: 'Salmon' }).check();
  await form.screenshot({ path: join(SHOTS, 'mcp-form.png') });
  await form.getByRole('button', { name: 'Send', exact: true }).click();
  await form.getByRole('status').filter({ hasText: 'Sent' }).waitFor();

  // The MCP server got the answer on its open call and its result reached the model.
  const reply = turn.getByText(/^Done: /);
  await reply.waitFor();
  const text = await reply.textContent();
  for (const part of ['Name: Ada Lovelace', 'Agreed to terms: true', 'Favorite Integer: 42', 'hero-3', 'fish-2']) assert.ok(text.includes(part), `the reply has ${part}: ${text}`);
  assert.deepEqual(page.problems, []);
  await page.close();
});

test('run view: a run opens by its link, with its status, questions and answers', async () => {
  const page = await openPage(context, BASE);
  const turn = await chat(page, 'Assistant', 'Plan a small launch');
  const region = page.getByRole('form', { name: 'Which region should we launch in?' });
  await region.waitFor();
  await region.getByRole('radio', { name: 'Americas' }).check();
  await region.getByRole('button', { name: 'Send answer' }).click();
  await region.getByText('Answered: Americas').waitFor();

  const link = turn.getByRole('link', { name: /^Run / });
  const href = await link.getAttribute('href');
  assert.match(href, /^\/runs\/[0-9a-f-]+$/);
  await link.click();
  await page.waitForURL(`${BASE}${href}`);
  await page.getByRole('heading', { name: /^Run / }).waitFor();
  await page.getByText('suspended', { exact: true }).waitFor();
  await page.getByText('Which region should we launch in?').first().waitFor();
  // The two questions still open are answerable here.
  await page.getByRole('heading', { name: 'Waiting on 2 answers' }).waitFor();
  // The first tab goes on to the Inbox, where the run waits too.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: /^Inbox/ }).click();
  await page.getByRole('heading', { name: /^Inbox/ }).waitFor();
  const card = page.locator(`li.card[data-run-id="${decodeURIComponent(href.slice('/runs/'.length))}"]`);
  await card.waitFor();

  // The link itself, pasted into a new tab, opens the same run.
  const pasted = await openPage(context, `${BASE}${href}`, { dark: true });
  await pasted.getByRole('heading', { name: /^Run / }).waitFor();
  await pasted.getByRole('textbox', { name: 'What should the launch be called?' }).fill('Dawn');
  await pasted.getByRole('form', { name: 'What should the launch be called?' }).getByRole('button', { name: 'Send answer' }).click();
  await pasted.getByRole('checkbox', { name: 'Blog' }).check();
  await pasted.getByRole('form', { name: 'Which channels should announce it?' }).getByRole('button', { name: 'Send answer' }).click();
  await pasted.getByText('completed', { exact: true }).waitFor();
  // The conversation shows each question with its answer.
  await pasted.getByText('Americas', { exact: true }).waitFor();
  await pasted.getByText('Dawn', { exact: true }).waitFor();
  await pasted.screenshot({ path: join(SHOTS, 'run-dark.png'), fullPage: true });
  // The answers reach the first tab's Inbox live; the run view it left is
  // never drawn over it.
  await card.waitFor({ state: 'detached' });
  await page.getByRole('heading', { name: /^Inbox/ }).waitFor();
  assert.equal(await page.getByRole('heading', { name: /^Run / }).count(), 0);
  assert.deepEqual(pasted.problems, []);
  await pasted.close();
  await page.close();
});

test('screenshots: the inbox in dark mode and at phone width', async () => {
  await askloopRun('Deploy the docs');
  const dark = await openPage(context, `${BASE}/inbox`, { dark: true });
  await dark.getByRole('form', { name: 'Which environment should I deploy to?' }).first().waitFor();
  await dark.screenshot({ path: join(SHOTS, 'inbox-dark.png') });
  await dark.close();
  const phone = await openPage(context, BASE, { width: 390, height: 844 });
  await chat(phone, 'Assistant', 'Plan the launch on a phone');
  await phone.getByRole('form', { name: 'Which region should we launch in?' }).waitFor();
  await phone.screenshot({ path: join(SHOTS, 'chat-phone.png') });
  // Nothing wider than the screen.
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone screen`);
  await phone.close();
});

test('token: the page is refused without it, says when it is wrong, and lets in with it', async () => {
  const refused = await fetch(`${TOKEN_BASE}/api/agents`);
  assert.equal(refused.status, 401);
  const asset = await fetch(`${TOKEN_BASE}/assets/app.js`);
  assert.equal(asset.status, 200, 'the page files need no token');
  assert.match(asset.headers.get('content-security-policy'), /script-src 'self'/);

  const page = await openPage(context, TOKEN_BASE);
  await page.getByRole('heading', { name: 'This server needs a token' }).waitFor();
  await page.getByLabel('API token').fill('not-the-token');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByRole('alert').getByText('That token was not accepted').waitFor();
  await page.getByLabel('API token').fill(TOKEN);
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByRole('heading', { name: 'New chat' }).waitFor();
  // Streams and live updates carry the token too (fetch, not EventSource).
  await chat(page, 'Assistant', 'Plan the launch behind a token');
  await page.getByRole('form', { name: 'Which region should we launch in?' }).waitFor();
  await page.locator('body[data-live="on"]').waitFor();
  // Kept for the session: a reload does not ask again, and the conversation is back.
  await page.reload();
  await page.getByRole('heading', { name: 'Plan the launch behind a token' }).waitFor();
  await page.getByRole('form', { name: 'Which region should we launch in?' }).waitFor();
  assert.equal(await page.getByLabel('API token').count(), 0);
  await page.close();
});

test('run view: a run whose id holds spaces, a slash and URL marks opens by its encoded link and is answered there', async () => {
  const runId = 'a b/c?d#e<x> 運行';
  const started = await fetch(`${BASE}/api/agents/assistant/stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: 'Plan a small launch', runId }),
  });
  assert.equal(started.status, 200);
  await started.text();

  const page = await openPage(context, `${BASE}/runs/${encodeURIComponent(runId)}`);
  await page.getByRole('heading', { name: /^Run / }).waitFor();
  await page.getByRole('heading', { name: 'Waiting on 3 answers' }).waitFor();
  const name = page.getByRole('form', { name: 'What should the launch be called?' });
  await name.getByRole('textbox', { name: 'What should the launch be called?' }).fill('Dusk');
  await name.getByRole('button', { name: 'Send answer' }).click();
  await page.getByRole('heading', { name: 'Waiting on 2 answers' }).waitFor();

  const run = await (await fetch(`${BASE}/api/runs/${encodeURIComponent(runId)}`)).json();
  assert.equal(run.runId, runId);
  assert.ok(run.resolutions.some((r) => r.kind === 'answered'), JSON.stringify(run.resolutions));
  assert.deepEqual(page.problems, []);
  await page.close();
});
