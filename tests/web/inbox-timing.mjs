// How long the Inbox of a running `askloop serve` takes to show its first
// question with many runs waiting, in headless chromium: the timing half of
// `askloop-bench inbox M` (crates/askloop-bench/src/modes/inbox.rs), which
// fills the store, starts the server and runs this.
//
//   node inbox-timing.mjs BASE_URL WAITING LOADS
//
// Opens BASE_URL/inbox once unmeasured, then LOADS times, each in a fresh
// browser context (no cache). For each load: the time from the start of the
// navigation to the frame that first draws a card, and to the frame whose
// heading first shows "WAITING waiting" (null if it never does within
// PATIENCE). Prints one JSON line:
//   {"first_card_ms": [...], "heading_count_ms": [...], "cards": N}
// where N is the number of cards on the page when the count first showed.

import { launch } from './browser.mjs';

const [base, waiting, loads] = process.argv.slice(2);
if (!base || !waiting || !loads) {
  console.error('usage: node inbox-timing.mjs BASE_URL WAITING LOADS');
  process.exit(2);
}
const PATIENCE = 30_000;

/**
 * Runs in the page before its own scripts: notes (in performance.now(),
 * from the start of the navigation) the frame in which the first card, and
 * the heading's count, are first in the document.
 */
function watch(countText) {
  const times = {};
  window.inboxTimes = times;
  const inFrame = (name) => {
    times[name] = null;
    requestAnimationFrame(() => {
      times[name] = performance.now();
      if (name === 'count') times.cards = document.querySelectorAll('li.card').length;
    });
  };
  new MutationObserver(() => {
    if (!('card' in times) && document.querySelector('li.card')) inFrame('card');
    if (!('count' in times) && document.getElementById('inbox-title')?.textContent.includes(countText)) inFrame('count');
  }).observe(document, { childList: true, subtree: true, characterData: true });
}

const browser = await launch();
const countText = `${Number(waiting).toLocaleString('en-US')} waiting`;

async function load() {
  const context = await browser.newContext({ locale: 'en-US', viewport: { width: 1200, height: 860 } });
  await context.addInitScript(watch, countText);
  const page = await context.newPage();
  await page.goto(`${base}/inbox`);
  await page.waitForFunction(() => window.inboxTimes?.card, null, { timeout: PATIENCE, polling: 50 });
  const counted = await page
    .waitForFunction(() => window.inboxTimes?.count, null, { timeout: PATIENCE, polling: 50 })
    .then(() => true, () => false);
  const times = await page.evaluate(() => window.inboxTimes);
  await context.close();
  return { card: times.card, count: counted ? times.count : null, cards: times.cards ?? 0 };
}

try {
  await load();
  const measured = [];
  for (let i = 0; i < Number(loads); i += 1) measured.push(await load());
  console.log(
    JSON.stringify({
      first_card_ms: measured.map((m) => m.card),
      heading_count_ms: measured.map((m) => m.count),
      cards: measured[measured.length - 1]?.cards ?? 0,
    }),
  );
} finally {
  await browser.close();
}
