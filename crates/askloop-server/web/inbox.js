// Inbox: every question and approval waiting in the store, whoever started
// the run (this page, the CLI, a program, another server), newest run first.
//
// The list is read a page at a time: the first page shows at once and the
// next one loads as the reader nears the end of the list (or presses "Show
// more"), so thousands waiting never means thousands of cards at once, and
// none is out of reach. The heading says how many wait in all, as the
// server counts them. When a run changes anywhere (see app.js) the pages
// already loaded are read again and the cards brought up to date in place;
// a card answered here stays, showing the run continuing.
//
// A card of a run on a conversation (a thread) names the conversation,
// links to it, and quotes the message that led to the question. The list
// can be narrowed to one agent and one conversation (`/inbox?agent=&thread=`):
// the server filters, so the count and the pages are the narrowed list's.

import { getJson, whoAmI } from './api.js';
import { ago, claim, h, markedText, shortId, shown } from './dom.js';
import { pendingCallForm } from './questions.js';
import { grantList } from './grants.js';
import { assistantTurn, streamInto } from './turns.js';
import { currentResource, listThreads, shownTitle, threadPath } from './threads.js';

/** Runs per page as the list is read. */
const PAGE = 50;
/** The most runs the server lists in one request. */
const MOST_PER_REQUEST = 500;
/** How far below the screen the end of the list starts the next page. */
const AHEAD = '1500px';

const WAITING = '/api/runs?status=suspended';

/** How many runs wait on a person, as the server counts them. */
export async function waitingTotal() {
  const page = await getJson(`${WAITING}&limit=1&total=true`);
  return page.total;
}

/** Runs whose cards were answered on this page: kept, to show the run continuing. */
const answered = new Set();

/** The Inbox on screen, or null. */
let inbox = null;

export async function inboxView(main) {
  inbox?.observer?.disconnect();
  const mine = claim(main);
  const view = newView();
  inbox = view;
  const params = new URLSearchParams(location.search);
  const [agents, resource] = await Promise.all([getJson('/api/agents'), currentResource()]);
  const threads = await listThreads(resource).catch(() => []);
  view.resource = resource;
  for (const t of threads) view.titles.set(threadKey(resource, t.id), shownTitle(t));
  view.filter = { agent: params.get('agent') || '', thread: params.get('thread') || '' };
  if (view.filter.agent) view.waitingPath += `&agentId=${encodeURIComponent(view.filter.agent)}`;
  if (view.filter.thread) {
    view.waitingPath += `&threadId=${encodeURIComponent(view.filter.thread)}&resourceId=${encodeURIComponent(resource)}`;
  }
  const filters = filterForm(main, view, Object.values(agents), threads);
  // Every approval that sticks this token can see, narrowed as the list
  // is (a token of several resources names the one the page acts as).
  const me = await whoAmI();
  const oneResource = view.filter.thread || me.resources?.length > 1;
  view.grants = grantList({
    title: 'Allowed without asking',
    query: () => ({ agentId: view.filter.agent, threadId: view.filter.thread, resourceId: oneResource ? resource : '' }),
  });
  // The first page is read before the view is drawn: a filter changes the
  // list and its count at once, never through an empty list. A view claimed
  // by a later navigation or filter meanwhile draws nothing.
  await queued(view, loadFirstPage);
  if (!mine()) return;
  main.replaceChildren(
    h(
      'section',
      { class: 'inbox', 'aria-labelledby': 'inbox-title' },
      h(
        'div',
        { class: 'toolbar' },
        h('h1', { id: 'inbox-title' }, 'Inbox', view.total),
        h('p', { class: 'subtitle' }, 'Questions and approvals waiting for a person, from every run.'),
      ),
      filters,
      view.list,
      view.foot,
      view.grants.section,
    ),
  );
  view.grants.draw();
  view.observer = new IntersectionObserver((entries) => {
    if (entries.some((entry) => entry.isIntersecting)) showMore(view, { focus: false });
  }, { rootMargin: `0px 0px ${AHEAD} 0px` });
  view.observer.observe(view.foot);
}

