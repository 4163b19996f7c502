// Mastra's own HTTP server (the Hono adapter, routes under /api) serving the
// benchmark's agent, started the way `askloop-bench http --server-bin`
// starts `askloop serve`:
//
//   node serve.mjs --db PATH serve --addr 127.0.0.1:0 --model openai/MODEL --config askloop.toml
//
// It reads the agent's instructions from the askloop.toml the bench writes,
// keeps its runs in LibSQL at PATH.mastra, and prints the line the bench
// waits for: `mastra: serving 1 agent (deployment-assistant) on http://HOST:PORT/api`.

import { readFileSync } from 'node:fs';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { MastraServer } from '@mastra/hono';
import { AGENT_ID, benchMastra } from './mastra.mjs';

const args = parseArgs(process.argv.slice(2));
const instructions = instructionsOf(readFileSync(args.config, 'utf8'));
const model = args.model.replace(/^openai\//, '');
const mastra = benchMastra({ instructions, model, db: `${args.db}.mastra` });

const app = new Hono();
const server = new MastraServer({ app, mastra, prefix: '/api' });
await server.init();

const [host, port] = splitAddr(args.addr);
const listening = serve({ fetch: app.fetch, hostname: host, port }, (info) => {
  console.error(`mastra: serving 1 agent (${AGENT_ID}) on http://${host}:${info.port}/api`);
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => listening.close(() => process.exit(0)));

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 1) {
    const key = argv[i];
    if (key === 'serve') continue;
    const value = argv[i + 1];
    if (!key.startsWith('--') || value === undefined) fail(`unexpected argument ${JSON.stringify(key)}`);
    out[key.slice(2)] = value;
    i += 1;
  }
  for (const key of ['db', 'addr', 'model', 'config']) if (!out[key]) fail(`--${key} is missing`);
  return out;
}

function instructionsOf(toml) {
  const line = toml.split('\n').find((l) => l.startsWith('instructions = '));
  if (!line) fail('no `instructions = "..."` line in the configuration');
  return JSON.parse(line.slice('instructions = '.length));
}

function splitAddr(addr) {
  const at = addr.lastIndexOf(':');
  const port = Number(addr.slice(at + 1));
  if (at < 0 || !Number.isInteger(port)) fail(`--addr ${addr}: expected HOST:PORT`);
  return [addr.slice(0, at), port];
}

function fail(message) {
  console.error(`mastra bench: ${message}`);
  process.exit(2);
}
