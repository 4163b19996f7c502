// Debian's chromium for the browser tests and the Inbox bench, started the
// same way everywhere: headless, no sandbox (the tests run as root), and no
// background traffic (the machine's network is closed, and chromium would
// otherwise try Google's hosts at every start).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const executablePath = () => process.env.CHROMIUM || '/usr/bin/chromium';

/// A browser with a fresh profile of its own; `close()` closes it and
/// deletes the profile. `args` are added to the usual ones.
export async function launchWithProfile({ args = [], ...options } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'askloop-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: executablePath(),
    headless: true,
    args: [...ARGS, ...args],
    ...options,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/// A browser whose contexts are each a fresh, empty profile.
export function launch() {
  return chromium.launch({ executablePath: executablePath(), headless: true, args: ARGS });
}

/// The value of environment variable `name`, set by the Rust test `test`
/// that runs the browser test; a clear error when it is run alone.
export function requiredEnv(name, test) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; run this through the Rust test ${test}`);
  return value;
}

/// A new page of `context` at `url` (`dark`: dark colours; `width`: a
/// narrow viewport), collecting its uncaught errors and console errors in
/// `page.problems`, except those whose text matches `allow` (statuses the
/// page shows on purpose).
export async function openPage(context, url, { dark = false, width, height, allow = /401|422|409/ } = {}) {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !allow.test(msg.text())) problems.push(msg.text());
  });
  if (dark) await page.emulateMedia({ colorScheme: 'dark' });
  if (width) await page.setViewportSize({ width, height: height || 844 });
  await page.goto(url);
  page.problems = problems;
  return page;
}
