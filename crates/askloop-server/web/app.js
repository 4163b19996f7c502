// The page: a client-side router over Chat (/, and each conversation at
// /threads/{threadId}), Inbox (/inbox) and Run view (/runs/{runId}); the
// token gate; the count of waiting questions and the live updates from
// GET /api/events.

import { Unauthorized, forgetMe, getJson, onUnauthorized, runEvents, setToken, token } from './api.js';
import { h } from './dom.js';
import { chatView, refreshConversation } from './chat.js';
import { inboxView, refreshInbox, waitingTotal } from './inbox.js';
import { refreshRun, runView } from './run.js';

const main = document.getElementById('main');
const live = document.getElementById('live');
const count = document.getElementById('inbox-count');

/** A path segment as written, or as sent when its escapes are malformed. */
function segment(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function route() {
  const path = location.pathname;
  const run = path.match(/^\/runs\/([^/]+)\/?$/);
  if (run) return { name: 'run', runId: segment(run[1]) };
  const thread = path.match(/^\/threads\/([^/]+)\/?$/);
  if (thread) return { name: 'chat', threadId: segment(thread[1]) };
  if (path === '/inbox') return { name: 'inbox' };
  return { name: 'chat' };
}

async function show() {
  const r = route();
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === r.name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.title = { chat: 'Chat · askloop', inbox: 'Inbox · askloop', run: 'Run · askloop' }[r.name];
  try {
    if (r.name === 'run') await runView(main, r.runId);
    else if (r.name === 'inbox') await inboxView(main);
    else await chatView(main, r.threadId ?? null);
  } catch (err) {
    if (err instanceof Unauthorized) return;
    main.replaceChildren(
      h('section', { class: 'problem' }, h('h1', {}, 'Something went wrong'), h('p', { class: 'form-error', role: 'alert' }, err.message), h('button', { type: 'button', onclick: show }, 'Try again')),
    );
  }
}

export function navigate(href) {
  if (href === location.pathname + location.search) return;
  history.pushState({}, '', href);
  show().then(() => main.focus({ preventScroll: true }));
}

document.addEventListener('click', (event) => {
  const link = event.target.closest('a[data-route]');
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const href = link.getAttribute('href');
  if (!href || href === '#') return;
  event.preventDefault();
  navigate(href);
});
window.addEventListener('popstate', show);

// --- waiting questions: count and live updates ---------------------------

async function updateCount() {
  const n = await waitingTotal();
  count.hidden = n === 0;
  count.textContent = n.toLocaleString();
  count.setAttribute('aria-label', `${n.toLocaleString()} waiting`);
}

let refreshing = null;
let again = false;
/** Brings what is shown up to date; changes that come meanwhile fold into one more pass. */
function refresh(runId) {
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = (async () => {
    try {
      await Promise.all([updateCount(), refreshInbox(), refreshRun(runId ?? undefined), refreshConversation()]);
    } catch (err) {
      if (!(err instanceof Unauthorized)) console.warn('refresh failed', err);
    } finally {
      refreshing = null;
      if (again) {
        again = false;
        refresh();
      }
    }
  })();
}

let events = null;
async function listen() {
  if (events) return;
  events = new AbortController();
  let pause = 1000;
  let full = false;
  while (events && !events.signal.aborted) {
    full = false;
    try {
      const frames = await runEvents(events.signal);
      pause = 1000;
      for await (const frame of frames) {
        if (frame.event === 'ready') {
          live.textContent = '';
          document.body.dataset.live = 'on';
          refresh();
        } else if (frame.event === 'run') {
          let runId = null;
          try {
            runId = JSON.parse(frame.data).runId;
          } catch {
            runId = null;
          }
          refresh(runId);
        }
      }
    } catch (err) {
      if (events?.signal.aborted || err instanceof Unauthorized) return;
      if (err.status === 501) {
        live.textContent = 'Live updates are off for this store.';
        return;
      }
      // The server caps how many live streams one token holds: tried again
      // as another page of it closes.
      full = err.status === 429;
    }
    document.body.dataset.live = 'off';
    live.textContent = full ? 'Live updates paused: too many pages of this token are open. Close one to resume.' : 'Reconnecting…';
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 15000);
  }
}

// --- the token ------------------------------------------------------------

function askForToken(wrong) {
  events?.abort();
  events = null;
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'current-password', required: true });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: !wrong }, wrong ? 'That token was not accepted. Check it and try again.' : '');
  const form = h(
    'form',
    { class: 'token-form' },
    h('h1', {}, 'This server needs a token'),
    h('p', { class: 'subtitle' }, 'Enter your API token (ASKLOOP_API_TOKEN, or one of the server\'s named tokens). It is kept for this browser tab only.'),
    h('label', { for: 'token' }, 'API token'),
    input,
    error,
    h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Continue')),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    forgetMe();
    try {
      await getJson('/api/agents');
    } catch (err) {
      if (err instanceof Unauthorized) return; // askForToken ran again, saying so
      throw err;
    }
    start();
  });
  main.replaceChildren(h('section', { class: 'gate' }, form));
  input.focus();
}

onUnauthorized(() => askForToken(Boolean(token())));

function start() {
  show();
  updateCount().catch(() => {});
  listen();
}

start();
