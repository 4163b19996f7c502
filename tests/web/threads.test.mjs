// Conversations on the askloop page, in a real browser: each chat is a
// thread of the server's, listed beside the chat, at its own address,
// back whole after a reload with its open question answerable in place;
// renamed and deleted from the list; walled by resource when the server
// has named tokens; named, quoted and linked by the Inbox's cards, which
// filter by agent and conversation.
//
// Started by the Rust test `web_page` (crates/askloop-cli/tests/web_page.rs),
// which runs `askloop serve` twice with scripted agents and passes, in the
// environment:
//   ASKLOOP_WEB_URL          a server without tokens
//   ASKLOOP_WEB_WALLED_URL   a server with the named tokens ana and bo
//   ASKLOOP_WEB_ANA_TOKEN    ana's secret
//   ASKLOOP_WEB_BO_TOKEN     bo's secret
//   ASKLOOP_WEB_MANY_URL     a server without tokens whose conversations
//                            this test makes more than a page of the list
//   ASKLOOP_WEB_SCREENSHOTS  where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchWithProfile, openPage, requiredEnv } from './browser.mjs';

const env = (name) => requiredEnv(name, 'web_page');
const BASE = env('ASKLOOP_WEB_URL');
const WALLED = env('ASKLOOP_WEB_WALLED_URL');
const ANA = env('ASKLOOP_WEB_ANA_TOKEN');
const BO = env('ASKLOOP_WEB_BO_TOKEN');
const MANY = env('ASKLOOP_WEB_MANY_URL');
const SHOTS = env('ASKLOOP_WEB_SCREENSHOTS');
mkdirSync(SHOTS, { recursive: true });

// Waits are for things to appear, bounded only so a broken page fails
// instead of hanging.
const PATIENCE = 20_000;

const DEPLOY = 'Deploy the billing service to the new cluster';
const ENVIRONMENT = 'Which environment should I deploy to?';
const MIGRATIONS = 'Should I run the database migrations too?';

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

/** Sends a chat message (to `agent`, when the chat lets one be chosen). */
async function say(page, text, agent) {
  if (agent) await page.getByLabel('Agent').selectOption({ label: agent });
  await page.getByLabel('Message').fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
}

const conversations = (page) => page.getByRole('navigation', { name: 'Conversations' });
const threadIdOf = (url) => decodeURIComponent(new URL(url).pathname.match(/^\/threads\/([^/]+)$/)[1]);

async function api(base, path, { token, method = 'GET', body } = {}) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(`${base}${path}`, { method, headers, body: body && JSON.stringify(body) });
  return { status: response.status, body: await response.json().catch(() => null) };
}

/** The ask_user calls of a thread as the server shows them, by question. */
async function calls(base, threadId, resource, token) {
  const got = await api(base, `/api/memory/threads/${encodeURIComponent(threadId)}/messages?resourceId=${resource}`, { token });
  assert.equal(got.status, 200, JSON.stringify(got.body));
  const found = {};
  for (const m of got.body.messages) {
    for (const p of m.content.parts || []) {
      if (p.type === 'tool-invocation') found[p.toolInvocation.args.question] = p.toolInvocation;
    }
  }
  return { messages: got.body.messages, calls: found };
}

let deployThread;

