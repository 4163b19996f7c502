// What a person decides on, shown as it is: bidirectional controls and
// invisible characters in an approval's arguments, a question and its
// labels are marked as their code points (`<U+202E>`) on the run view, in
// the Inbox and on the answer link's page; an MCP form's fields named
// `__proto__` and `constructor` keep their values; and the page's rule
// marks what the server's rule marks.
//
// Started by the Rust test `web_visible` (crates/askloop-cli/tests/web_visible.rs),
// which runs `askloop serve` and passes, in the environment:
//   ASKLOOP_WEB_URL          the server (no tokens, answer links on)
//   ASKLOOP_LINK_PUBLIC      its configured public_url, which links start with
//   ASKLOOP_BIN              the askloop binary (for `askloop link`)
//   ASKLOOP_LINK_DIR         the folder of its askloop.toml
//   ASKLOOP_WEB_DB           the SQLite file it uses
//   ASKLOOP_WEB_RULE         the server's rule, written out (ranges and cases)
//   ASKLOOP_WEB_SCREENSHOTS  where screenshots go

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launchWithProfile, openPage, requiredEnv } from './browser.mjs';
import { linkServer, makeLink, startRun as startRunAt } from './runs.mjs';

const SERVER = linkServer('web_visible');
const BASE = SERVER.base;
const env = (name) => requiredEnv(name, 'web_visible');
const RULE = JSON.parse(readFileSync(env('ASKLOOP_WEB_RULE'), 'utf8'));
const SHOTS = env('ASKLOOP_WEB_SCREENSHOTS');
mkdirSync(SHOTS, { recursive: true });

const PATIENCE = 20_000;

/** Characters that must never reach the screen unmarked. */
const HIDDEN = /[\u202A-\u202E\u2066-\u2069\u200B-\u200F\uFEFF]/u;

let browser;
let context;

before(async () => {
  browser = await launchWithProfile({ viewport: { width: 1100, height: 900 } });
  context = browser.context;
  context.setDefaultTimeout(PATIENCE);
});

after(async () => {
  await browser?.close();
});

const startRun = (agent, prompt) => startRunAt(BASE, agent, prompt);
const link = (runId, call, to) => makeLink(SERVER, runId, to, call).local;

/**
 * Asserts that `root` (a locator) shows the spoofing approval's path and
 * content, the question and its labels each with their hidden characters
 * marked, and nothing hidden unmarked.
 */
async function assertMarked(root, { question = true } = {}) {
  const approval = root.locator('form.approval');
  const args = approval.locator('pre.args');
  const argsText = await args.textContent();
  assert.ok(argsText.includes('"docs/report_<U+202E>hs.gpj"'), argsText);
  assert.ok(argsText.includes('"echo <U+2066>done<U+2069><U+200B>"'), argsText);
  assert.deepEqual(await args.locator('.invisible-char').allTextContents(), ['<U+202E>', '<U+2066>', '<U+2069>', '<U+200B>']);
  assert.equal(
    await args.locator('.invisible-char').first().getAttribute('title'),
    'An invisible character, U+202E',
  );
  assert.equal(
    await approval.locator('.hidden-warning').textContent(),
    '4 characters of this call do not show on screen; each is marked above as its code point.',
  );
  if (question) {
    const asked = root.locator('form.question');
    assert.equal(await asked.locator('legend').textContent(), 'Publish it to <U+2067>production<U+2069> now?');
    assert.equal(await asked.locator('.option-label').first().textContent(), 'Yes<U+200B>');
    assert.equal(await asked.locator('.option-desc').nth(1).textContent(), '<U+202E>esrever ni');
    // The value sent is the label itself, as the question holds it.
    assert.equal(await asked.locator('input').first().inputValue(), 'Yes\u200B');
  }
  const all = await root.textContent();
  assert.ok(!HIDDEN.test(all), `a hidden character reached the screen: ${JSON.stringify(all)}`);
}

