// One JavaScript or TypeScript block of the docs, run under Node against
// askloop serve, for crates/askloop-cli/tests/docs_blocks.rs (which says
// what is filled in before it gets here).
//
// Usage: node run-block.mjs BLOCK_FILE [PAGE]
// Environment: DOCS_SERVER (http://127.0.0.1:PORT; the docs' servers have no
// token, as a reader's first `askloop serve` has none), DOCS_PAGE_PORT (for
// a component: the port of the page's own origin, which the server allows
// with --cors-origin).
//
// A script block runs as a module, as a reader's file would: TypeScript is
// stripped by tests/aisdk's esbuild, and its imports are the packages
// pinned in tests/interop and tests/aisdk, linked into a node_modules
// beside it. No package of its own is installed.
//
// A component block (tsx, jsx) exports a React component: it is bundled
// with esbuild, rendered on a page of its own origin in Debian's chromium
// (tests/web's playwright-core) with the props of PROPS, and used by the
// driver tests/docs/PAGE.page.mjs as a person would; the page's errors
// fail it.
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const projects = ['interop', 'aisdk', 'web'].map((name) => join(here, '..', name));
const server = process.env.DOCS_SERVER;

// Names a block may use without defining them, because the prose around it
// (or the file's earlier block) sets them up. A block's own declaration of
// a name wins over these, which are globals; each is made only when the
// block's text mentions it.
const SUPPLIED = {
  // A @mastra/client-js client of the server and its `assistant` agent, as
  // the first @mastra/client-js block of docs/server.md makes them.
  client: async () => new (await mastra()).MastraClient({ baseUrl: server }),
  agent: async (get) => (await get('client')).getAgent('assistant'),
  // Runs of the `writer` agent, each waiting for approval of its
  // write_file call, whose id is `toolCallId`.
  otherRunId: async () => (await waitingForApproval('writer')).runId,
  thirdRunId: async () => (await waitingForApproval('writer')).runId,
  fourthRunId: async () => (await waitingForApproval('writer')).runId,
  toolCallId: async () => (await waitingForApproval('writer')).toolCallId,
};

// The props a component block is rendered with.
const PROPS = { userId: 'ana' };

// The folder the block is in gets a node_modules linking every package of
// the pinned projects (the first project that has a package wins).
function linkPackages(folder) {
  const modules = join(folder, 'node_modules');
  if (existsSync(modules)) return;
  mkdirSync(modules);
  const link = (from, to) => existsSync(to) || symlinkSync(from, to);
  for (const project of projects) {
    const installed = join(project, 'node_modules');
    if (!existsSync(installed)) continue;
    for (const name of readdirSync(installed)) {
      if (name.startsWith('.')) continue;
      if (!name.startsWith('@')) {
        link(join(installed, name), join(modules, name));
        continue;
      }
      mkdirSync(join(modules, name), { recursive: true });
      for (const scoped of readdirSync(join(installed, name))) {
        link(join(installed, name, scoped), join(modules, name, scoped));
      }
    }
  }
}

let folder;

// @mastra/client-js as the block's own import gets it (the same module, so
// `instanceof MastraClientError` holds across the two).
async function mastra() {
  const file = join(folder, 'docs-mastra.mjs');
  writeFileSync(file, "export * from '@mastra/client-js';\n");
  return import(pathToFileURL(file));
}