test('a conversation comes back whole after a reload, its open question is answered there and the run completes', async () => {
  const page = await openPage(context, BASE);
  // Without tokens the page keeps its conversations under the shared resource.
  await conversations(page).getByText('Acting as page').waitFor();
  const sent = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/stream')) sent.push(r.postDataJSON());
  });
  await say(page, DEPLOY, 'Assistant');
  await page.getByRole('form', { name: ENVIRONMENT }).waitFor();
  await page.waitForURL(/\/threads\/[0-9a-f-]{36}$/);
  deployThread = threadIdOf(page.url());
  await conversations(page).getByRole('link', { name: new RegExp(DEPLOY) }).waitFor();
  await page.getByRole('heading', { name: DEPLOY, level: 1 }).waitFor();
  assert.deepEqual(sent[0].messages, [{ role: 'user', content: DEPLOY }]);
  assert.deepEqual(sent[0].memory, { thread: { id: deployThread, title: DEPLOY }, resource: 'page' });

  // A reload reads the conversation from the server: the message and the open question.
  await page.reload();
  await page.getByRole('heading', { name: DEPLOY, level: 1 }).waitFor();
  await page.locator('article.turn.user').getByText(DEPLOY).waitFor();
  await page.getByText('Before I start:').waitFor();
  const form = page.getByRole('form', { name: ENVIRONMENT });
  await form.getByRole('radio', { name: 'staging' }).check();
  await form.getByRole('button', { name: 'Send answer' }).click();
  await page.getByText('Deployed to User answered: staging.').waitFor();

  // The server agrees: the call has its result, answered through the page, and its run completed.
  const { calls: answered } = await calls(BASE, deployThread, 'page');
  const call = answered[ENVIRONMENT];
  assert.equal(call.state, 'result');
  assert.equal(call.resolution.kind, 'answered');
  assert.equal(call.resolution.via, 'page');
  const runs = await api(BASE, `/api/runs?threadId=${deployThread}&resourceId=page`);
  assert.equal(runs.status, 200);
  assert.deepEqual(runs.body.runs.map((r) => r.status), ['completed']);

  // Again: the question shows with its answer, no longer as a form.
  await page.reload();
  await page.locator('.qa').getByText(ENVIRONMENT).waitFor();
  await page.locator('.qa .a', { hasText: 'staging' }).waitFor();
  assert.equal(await page.locator('form.pending').count(), 0);

  // The next message sends only itself; the thread gives the agent the rest.
  await say(page, 'Also run the migrations');
  await page.getByRole('form', { name: MIGRATIONS }).waitFor();
  assert.deepEqual(sent.at(-1).messages, [{ role: 'user', content: 'Also run the migrations' }]);
  assert.deepEqual(sent.at(-1).memory, { thread: deployThread, resource: 'page' });
  assert.deepEqual(page.problems, []);
  await page.close();
});