/** Brings the loaded pages up to date: new questions added, questions answered elsewhere removed. */
export async function refreshInbox() {
  if (!inbox || !inbox.list.isConnected) return;
  inbox.grants?.draw();
  await queued(inbox, readAgain);
}

/** The elements of an Inbox, and how far its list is read. */
function newView() {
  const more = h('button', { type: 'button', class: 'show-more', hidden: true }, 'Show more');
  const view = {
    list: h('ol', { class: 'inbox-list', 'aria-label': 'Waiting questions' }),
    total: h('span', { class: 'inbox-total', hidden: true }),
    progress: h('p', { class: 'inbox-progress', role: 'status' }),
    more,
    foot: null,
    observer: null,
    /** Cards by run id, in the list or kept as answered. */
    cards: new Map(),
    /** The runs of the loaded pages that still wait, by id. */
    waiting: new Set(),
    /** Where the next page starts (the server's cursor); null once all are loaded. */
    next: null,
    /** `createdAt` of the last run loaded: the loaded pages end there. */
    end: null,
    count: 0,
    loadingMore: false,
    focusNext: false,
    queue: Promise.resolve(),
    /** `/api/runs?status=suspended`, with the filters chosen. */
    waitingPath: WAITING,
    resource: null,
    filter: { agent: '', thread: '' },
    /** Conversation titles by resource and thread id. */
    titles: new Map(),
  };
  view.foot = h('div', { class: 'inbox-foot' }, view.progress, more);
  more.addEventListener('click', () => showMore(view, { focus: true }));
  return view;
}

/**
 * Runs `task(view)` after the list changes queued before it, so a page
 * being loaded and the list being read again never undo each other.
 */
function queued(view, task) {
  const run = view.queue.then(() => (inbox === view ? task(view) : undefined));
  view.queue = run.catch(() => {});
  return run;
}