// A new run of `agent` that waits for approval: its id and call's id.
async function waitingForApproval(agent) {
  const response = await fetch(`${server}/api/agents/${agent}/stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: 'Write the deploy notes.' }),
  });
  const body = await response.text();
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const chunk = JSON.parse(line.slice('data: '.length));
    if (chunk.type === 'tool-call-approval') return { runId: chunk.runId, toolCallId: chunk.payload.toolCallId };
  }
  throw new Error(`the ${agent} agent asked for no approval (HTTP ${response.status}): ${body}`);
}

const mentions = (code, name) => new RegExp(`\\b${name}\\b`).test(code);

// Whether the block declares `name` itself: `const name`, `let { a, name }`,
// `function name`, `import { name }`.
function declares(code, name) {
  const word = `\\b${name}\\b`;
  return [
    new RegExp(`\\b(const|let|var|function|class)\\s+${word}`),
    new RegExp(`\\b(const|let|var)\\s*[{[][^}\\]]*${word}[^}\\]]*[}\\]]\\s*=`),
    new RegExp(`\\bimport\\s*{[^}]*${word}[^}]*}`),
  ].some((pattern) => pattern.test(code));
}

// Renders the component `file` exports in chromium and hands the page to
// the driver `page`.
async function renderInBrowser(file, page) {
  const { build } = createRequire(join(projects[1], 'package.json'))('esbuild');
  const { launch } = await import(pathToFileURL(join(projects[2], 'browser.mjs')));
  const entry = join(folder, `${basename(file)}.entry.jsx`);
  writeFileSync(
    entry,
    `import { createRoot } from 'react-dom/client';
import * as block from './${basename(file)}';
const exported = Object.values(block).filter((value) => typeof value === 'function');
if (exported.length !== 1) throw new Error('a component block exports one component; this one exports ' + exported.length);
const Component = exported[0];
createRoot(document.getElementById('root')).render(<Component {...${JSON.stringify(PROPS)}} />);
`,
  );
  const bundled = await build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    jsx: 'automatic',
    write: false,
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
  const files = {
    '/': ['text/html', '<!doctype html><meta charset="utf-8"><title>docs block</title><div id="root"></div><script type="module" src="/app.js"></script>'],
    '/app.js': ['text/javascript', bundled.outputFiles[0].contents],
  };
  const { createServer } = await import('node:http');
  const pages = createServer((request, response) => {
    const found = files[new URL(request.url, 'http://page').pathname];
    if (!found) return response.writeHead(request.url === '/favicon.ico' ? 204 : 404).end();
    response.writeHead(200, { 'content-type': found[0] }).end(found[1]);
  });
  const port = Number(process.env.DOCS_PAGE_PORT);
  await new Promise((resolve) => pages.listen(port, '127.0.0.1', resolve));
  const browser = await launch();
  try {
    const tab = await (await browser.newContext()).newPage();
    const problems = [];
    tab.on('pageerror', (error) => problems.push(error.message));
    tab.on('console', (message) => message.type() === 'error' && problems.push(message.text()));
    await tab.goto(`http://127.0.0.1:${port}/`);
    const { default: drive } = await import(pathToFileURL(join(here, `${page}.page.mjs`)));
    await drive({ page: tab, server, props: PROPS });
    if (problems.length) throw new Error(`the page reported errors:\n${problems.join('\n')}`);
  } finally {
    await browser.close();
    pages.close();
  }
}

async function main() {
  const [file, page] = process.argv.slice(2);
  folder = dirname(file);
  linkPackages(folder);
  if (['.tsx', '.jsx'].includes(extname(file))) return renderInBrowser(file, page);
  let code = readFileSync(file, 'utf8');
  let module = file;
  if (['.ts', '.tsx', '.mts'].includes(extname(file))) {
    const esbuild = createRequire(join(projects[1], 'package.json'))('esbuild');
    const loader = extname(file) === '.tsx' ? 'tsx' : 'ts';
    code = (await esbuild.transform(code, { loader, format: 'esm', sourcefile: basename(file) })).code;
    module = file.replace(/\.[mc]?tsx?$/, '.mjs');
    writeFileSync(module, code);
  }
  const made = new Map();
  const get = (name) => {
    if (!made.has(name)) made.set(name, SUPPLIED[name](get));
    return made.get(name);
  };
  for (const name of Object.keys(SUPPLIED)) {
    if (mentions(code, name) && !declares(code, name)) globalThis[name] = await get(name);
  }
  await import(pathToFileURL(module));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error?.stack ?? String(error));
    process.exit(1);
  },
);