test('a second conversation is listed first; one is renamed and another deleted from the list', async () => {
  const page = await openPage(context, BASE);
  await conversations(page).getByRole('link', { name: new RegExp(DEPLOY) }).waitFor();
  await say(page, 'Write the quarterly report for the board', 'Assistant');
  await page.waitForURL(/\/threads\//);
  const report = threadIdOf(page.url());
  const links = conversations(page).locator('a.thread-link .thread-title');
  await page.waitForFunction(() => document.querySelectorAll('a.thread-link').length === 2);
  assert.deepEqual(await links.allTextContents(), ['Write the quarterly report for the board', DEPLOY]);
  assert.equal(await conversations(page).locator('a[aria-current="page"] .thread-title').textContent(), 'Write the quarterly report for the board');

  // Rename: by the keyboard, Enter saves.
  await conversations(page).getByRole('button', { name: 'Rename “Write the quarterly report for the board”' }).click();
  const title = conversations(page).getByLabel('New title');
  await title.fill('   ');
  await title.press('Enter');
  await conversations(page).getByRole('alert').getByText('A title cannot be empty.').waitFor();
  await title.fill('Q3 board report');
  await title.press('Enter');
  await conversations(page).getByRole('link', { name: /Q3 board report/ }).waitFor();
  await page.getByRole('heading', { name: 'Q3 board report', level: 1 }).waitFor();
  const renamed = await api(BASE, `/api/memory/threads/${report}?resourceId=page`);
  assert.equal(renamed.body.title, 'Q3 board report');

  // The other conversation opens from the list at its own address.
  await conversations(page).getByRole('link', { name: new RegExp(DEPLOY) }).click();
  await page.waitForURL(`${BASE}/threads/${deployThread}`);
  await page.getByRole('form', { name: MIGRATIONS }).waitFor();

  // Delete (its question still waits: the delete cancels it).
  await conversations(page).getByRole('button', { name: 'Delete “Q3 board report”' }).click();
  const confirm = conversations(page).getByRole('group', { name: 'Delete “Q3 board report”?' });
  await confirm.getByRole('button', { name: 'Delete' }).click();
  // The list is drawn again once the server has deleted it.
  await confirm.waitFor({ state: 'detached' });
  assert.equal(await conversations(page).getByRole('link', { name: /Q3 board report/ }).count(), 0);
  assert.equal((await api(BASE, `/api/memory/threads/${report}?resourceId=page`)).status, 404);
  // Its address now says so.
  await page.goto(`${BASE}/threads/${report}`);
  await page.getByRole('heading', { name: 'Conversation not found' }).waitFor();
  await page.close();
});

test('inbox: a card names its conversation, quotes the message that led to it, links to it, and filters narrow the list', async () => {
  const page = await openPage(context, BASE);
  await say(page, 'Migrate the orders database tonight', 'Assistant');
  await page.getByRole('form', { name: ENVIRONMENT }).waitFor();
  await page.waitForURL(/\/threads\//);
  const migrate = threadIdOf(page.url());
  // A run on no thread, as a program starts one: its card shows as before.
  const plain = await fetch(`${BASE}/api/agents/helper/stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: 'Why did the night job fail?', runId: 'no-thread-run' }),
  });
  assert.equal(plain.status, 200);
  await plain.text();

  await page.getByRole('link', { name: /^Inbox/ }).click();
  await page.getByRole('heading', { name: /^Inbox/ }).waitFor();
  const card = page.locator('li.card', { has: page.getByRole('link', { name: 'Migrate the orders database tonight' }) });
  await card.getByRole('form', { name: ENVIRONMENT }).waitFor();
  // The message that led to the question is quoted; a first message is the title already.
  const deploy = page.locator('li.card', { has: page.getByRole('link', { name: DEPLOY }) });
  await deploy.locator('blockquote', { hasText: 'Also run the migrations' }).waitFor();
  await deploy.getByRole('form', { name: MIGRATIONS }).waitFor();
  assert.equal(await card.locator('blockquote').count(), 0);
  const other = page.locator('li.card[data-run-id="no-thread-run"]');
  await other.getByRole('form', { name: 'Which log should I read first?' }).waitFor();
  assert.equal(await other.locator('.card-context').count(), 0, 'a run on no thread names none');
  // The count in the navigation follows, by the live updates.
  await page.getByRole('navigation', { name: 'Main' }).locator('#inbox-count', { hasText: /^3$/ }).waitFor();
  await page.screenshot({ path: join(SHOTS, 'inbox-threads.png') });

  // Filter by agent: only the helper's card.
  await page.getByLabel('Agent').selectOption({ label: 'Helper' });
  await page.waitForURL(`${BASE}/inbox?agent=helper`);
  await other.waitFor();
  await page.waitForFunction(() => {
    const agents = [...document.querySelectorAll('li.card .agent')];
    return agents.length > 0 && agents.every((a) => a.textContent === 'helper');
  });
  assert.equal(await card.count(), 0);
  // By conversation: only the migration's card.
  await page.getByLabel('Agent').selectOption({ label: 'All agents' });
  await page.getByLabel('Conversation').selectOption({ label: 'Migrate the orders database tonight' });
  await page.waitForURL(`${BASE}/inbox?thread=${migrate}`);
  // The list (drawn with its count) holds the migration's card alone.
  await page.waitForFunction(() => {
    const cards = document.querySelectorAll('li.card');
    return cards.length === 1 && cards[0].textContent.includes('Migrate the orders database tonight');
  });
  await page.getByRole('heading', { name: /^Inbox/ }).getByText('1 waiting', { exact: true }).waitFor();

  // The card's link opens the conversation, with its question there.
  await card.getByRole('link', { name: 'Migrate the orders database tonight' }).click();
  await page.waitForURL(`${BASE}/threads/${migrate}`);
  await page.getByRole('heading', { name: 'Migrate the orders database tonight', level: 1 }).waitFor();
  await page.getByRole('form', { name: ENVIRONMENT }).waitFor();
  assert.deepEqual(page.problems, []);
  await page.close();
});

/** Lets a page in with a token, at the gate. */
async function signIn(page, token) {
  await page.getByRole('heading', { name: 'This server needs a token' }).waitFor();
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Continue' }).click();
}

test("walls: with named tokens each keeps its own conversations, and another's are not found", async () => {
  const ana = await openPage(context, WALLED);
  await signIn(ana, ANA);
  // ana may use two resources (her own and team): the page starts with her own.
  const actingAs = conversations(ana).getByLabel('Acting as');
  await actingAs.waitFor();
  assert.equal(await actingAs.inputValue(), 'ana');
  await say(ana, 'Plan the offsite', 'Assistant');
  await ana.getByRole('form', { name: ENVIRONMENT }).waitFor();
  await ana.waitForURL(/\/threads\//);
  const offsite = threadIdOf(ana.url());
  await conversations(ana).getByRole('link', { name: /Plan the offsite/ }).waitFor();
  assert.equal((await api(WALLED, `/api/memory/threads/${offsite}?resourceId=ana`, { token: ANA })).status, 200);

  const bo = await openPage(context, WALLED, { allow: /401|404/ });
  await signIn(bo, BO);
  await conversations(bo).getByText('Acting as bo').waitFor();
  await conversations(bo).getByText('No conversations yet').waitFor();
  assert.equal(await conversations(bo).getByRole('link', { name: /Plan the offsite/ }).count(), 0);
  await bo.goto(`${WALLED}/threads/${offsite}`);
  await bo.getByRole('heading', { name: 'Conversation not found' }).waitFor();
  // The server holds the wall, whatever the page does.
  const me = await api(WALLED, '/api/me', { token: BO });
  assert.deepEqual(me.body, { name: 'bo', resource: 'bo', resources: ['bo'], agents: null });
  assert.equal((await api(WALLED, `/api/memory/threads/${offsite}/messages`, { token: BO })).status, 404);
  assert.equal((await api(WALLED, '/api/memory/threads?resourceId=ana', { token: BO })).status, 403);

  // Choosing team shows team's conversations (none yet) in a new chat, and keeps the next one there.
  await actingAs.selectOption('team');
  await ana.waitForURL(`${WALLED}/`);
  await conversations(ana).getByText('No conversations yet').waitFor();
  await say(ana, 'Book the team dinner', 'Assistant');
  await ana.getByRole('form', { name: ENVIRONMENT }).waitFor();
  await ana.waitForURL(/\/threads\//);
  const dinner = threadIdOf(ana.url());
  assert.equal((await api(WALLED, `/api/memory/threads/${dinner}?resourceId=team`, { token: ANA })).status, 200);
  await conversations(ana).getByRole('link', { name: /Book the team dinner/ }).waitFor();
  assert.equal(await conversations(ana).getByRole('link', { name: /Plan the offsite/ }).count(), 0);
  await conversations(ana).getByLabel('Acting as').selectOption('ana');
  await conversations(ana).getByRole('link', { name: /Plan the offsite/ }).waitFor();
  assert.deepEqual(ana.problems, []);
  await ana.close();
  await bo.close();
});

test('screenshots: the conversations in light, dark and at phone width', async () => {
  // One more conversation, of the other agent, so the list shows a few.
  const setup = await openPage(context, BASE);
  await say(setup, 'Why did the night job fail?', 'Helper');
  await setup.getByRole('form', { name: 'Which log should I read first?' }).waitFor();
  await setup.close();

  const url = `${BASE}/threads/${deployThread}`;
  for (const [name, options] of [
    ['threads.png', {}],
    ['threads-dark.png', { dark: true }],
    ['threads-phone.png', { width: 390, height: 844 }],
  ]) {
    const page = await openPage(context, url, options);
    await page.getByRole('form', { name: MIGRATIONS }).waitFor();
    await page.waitForFunction(() => document.querySelectorAll('a.thread-link').length >= 3);
    await page.locator('body[data-live="on"]').waitFor();
    await page.evaluate(() => document.activeElement?.blur());
    if (options.width) {
      // On a phone the list folds under its heading while a conversation is open.
      const list = conversations(page).getByRole('list', { name: 'Conversations' });
      assert.equal(await list.isVisible(), false);
      await conversations(page).getByRole('button', { name: 'Show' }).click();
      await list.waitFor();
      await page.mouse.move(200, 600);
      await page.evaluate(() => window.scrollTo(0, 0));
    }
    await page.screenshot({ path: join(SHOTS, name) });
    if (options.width) {
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone screen`);
    }
    assert.deepEqual(page.problems, []);
    await page.close();
  }
});

