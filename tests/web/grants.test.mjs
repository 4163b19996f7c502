// Approvals that stick, on the askloop page in a real browser: "Always
// allow in this chat" on an approval form lets the next call of that tool
// in the conversation run without a form; the conversation lists it under
// "Allowed without asking"; Revoke brings the form back for the next call.
//
// Started by the Rust test `web_page` (crates/askloop-cli/tests/web_page.rs),
// which runs `askloop serve` with a scripted agent that writes a file each
// time it is asked, and passes, in the environment:
//   ASKLOOP_WEB_URL          the server (without tokens)
//   ASKLOOP_WEB_WRITTEN      the directory the agent writes its files in
//   ASKLOOP_WEB_SCREENSHOTS  where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchWithProfile } from './browser.mjs';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; run this through the Rust test web_page`);
  return value;
};
const BASE = env('ASKLOOP_WEB_URL');
const WRITTEN = env('ASKLOOP_WEB_WRITTEN');
const SHOTS = env('ASKLOOP_WEB_SCREENSHOTS');
mkdirSync(SHOTS, { recursive: true });

const PATIENCE = 20_000;

let browser;

before(async () => {
  browser = await launchWithProfile({ viewport: { width: 1200, height: 860 } });
  browser.context.setDefaultTimeout(PATIENCE);
});

after(async () => {
  await browser?.close();
});

async function api(path, { method = 'GET', body } = {}) {
  const response = await fetch(`${BASE}${path}`, { method, headers: { 'content-type': 'application/json' }, body: body && JSON.stringify(body) });
  return { status: response.status, body: await response.json().catch(() => null) };
}

async function say(page, text) {
  await page.getByLabel('Message').fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
}

const approvalForms = (page) => page.locator('form.pending.approval:not(.answered)');

test('always allowing a tool in a chat runs its next call there without a form, until revoked', async () => {
  const page = await browser.context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(err.message));
  await page.goto(BASE);

  // The first call waits for approval; it is allowed for the rest of the chat.
  await say(page, 'Write the first note');
  const form = page.getByRole('form', { name: 'Approve write_file?' });
  await form.waitFor();
  await page.screenshot({ path: join(SHOTS, 'grants-form.png') });
  await form.getByRole('button', { name: 'Always allow in this chat' }).click();
  await page.getByText('Approved; write_file runs without asking in this chat').waitFor();
  await page.getByText('Wrote: ').first().waitFor();
  await page.waitForURL(/\/threads\/[0-9a-f-]{36}$/);
  const threadId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
  assert.ok(existsSync(join(WRITTEN, 'first.md')), 'the first call ran');

  // The server holds the grant, for this thread, made through the page.
  const grants = await api(`/api/grants?threadId=${threadId}&resourceId=page`);
  assert.equal(grants.status, 200, JSON.stringify(grants.body));
  assert.equal(grants.body.grants.length, 1);
  const [grant] = grants.body.grants;
  assert.equal(grant.tool, 'write_file');
  assert.equal(grant.scope, 'thread');
  assert.equal(grant.grantedBy.via, 'page');

  // The chat lists it.
  const allowed = page.getByRole('region', { name: 'Allowed without asking' });
  await allowed.getByText('write_file').waitFor();
  await allowed.getByText('in this chat').waitFor();

  // The next call in the same chat runs without a form.
  await say(page, 'Write the second note');
  await page.getByText('Wrote: ').nth(1).waitFor();
  assert.equal(await approvalForms(page).count(), 0, 'no approval form for a call a grant allows');
  assert.ok(existsSync(join(WRITTEN, 'second.md')), 'the second call ran');
  const runs = await api(`/api/runs?threadId=${threadId}&resourceId=page`);
  const byGrant = runs.body.runs.flatMap((r) => r.resolutions).filter((r) => r.via === 'grant');
  assert.equal(byGrant.length, 1, JSON.stringify(runs.body.runs.map((r) => r.resolutions)));
  assert.equal(byGrant[0].grant.id, grant.id);
  await page.screenshot({ path: join(SHOTS, 'grants-chat.png') });

  // The run view says whose standing approval let the call run.
  const run = runs.body.runs.find((r) => r.resolutions.some((x) => x.via === 'grant'));
  const runPage = await browser.context.newPage();
  await runPage.goto(`${BASE}/runs/${run.runId}`);
  await runPage.getByText('by a standing approval, made through the page').waitFor();
  assert.equal(await runPage.locator(`.resolutions code[title="${grant.id}"]`).count(), 1);
  await runPage.screenshot({ path: join(SHOTS, 'grants-run.png') });
  await runPage.close();

  // The Inbox lists every live grant, revocable there too.
  const inbox = await browser.context.newPage();
  await inbox.goto(`${BASE}/inbox`);
  const everywhere = inbox.getByRole('region', { name: 'Allowed without asking' });
  await everywhere.getByText('write_file').waitFor();
  await everywhere.getByRole('link', { name: 'one conversation' }).waitFor();
  await inbox.screenshot({ path: join(SHOTS, 'grants-inbox.png'), fullPage: true });
  await inbox.close();

  // Revoked, it is gone from the list and from the server's live grants...
  await allowed.getByRole('button', { name: 'Revoke always allowing write_file' }).click();
  await allowed.waitFor({ state: 'hidden' });
  const live = await api(`/api/grants?threadId=${threadId}&resourceId=page`);
  assert.deepEqual(live.body.grants, []);
  const all = await api(`/api/grants?threadId=${threadId}&resourceId=page&all=true`);
  assert.ok(all.body.grants[0].revokedAt, 'the grant is kept, revoked');

  // ...and the next call asks again.
  await say(page, 'Write the third note');
  await approvalForms(page).getByText('third.md').waitFor();
  assert.equal(await approvalForms(page).count(), 1);
  assert.ok(!existsSync(join(WRITTEN, 'third.md')), 'the third call waits');
  assert.deepEqual(problems, []);
  await page.close();
});