function pagePath(view, limit, cursor) {
  return `${view.waitingPath}&limit=${limit}&total=true${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
}

async function loadFirstPage(view) {
  const page = await getJson(pagePath(view, PAGE));
  appendPage(view, page);
}

/** The next page, below the others; returns the first card it added. */
async function loadNextPage(view) {
  if (!view.next) return null;
  const page = await getJson(pagePath(view, PAGE, view.next));
  return appendPage(view, page);
}

function appendPage(view, page) {
  let first = null;
  for (const run of page.runs) {
    const card = cardFor(view, run);
    view.waiting.add(run.runId);
    // A run already shown (read again at the end of the loaded pages) stays where it is.
    if (!card.isConnected) {
      view.list.append(card);
      first ??= card;
    }
  }
  if (page.runs.length) view.end = page.runs[page.runs.length - 1].createdAt;
  view.next = page.nextCursor;
  showTotal(view, page.total);
  return first;
}

/**
 * Reads the loaded pages again, from the newest run to where they end (to
 * the end of the list once all are loaded), and makes the cards match.
 */
async function readAgain(view) {
  const runs = [];
  let total = null;
  let cursor = null;
  const limit = Math.min(MOST_PER_REQUEST, Math.max(PAGE, view.waiting.size + 1));
  for (;;) {
    const page = await getJson(pagePath(view, limit, cursor));
    total ??= page.total;
    // Loaded pages end at `view.end`; runs created in the same millisecond
    // are taken too (the cards are keyed by run, so never shown twice).
    const loaded = view.next ? page.runs.filter((run) => run.createdAt >= view.end) : page.runs;
    runs.push(...loaded);
    cursor = page.nextCursor;
    if (!cursor || loaded.length < page.runs.length) break;
  }
  let previous = null;
  for (const run of runs) {
    const card = cardFor(view, run);
    // Moved only when out of place: moving a card would take the focus
    // from a person typing in it.
    if (previous ? previous.nextElementSibling !== card : view.list.firstElementChild !== card) {
      if (previous) previous.after(card);
      else view.list.prepend(card);
    }
    previous = card;
  }
  view.waiting = new Set(runs.map((run) => run.runId));
  for (const [runId, card] of view.cards) {
    if (!view.waiting.has(runId) && !answered.has(runId)) {
      card.remove();
      view.cards.delete(runId);
    }
  }
  showTotal(view, total);
}

/**
 * Loads the next page. With `focus` (the reader pressed "Show more") the
 * focus moves to the page's first card, also when the page was already on
 * its way because the list's end came near.
 */
function showMore(view, { focus }) {
  if (focus) view.focusNext = true;
  if (view.loadingMore || !view.next || inbox !== view) return;
  view.loadingMore = true;
  // Not disabled: a disabled button would drop the focus of the person on it.
  view.more.setAttribute('aria-busy', 'true');
  view.progress.textContent = 'Loading more…';
  queued(view, loadNextPage)
    .then((first) => {
      if (view.focusNext && first) first.focus();
      view.focusNext = false;
    })
    .catch((err) => {
      showTotal(view, view.count);
      view.progress.textContent = `Could not load more: ${err.message}`;
    })
    .finally(() => {
      view.loadingMore = false;
      view.more.removeAttribute('aria-busy');
      // Still near the end (a tall screen, short cards): observing again
      // says so at once, and the next page follows.
      if (view.observer && inbox === view) {
        view.observer.unobserve(view.foot);
        view.observer.observe(view.foot);
      }
    });
}

/** The count in the heading, what the list shows of it, and the empty state. */
function showTotal(view, total) {
  if (typeof total === 'number') view.count = total;
  const n = view.count;
  view.total.hidden = n === 0;
  view.total.textContent = `${n.toLocaleString()} waiting`;
  const shown = Math.min(view.waiting.size, n);
  view.more.hidden = !view.next;
  if (view.next) view.progress.textContent = `${shown.toLocaleString()} of ${n.toLocaleString()} shown`;
  else view.progress.textContent = n > PAGE ? `All ${n.toLocaleString()} shown` : '';
  view.list.querySelector(':scope > .empty')?.remove();
  if (view.cards.size === 0) {
    const filtered = view.filter.agent || view.filter.thread;
    view.list.append(
      h(
        'li',
        { class: 'empty' },
        h('p', { class: 'empty-title' }, filtered ? 'Nothing waiting here' : 'Nothing is waiting for you'),
        filtered
          ? h('p', {}, h('a', { href: '/inbox', 'data-route': true }, 'Show every waiting question'))
          : h('p', {}, 'When an agent asks a question or needs an approval, it shows up here, wherever the run was started.'),
      ),
    );
  }
}

/** The card of `run`, made or brought up to date: its time, its open questions. */
function cardFor(view, run) {
  let card = view.cards.get(run.runId);
  if (!card) {
    card = inboxCard(run);
    view.cards.set(run.runId, card);
    if (run.resourceId && run.threadId) showContext(view, card, run);
  }
  card.querySelector('.when').textContent = ago(run.updatedAt);
  const group = card.querySelector('.pending-group');
  const open = new Set(run.pendingToolCalls.map((c) => c.toolCallId));
  for (const call of run.pendingToolCalls) {
    if (!group.querySelector(`form[data-tool-call-id="${CSS.escape(call.toolCallId)}"]`)) {
      group.append(questionIn(card, run, call));
    }
  }
  for (const form of [...group.querySelectorAll('form:not(.answered)')]) {
    if (!open.has(form.dataset.toolCallId)) form.remove();
  }
  return card;
}

/** One run's card: who asks, which run, since when; its questions below. */
function inboxCard(run) {
  const turn = assistantTurn(run.agentId);
  turn.querySelector('.turn-head').remove();
  const status = h('span', { class: 'turn-status', role: 'status' });
  turn.prepend(status);
  return h(
    'li',
    // Focusable from code only: "Show more" moves to the first new card.
    { class: 'card', 'data-run-id': run.runId, tabindex: '-1' },
    h(
      'div',
      { class: 'card-head' },
      h('span', { class: 'agent' }, shown(run.agentId)),
      h('span', { class: 'dot', 'aria-hidden': 'true' }, '·'),
      h('a', { href: `/runs/${encodeURIComponent(run.runId)}`, 'data-route': true, class: 'run-ref' }, `Run ${shortId(run.runId)}`),
      h('span', { class: 'dot', 'aria-hidden': 'true' }, '·'),
      h('time', { class: 'when', datetime: run.updatedAt }),
    ),
    h('div', { class: 'pending-group' }),
    turn,
  );
}

function questionIn(card, run, call) {
  const turn = card.querySelector('.turn');
  return pendingCallForm({
    runId: run.runId,
    agentId: run.agentId,
    call,
    thread: run.resourceId ? { resourceId: run.resourceId } : null,
    onContinue: (chunks) => {
      answered.add(run.runId);
      card.classList.add('continuing');
      streamInto(turn, chunks, run.agentId, run.resourceId ? { resourceId: run.resourceId } : null);
    },
  });
}

const threadKey = (resource, threadId) => `${resource}\u0000${threadId}`;

/** The message that started each run, by run id: it never changes. */
const prompts = new Map();

/** The last message a person sent before the run asked: what led to its question. */
async function promptOf(runId) {
  if (!prompts.has(runId)) {
    prompts.set(
      runId,
      getJson(`/api/runs/${encodeURIComponent(runId)}`).then((run) => {
        const user = run.messages.filter((m) => m.role === 'user').pop();
        return typeof user?.content === 'string' ? user.content : '';
      }),
    );
  }
  return prompts.get(runId);
}

/** The conversation a card's run is on: its title, a link to it, and what led to the question. */
async function showContext(view, card, run) {
  const key = threadKey(run.resourceId, run.threadId);
  const context = h('div', { class: 'card-context' });
  card.querySelector('.card-head').after(context);
  try {
    if (!view.titles.has(key)) {
      const thread = await getJson(threadPath(run.threadId, run.resourceId));
      view.titles.set(key, shownTitle(thread));
    }
  } catch {
    // Another resource's conversation, which this token may not read.
    view.titles.set(key, null);
  }
  const title = view.titles.get(key);
  if (title) {
    context.append(
      h('a', { class: 'card-thread', href: `/threads/${encodeURIComponent(run.threadId)}`, 'data-route': true }, shown(title)),
    );
  } else {
    context.append(h('span', { class: 'card-thread' }, 'A conversation of ', shown(run.resourceId)));
  }
  try {
    const prompt = await promptOf(run.runId);
    // A first message is the conversation's title already: not said twice.
    if (prompt && prompt.trim() !== title) context.append(h('blockquote', { class: 'card-prompt' }, shown(prompt)));
  } catch {
    prompts.delete(run.runId);
  }
}

/** Agent and conversation filters; a change shows the narrowed list. */
function filterForm(main, view, agents, threads) {
  const agent = h(
    'select',
    { id: 'filter-agent', name: 'agent' },
    h('option', { value: '' }, 'All agents'),
    agents.map((a) => h('option', { value: a.id, selected: a.id === view.filter.agent }, markedText(a.name || a.id))),
  );
  const thread = h(
    'select',
    { id: 'filter-thread', name: 'thread' },
    h('option', { value: '' }, 'All conversations'),
    threads.map((t) => h('option', { value: t.id, selected: t.id === view.filter.thread }, markedText(shownTitle(t)))),
  );
  // A conversation named in the address but not in the list (older than it holds).
  if (view.filter.thread && !threads.some((t) => t.id === view.filter.thread)) {
    thread.append(h('option', { value: view.filter.thread, selected: true }, markedText(view.filter.thread)));
  }
  const form = h(
    'form',
    { class: 'filters', 'aria-label': 'Filter the waiting questions' },
    h('div', { class: 'field-inline' }, h('label', { for: 'filter-agent' }, 'Agent'), agent),
    h('div', { class: 'field-inline' }, h('label', { for: 'filter-thread' }, 'Conversation'), thread),
  );
  const apply = (event) => {
    const changed = event.target.id;
    const query = new URLSearchParams();
    if (agent.value) query.set('agent', agent.value);
    if (thread.value) query.set('thread', thread.value);
    const search = query.toString();
    history.pushState({}, '', `/inbox${search ? `?${search}` : ''}`);
    // The new list keeps the focus on the filter just changed.
    inboxView(main).then(() => document.getElementById(changed)?.focus());
  };
  agent.addEventListener('change', apply);
  thread.addEventListener('change', apply);
  form.addEventListener('submit', (event) => event.preventDefault());
  return form;
}