/** Conversations on the MANY server: untitled ones started by a message, and some titled. */
const UNTITLED = 230;
const TITLED = 20;
const untitledText = (n) => `Conversation ${n}: compare the invoices of supplier ${n} with the purchase orders and flag gaps`;

test('250 conversations: the list pages like the Inbox, with the true count, and names untitled ones without a request each', async () => {
  for (let n = 0; n < TITLED; n += 1) {
    const made = await api(MANY, '/api/memory/threads', {
      method: 'POST',
      body: { resourceId: 'page', threadId: `titled-${n}`, title: `Quarterly plan ${n}`, agentId: 'notes' },
    });
    assert.equal(made.status, 200, JSON.stringify(made.body));
  }
  // One after another, so the newest-first order is known.
  for (let n = 0; n < UNTITLED; n += 1) {
    const response = await fetch(`${MANY}/api/agents/notes/stream`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: untitledText(n), memory: { thread: `untitled-${n}`, resource: 'page' } }),
    });
    assert.equal(response.status, 200);
    await response.text();
  }
  const all = TITLED + UNTITLED;

  // Every request the page makes for conversations, counted from its first.
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(err.message));
  const listings = [];
  const perThread = [];
  page.on('request', (request) => {
    const path = new URL(request.url()).pathname;
    if (path === '/api/memory/threads') listings.push(request.url());
    else if (path.startsWith('/api/memory/threads/')) perThread.push(request.url());
  });
  await page.goto(MANY);
  const list = conversations(page).getByRole('list', { name: 'Conversations' });
  const rows = list.locator('a.thread-link');
  await page.waitForFunction(() => document.querySelectorAll('a.thread-link').length === 100);
  await page.locator('body[data-live="on"]').waitFor();
  assert.equal(await conversations(page).locator('.threads-total').innerText(), `${all} conversations`, 'the true count');
  await list.getByText(`100 of ${all} shown`).waitFor();
  // Newest first: the last untitled conversation started, named by its message.
  assert.equal(await rows.first().locator('.thread-title').innerText(), 'Conversation 229: compare the invoices of supplier 229…');
  assert.equal(await list.getByText('New conversation').count(), 0, 'every untitled conversation is named');
  assert.deepEqual(perThread, [], 'no conversation is read on its own to name it');
  assert.ok(listings.length <= 2, `one listing to draw the list, one more when the live feed starts: ${listings.join(' ')}`);

  // "Show more": the next page below, the focus on its first row, one request.
  const before = listings.length;
  await list.getByRole('button', { name: 'Show more' }).click();
  await list.getByText(`200 of ${all} shown`).waitFor();
  assert.equal(await rows.count(), 200);
  assert.equal(await page.evaluate(() => document.activeElement?.closest('li')?.dataset.threadId), 'untitled-129');
  assert.equal(listings.length, before + 1, 'a page more is one request');
  await page.screenshot({ path: join(SHOTS, 'threads-many.png') });

  // Scrolled to the end, the last page comes by itself.
  await list.locator('.thread-foot').scrollIntoViewIfNeeded();
  await list.getByText(`All ${all} shown`).waitFor();
  const ids = await list.locator('li.thread-item').evaluateAll((items) => items.map((li) => li.dataset.threadId));
  assert.equal(ids.length, all);
  assert.equal(new Set(ids).size, all, 'no conversation is listed twice');
  assert.equal(ids[ids.length - 1], 'titled-0', 'the oldest comes last');
  assert.equal(await list.getByRole('button', { name: 'Show more' }).isVisible(), false);
  await list.getByText('Quarterly plan 0').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, 'threads-many-end.png') });

  // A conversation started elsewhere: the list is read again whole, in one request.
  const seen = listings.length;
  const started = await fetch(`${MANY}/api/agents/notes/stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: 'One more, from another tab', memory: { thread: 'one-more', resource: 'page' } }),
  });
  await started.text();
  await conversations(page).locator('.threads-total').getByText(`${all + 1} conversations`).waitFor();
  assert.equal(await rows.count(), all + 1);
  assert.equal(await rows.first().locator('.thread-title').innerText(), 'One more, from another tab');
  // The list shows three pages' worth: each reading of it asks for them all at once.
  for (const url of listings.slice(seen)) assert.match(url, /[?&]page=0&perPage=300$/, 'each reading of the list is one request');
  assert.deepEqual(perThread, []);
  assert.deepEqual(problems, []);
  await page.close();
});
