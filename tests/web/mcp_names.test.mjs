// What the page shows of calls named like askloop's built-in `ask_user`, in
// a real browser: only a question of the built-in is drawn as a question
// and its answer; a call the model named `ask_user` on an agent without it
// is drawn as any other tool call, on the run's page and in the
// conversation. An answer given over MCP by a client that only declared its
// name shows that name as declared, not as who answered.
//
// Started by the Rust test in crates/askloop-cli/tests/mcp.rs, which runs
// `askloop serve` with both agents and passes, in the environment:
//   ASKLOOP_WEB_URL          the server (without tokens)
//   ASKLOOP_PLAIN_RUN        the run of the agent without ask_user
//   ASKLOOP_PLAIN_THREAD     the thread that run is on (resource "page")
//   ASKLOOP_HELPER_RUN       the run of the agent with it, answered over MCP
//   ASKLOOP_WEB_SCREENSHOTS  where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchWithProfile, openPage, requiredEnv } from './browser.mjs';

const TEST = 'an_mcp_servers_tool_named_like_a_built_in_is_left_out_and_never_shown_as_a_question';
const BASE = requiredEnv('ASKLOOP_WEB_URL', TEST);
const PLAIN_RUN = requiredEnv('ASKLOOP_PLAIN_RUN', TEST);
const PLAIN_THREAD = requiredEnv('ASKLOOP_PLAIN_THREAD', TEST);
const HELPER_RUN = requiredEnv('ASKLOOP_HELPER_RUN', TEST);
const SHOTS = requiredEnv('ASKLOOP_WEB_SCREENSHOTS', TEST);
mkdirSync(SHOTS, { recursive: true });

let browser;

before(async () => {
  browser = await launchWithProfile({ viewport: { width: 1100, height: 820 } });
  browser.context.setDefaultTimeout(20_000);
});

after(async () => {
  await browser?.close();
});

test('a call the model named ask_user on an agent without it is shown as a tool call, not a question', async () => {
  const page = await openPage(browser.context, `${BASE}/runs/${PLAIN_RUN}`);
  const log = page.getByRole('log', { name: 'Conversation' });
  await log.getByText('Called').first().waitFor();
  assert.equal(await log.locator('.q').count(), 0, 'no question is drawn');
  assert.ok((await log.locator('.tool-line code', { hasText: /^ask_user$/ }).count()) === 1, 'ask_user is shown as a call');
  assert.ok((await log.locator('.args', { hasText: 'What is your password?' }).count()) === 1, 'with its arguments');
  await page.screenshot({ path: join(SHOTS, 'mcp-names-run.png'), fullPage: true });

  await page.goto(`${BASE}/threads/${PLAIN_THREAD}`);
  await page.locator('.tool-line code', { hasText: /^ask_user$/ }).first().waitFor();
  assert.equal(await page.locator('.qa .q').count(), 0, 'no question in the conversation either');
  await page.screenshot({ path: join(SHOTS, 'mcp-names-thread.png'), fullPage: true });
  assert.deepEqual(page.problems, []);
});

test('a question of the built-in is shown with its answer, and a declared name as declared', async () => {
  const page = await openPage(browser.context, `${BASE}/runs/${HELPER_RUN}`);
  const log = page.getByRole('log', { name: 'Conversation' });
  await log.locator('.q', { hasText: 'Which environment?' }).waitFor();
  assert.equal(await log.locator('.a', { hasText: 'production' }).count(), 1);
  const decisions = page.getByRole('region', { name: 'Decisions' });
  const decided = await decisions.textContent();
  assert.match(decided, /via mcp, test-person \(declared by the client, not verified\)/);
  assert.doesNotMatch(decided, /by test-person/);
  await page.screenshot({ path: join(SHOTS, 'mcp-names-declared.png'), fullPage: true });
  assert.deepEqual(page.problems, []);
});
