// What the browser tests ask of the server besides the page: a run started
// until it waits, and an answer link made with `askloop link`.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { requiredEnv } from './browser.mjs';

/**
 * The server a test of answer links runs against, as its Rust test `test`
 * names it in the environment: `base` (ASKLOOP_WEB_URL), `publicUrl`
 * (ASKLOOP_LINK_PUBLIC, which links start with), `bin` (ASKLOOP_BIN, for
 * `askloop link`), `dir` (ASKLOOP_LINK_DIR, its askloop.toml's folder) and
 * `db` (ASKLOOP_WEB_DB, its SQLite file).
 */
export function linkServer(test) {
  const env = (name) => requiredEnv(name, test);
  return {
    base: env('ASKLOOP_WEB_URL'),
    publicUrl: env('ASKLOOP_LINK_PUBLIC'),
    bin: env('ASKLOOP_BIN'),
    dir: env('ASKLOOP_LINK_DIR'),
    db: env('ASKLOOP_WEB_DB'),
  };
}

/** Starts a run of `agent` at `base` and returns its id once it waits. */
export async function startRun(base, agent, prompt) {
  const response = await fetch(`${base}/api/agents/${agent}/stream`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: prompt }),
  });
  assert.equal(response.status, 200);
  const text = await response.text();
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    const chunk = JSON.parse(line.slice(6));
    if (chunk.type === 'tool-call-suspended' || chunk.type === 'tool-call-approval') return chunk.runId;
  }
  throw new Error(`the run did not stop to ask: ${text}`);
}

/**
 * Runs the askloop binary `bin` with `args` in the folder `dir` of the
 * server's askloop.toml, on its database `db`; returns what it printed.
 */
export function askloop({ bin, dir, db }, args) {
  return execFileSync(bin, args, { cwd: dir, env: { ...process.env, ASKLOOP_DB: db }, encoding: 'utf8' });
}

/**
 * `askloop link RUN --to NAME` (and `--call CALL`): the link as made, and
 * `local`, the same link on the test's server at `base` instead of the
 * configured `publicUrl`.
 */
export function makeLink(server, runId, to, call) {
  const args = ['link', runId, '--to', to, '--json'];
  if (call) args.push('--call', call);
  const made = JSON.parse(askloop(server, args));
  assert.ok(made.url.startsWith(`${server.publicUrl}/links/`), made.url);
  return { ...made, local: server.base + made.url.slice(server.publicUrl.length) };
}