test('a spoofing approval and question show their hidden characters on the run view, the Inbox and the link page', async () => {
  const runId = await startRun('spoofer', 'Publish the quarterly report');

  const page = await openPage(context, `${BASE}/runs/${runId}`);
  await page.locator('form.approval pre.args').waitFor();
  await assertMarked(page.locator('section.waiting'));
  const conversation = await page.locator('.log').textContent();
  assert.ok(conversation.includes('docs/report_<U+202E>hs.gpj'), conversation);
  assert.ok(!HIDDEN.test(conversation), conversation);
  // The page, not one element: the view may redraw as the run's events come.
  await page.screenshot({ path: join(SHOTS, 'visible-run.png') });
  // The arguments as the person would edit them: each hidden character a
  // `\u` escape, which reads back as the same value.
  await page.getByRole('button', { name: 'Edit arguments' }).click();
  const editing = await page.locator('textarea.args-editor').inputValue();
  assert.ok(editing.includes('"docs/report_\\u202ehs.gpj"'), editing);
  assert.deepEqual(JSON.parse(editing), { path: 'docs/report_\u202Ehs.gpj', content: 'echo \u2066done\u2069\u200B' });

  const dark = await openPage(context, `${BASE}/runs/${runId}`, { dark: true });
  await dark.locator('form.approval pre.args').waitFor();
  await dark.screenshot({ path: join(SHOTS, 'visible-run-dark.png') });

  const inbox = await openPage(context, `${BASE}/inbox`);
  const card = inbox.locator(`li.card[data-run-id="${runId}"]`);
  await card.locator('form.approval pre.args').waitFor();
  await assertMarked(card);
  await card.screenshot({ path: join(SHOTS, 'visible-inbox.png') });

  const linked = await openPage(context, link(runId, 'call_write', 'Rosa \u202EnamreH'), { allow: /410|403/ });
  await linked.getByRole('heading', { name: 'Your approval is needed' }).waitFor();
  await assertMarked(linked.locator('main'), { question: false });
  assert.equal(await linked.locator('.link-meta strong').textContent(), 'Rosa <U+202E>namreH');
  await linked.screenshot({ path: join(SHOTS, 'visible-link.png') });

  for (const p of [page, dark, inbox, linked]) assert.deepEqual(p.problems, []);
});

test("an MCP form's fields named __proto__ and constructor send and keep their values", async () => {
  const runId = await startRun('registrar', 'Register me');
  const page = await openPage(context, `${BASE}/runs/${runId}`);
  const form = page.locator('form.elicitation');
  await form.getByText('Your details, please.').waitFor();
  const field = (name) => form.getByRole('textbox', { name, exact: true });
  await field('Prototype name').fill('kept as __proto__');
  await field('Constructor').fill('kept as constructor');
  await field('Name').fill('Ada');
  await form.screenshot({ path: join(SHOTS, 'visible-form.png') });
  const sent = page.waitForRequest((request) => request.url().endsWith('/resume-stream'));
  await form.getByRole('button', { name: 'Send' }).click();
  const body = JSON.parse((await sent).postData());
  assert.deepEqual(Object.entries(body.resumeData.content), [
    ['__proto__', 'kept as __proto__'],
    ['constructor', 'kept as constructor'],
    ['name', 'Ada'],
  ]);
  await form.getByText('Sent', { exact: true }).waitFor();
  // The MCP server answers with the content it was sent; the model says it.
  await page.getByText('Registered:').first().waitFor();
  const shown = await page.locator('main').textContent();
  assert.ok(shown.includes('"__proto__":"kept as __proto__","constructor":"kept as constructor","name":"Ada"'), shown);
  assert.deepEqual(page.problems, []);
});

test("the page's rule marks exactly what the server's rule marks", async () => {
  const page = await openPage(context, `${BASE}/inbox`);
  const seen = await page.evaluate(async (cases) => {
    const dom = await import('/assets/dom.js');
    const ranges = [];
    for (let point = 0; point <= 0x10ffff; point += 1) {
      if (point >= 0xd800 && point <= 0xdfff) continue;
      if (!dom.isInvisible(String.fromCodePoint(point))) continue;
      const last = ranges[ranges.length - 1];
      if (last && last[1] + 1 === point) last[1] = point;
      else ranges.push([point, point]);
    }
    return { ranges, marked: cases.map((text) => dom.markedText(text)) };
  }, RULE.cases.map(([text]) => text));
  assert.deepEqual(seen.ranges, RULE.ranges);
  const differ = RULE.cases.filter(([, marked], i) => seen.marked[i] !== marked);
  assert.deepEqual(differ.slice(0, 5), [], `${differ.length} of ${RULE.cases.length} texts marked otherwise`);
});
