// The answer link's page in a real browser: a link made with `askloop link`
// opens one question (or one approval) for the person it was made out to,
// answers it once without a token, and then says it was used; a revoked
// link says so. Loading the page answers nothing.
//
// Started by the Rust test `link_page` (crates/askloop-cli/tests/link_page.rs),
// which runs `askloop serve` with [links] configured and passes, in the
// environment:
//   ASKLOOP_WEB_URL          the server (no tokens)
//   ASKLOOP_LINK_PUBLIC      its configured public_url, which links start with
//   ASKLOOP_BIN              the askloop binary (for `askloop link`)
//   ASKLOOP_LINK_DIR         the folder of its askloop.toml
//   ASKLOOP_WEB_DB           the SQLite file it uses
//   ASKLOOP_WEB_SCREENSHOTS  where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchWithProfile, openPage, requiredEnv } from './browser.mjs';
import { askloop as askloopIn, linkServer, makeLink, startRun as startRunAt } from './runs.mjs';

const SERVER = linkServer('link_page');
const BASE = SERVER.base;
const SHOTS = requiredEnv('ASKLOOP_WEB_SCREENSHOTS', 'link_page');
mkdirSync(SHOTS, { recursive: true });

const PATIENCE = 20_000;

// A refused link answers 410 or 403, which the page shows.
const REFUSALS_SHOWN = { allow: /410|403/ };

let browser;
let context;

before(async () => {
  browser = await launchWithProfile({ viewport: { width: 1000, height: 760 } });
  context = browser.context;
  context.setDefaultTimeout(PATIENCE);
});

after(async () => {
  await browser?.close();
});

/** Who makes the links: the CLI's user, as the login name says. */
const MAKER = 'ops-lead';
process.env.USER = MAKER;

const startRun = (agent, prompt) => startRunAt(BASE, agent, prompt);
const askloop = (args) => askloopIn(SERVER, args);

/** `askloop link RUN --to NAME`, made by `MAKER`. */
function link(runId, to) {
  const made = makeLink(SERVER, runId, to);
  assert.equal(made.madeBy, MAKER, 'a link keeps who made it');
  return made;
}

async function run(runId) {
  const response = await fetch(`${BASE}/api/runs/${runId}`);
  return response.json();
}

async function until(runId, status) {
  for (let i = 0; i < 400; i += 1) {
    const shown = await run(runId);
    if (shown.status === status) return shown;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`run ${runId} did not become ${status}`);
}

test('a link opens its question, answers it once as its recipient, then says it was used', async () => {
  const runId = await startRun('assistant', 'Launch the new pricing page');
  const made = link(runId, 'Priya Raman');

  const page = await openPage(context, made.local, REFUSALS_SHOWN);
  await page.getByRole('heading', { name: 'A question for you' }).waitFor();
  await page.getByText('Which region should we launch in?').waitFor();
  await page.getByText('You answer as').waitFor();
  assert.match(await page.locator('.link-meta').innerText(), /You answer as Priya Raman, on a link made by ops-lead\./);
  assert.match(await page.locator('.link-from').innerText(), /Launcher is waiting for your answer/);
  assert.equal((await run(runId)).status, 'suspended', 'opening the link answers nothing');
  await page.screenshot({ path: join(SHOTS, 'link-question.png') });

  const dark = await openPage(context, made.local, { ...REFUSALS_SHOWN, dark: true });
  await dark.getByText('Which region should we launch in?').waitFor();
  await dark.screenshot({ path: join(SHOTS, 'link-question-dark.png') });
  const phone = await openPage(context, made.local, { ...REFUSALS_SHOWN, width: 390 });
  await phone.getByText('Which region should we launch in?').waitFor();
  await phone.screenshot({ path: join(SHOTS, 'link-phone.png'), fullPage: true });
  assert.equal((await run(runId)).status, 'suspended', 'three openings answered nothing');

  // Keyboard only: the options are reachable and labelled.
  await page.getByLabel('Europe').check();
  await page.getByRole('button', { name: 'Send answer' }).click();
  await page.getByText('Thank you, Priya Raman.').waitFor();
  await page.screenshot({ path: join(SHOTS, 'link-answered.png') });

  const done = await until(runId, 'completed');
  const [resolution] = done.resolutions;
  assert.deepEqual([resolution.kind, resolution.via, resolution.by, resolution.madeBy], ['answered', 'link', 'Priya Raman', MAKER]);

  // The second page, opened before the answer, cannot answer again.
  await dark.getByLabel('Americas').check();
  await dark.getByRole('button', { name: 'Send answer' }).click();
  await dark.getByRole('heading', { name: 'This link was already used' }).waitFor();

  const again = await openPage(context, made.local, REFUSALS_SHOWN);
  await again.getByRole('heading', { name: 'This link was already used' }).waitFor();
  await again.getByText('Nothing was changed').waitFor();
  await again.screenshot({ path: join(SHOTS, 'link-used.png') });
  assert.equal((await run(runId)).resolutions.length, 1);
  for (const p of [page, dark, phone, again]) assert.deepEqual(p.problems, []);
});

test('an approval is declined through a link with a reason', async () => {
  const runId = await startRun('deployer', 'Write the release notes');
  const made = link(runId, 'Sam Okafor');
  const page = await openPage(context, made.local, REFUSALS_SHOWN);
  await page.getByRole('heading', { name: 'Your approval is needed' }).waitFor();
  await page.getByText('NOTES.md').first().waitFor();
  assert.equal(await page.getByRole('button', { name: 'Edit arguments' }).count(), 0, 'a link approves the call as it stands');
  await page.screenshot({ path: join(SHOTS, 'link-approval.png') });
  await page.getByLabel('Reason (optional)').fill('Wait for the changelog review');
  await page.getByRole('button', { name: 'Decline' }).click();
  await page.getByText('Thank you, Sam Okafor.').waitFor();
  const done = await until(runId, 'completed');
  const resolution = done.resolutions.at(-1);
  assert.deepEqual([resolution.kind, resolution.via, resolution.by], ['denied', 'link', 'Sam Okafor']);
  assert.deepEqual(page.problems, []);
});

test('a revoked link says so and offers nothing to answer', async () => {
  const runId = await startRun('assistant', 'Launch the docs site');
  const made = link(runId, 'Priya Raman');
  askloop(['link', '--revoke', made.linkId]);
  const page = await openPage(context, made.local, REFUSALS_SHOWN);
  await page.getByRole('heading', { name: 'This link was revoked' }).waitFor();
  assert.equal(await page.locator('form').count(), 0);
  await page.screenshot({ path: join(SHOTS, 'link-revoked.png') });
  assert.equal((await run(runId)).status, 'suspended');
  assert.deepEqual(page.problems, []);
});
