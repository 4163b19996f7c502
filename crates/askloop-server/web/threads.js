// The conversations beside the chat: the threads of the resource the page
// acts as (GET /api/me), newest first, each at its own address
// (/threads/{id}), renamed and deleted from the list. A conversation's
// title is its first message, shortened, unless someone renamed it; a
// thread started elsewhere without a title is named by the start of its
// first message, which the listing carries (`firstMessage`).
//
// The list is read a page at a time, as the Inbox is: the first page shows
// at once, the next loads as the reader nears the end of the list (or
// presses "Show more"), and the heading says how many there are in all, as
// the server counts them. Drawing the list again (after a change anywhere)
// reads the pages already shown in one request (up to 1,000 rows a
// request), never one per conversation.

import { getJson, sendJson, whoAmI } from './api.js';
import { ago, h } from './dom.js';

const RESOURCE_KEY = 'askloop.resource';
/** Conversations per page of the list. */
const PAGE = 100;
/** The most conversations the server lists in one request. */
const MOST_PER_REQUEST = 1000;
/** How far below the end of the list's view the next page starts loading. */
const AHEAD = '300px';

/** The longest title made from a message, in characters. */
const TITLE_CHARS = 60;

/** A title from a message: its first line, at most TITLE_CHARS, cut at a word. */
export function titleFrom(text) {
  const line = String(text).trim().split('\n')[0].replace(/\s+/g, ' ');
  if (line.length <= TITLE_CHARS) return line;
  const cut = line.slice(0, TITLE_CHARS - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > TITLE_CHARS / 2 ? cut.slice(0, space) : cut).replace(/[\s.,;:]+$/, '')}…`;
}

/** A new thread id (crypto.randomUUID needs a secure context; this does not). */
export function newThreadId() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The resource the page keeps its conversations under: the one chosen in
 * this tab among those the token may use, else the server's word for it.
 */
export async function currentResource() {
  const me = await whoAmI();
  const chosen = sessionStorage.getItem(RESOURCE_KEY);
  if (chosen && me.resources?.includes(chosen)) return chosen;
  return me.resource;
}

export const threadPath = (threadId, resource) =>
  `/api/memory/threads/${encodeURIComponent(threadId)}?resourceId=${encodeURIComponent(resource)}`;

/** A page of a thread's messages, oldest first. */
export const messagesPath = (threadId, resource, { page = 0, perPage }) =>
  `/api/memory/threads/${encodeURIComponent(threadId)}/messages?resourceId=${encodeURIComponent(resource)}&page=${page}&perPage=${perPage}`;

/** A page of the resource's conversations, newest first: `{threads, total, hasMore}`. */
export function threadsPage(resource, { page = 0, perPage = PAGE } = {}) {
  return getJson(`/api/memory/threads?resourceId=${encodeURIComponent(resource)}&page=${page}&perPage=${perPage}`);
}

/** The resource's newest conversations (a page of them). */
export async function listThreads(resource) {
  return (await threadsPage(resource)).threads;
}

/**
 * The first `count` conversations and how many there are in all: one
 * request for up to MOST_PER_REQUEST, one more for each such number after.
 */
async function firstThreads(resource, count) {
  const perPage = Math.min(count, MOST_PER_REQUEST);
  const threads = [];
  let total = 0;
  for (let page = 0; threads.length < count; page += 1) {
    const got = await threadsPage(resource, { page, perPage });
    total = got.total;
    threads.push(...got.threads);
    if (!got.hasMore) break;
  }
  return { threads: threads.slice(0, count), total };
}

/** The title to show: the stored one, else one made from the first message, else a placeholder. */
export function shownTitle(thread) {
  return thread.title || (thread.firstMessage ? titleFrom(thread.firstMessage) : '') || 'New conversation';
}

/** The text of a stored message (Mastra's shape). */
export function messageText(message) {
  if (!message) return '';
  const content = message.content;
  if (typeof content === 'string') return content;
  if (typeof content?.content === 'string' && content.content) return content.content;
  return (content?.parts || [])
    .filter((p) => p.type === 'text')
    .map((p) => p.text)
    .join('\n');
}

/**
 * The list beside the chat. `current` is the open conversation's id (or
 * null); `onRenamed` and `onDeleted` are told when the open conversation is renamed or
 * deleted.
 */
export function conversationList({ current, onDeleted, onRenamed }) {
  const list = h('ol', { class: 'thread-list', id: 'thread-list', 'aria-label': 'Conversations' });
  const status = h('p', { class: 'thread-status', role: 'status' });
  const acting = h('p', { class: 'acting' });
  const counted = h('span', { class: 'threads-total', hidden: true });
  // Below the rows, inside the list so it scrolls with them: how many are
  // shown of how many, and the next page.
  const progress = h('p', { class: 'thread-progress', role: 'status' });
  const more = h('button', { type: 'button', class: 'show-more', hidden: true }, 'Show more');
  const foot = h('li', { class: 'thread-foot' }, progress, more);
  // On a phone the list folds away under the heading while a conversation is open.
  const toggle = h('button', { type: 'button', class: 'quiet threads-toggle', 'aria-expanded': 'false', 'aria-controls': 'thread-list' }, 'Show');
  const panel = h(
    'nav',
    { class: 'threads', 'aria-labelledby': 'threads-title' },
    h(
      'div',
      { class: 'threads-head' },
      h('h2', { id: 'threads-title' }, 'Conversations'),
      toggle,
      h('a', { href: '/', 'data-route': true, class: 'button new-chat' }, 'New chat'),
    ),
    // Whom the page acts as, and how many conversations there are in all.
    h('div', { class: 'threads-meta' }, acting, counted),
    list,
    status,
  );

  const fold = (open) => {
    panel.classList.toggle('open', open);
    toggle.setAttribute('aria-expanded', String(open));
    toggle.textContent = open ? 'Hide' : 'Show';
  };
  fold(!current);
  toggle.addEventListener('click', () => fold(!panel.classList.contains('open')));

  /** How many conversations the list shows: a page, and a page more each time more are asked for. */
  let wanted = PAGE;
  /** How many there are in all, as the server last counted them. */
  let count = 0;
  /** Rows by thread id, in the list's order. */
  const rows = new Map();
  /** The next page on its way, if one is. */
  let loading = null;
  /** "Show more" was pressed: the next page's first row takes the focus. */
  let focusWanted = false;
  /** Reads of the list, one after another, so a page added and the list read again never undo each other. */
  let queue = Promise.resolve();
  const queued = (task) => {
    const run = queue.then(task);
    queue = run.catch(() => {});
    return run;
  };

  const draw = () => queued(drawNow);

  async function drawNow() {
    const me = await whoAmI();
    const resource = await currentResource();
    drawActing(acting, me, resource);
    const page = await firstThreads(resource, wanted);
    // A row being renamed, or asking whether to delete, stays as it is.
    if (list.querySelector('form.rename, .confirm')) return;
    show(page.threads, resource);
    showCount(page.total);
  }

  /** What a row shows: when it changes, the row is made again. */
  const shapeOf = (thread) => `${shownTitle(thread)}\u0000${thread.updatedAt}\u0000${thread.id === current}`;

  /** The row of `thread`, kept when it shows the same, else made again in its place. */
  function rowFor(thread, resource) {
    const kept = rows.get(thread.id);
    if (kept?.dataset.shape === shapeOf(thread)) return kept;
    const made = row(thread, resource);
    made.dataset.shape = shapeOf(thread);
    kept?.replaceWith(made);
    rows.set(thread.id, made);
    return made;
  }

  /** Makes the list `threads`, in order; rows that did not change stay, with the focus in them. */
  function show(threads, resource) {
    const listed = new Set(threads.map((t) => t.id));
    for (const [id, item] of rows) {
      if (!listed.has(id)) {
        item.remove();
        rows.delete(id);
      }
    }
    let previous = null;
    for (const thread of threads) {
      const item = rowFor(thread, resource);
      // Moved only when out of place: moving a row would take the focus from it.
      if (previous ? previous.nextElementSibling !== item : list.firstElementChild !== item) {
        if (previous) previous.after(item);
        else list.prepend(item);
      }
      previous = item;
    }
    if (list.lastElementChild !== foot) list.append(foot);
  }

  /** The count in the heading, how many of it are shown, and the empty state. */
  function showCount(total) {
    count = total;
    const shown = rows.size;
    counted.hidden = count === 0;
    counted.textContent = `${count.toLocaleString()} ${count === 1 ? 'conversation' : 'conversations'}`;
    more.hidden = shown >= count;
    foot.hidden = shown >= count && count <= PAGE;
    progress.textContent =
      shown < count ? `${shown.toLocaleString()} of ${count.toLocaleString()} shown` : `All ${count.toLocaleString()} shown`;
    status.textContent = count ? '' : 'No conversations yet. Your first message starts one.';
  }

  /**
   * Adds the next page below the rows shown. With `focus` (the reader
   * pressed "Show more") the focus moves to the page's first row.
   */
  function showMore({ focus }) {
    // A press while a page comes by itself (the end scrolled near) moves
    // the focus to that page's first row when it arrives.
    if (focus) focusWanted = rows.size < count;
    if (loading || rows.size >= count) return;
    more.setAttribute('aria-busy', 'true');
    progress.textContent = 'Loading more…';
    loading = queued(async () => {
      const resource = await currentResource();
      const from = rows.size;
      const next = await threadsPage(resource, { page: Math.floor(from / PAGE), perPage: PAGE });
      wanted = Math.max(wanted, from + PAGE);
      // A conversation started meanwhile moves the pages down: rows shown
      // already are not shown twice.
      const added = next.threads.filter((t) => !rows.has(t.id)).map((t) => rowFor(t, resource));
      for (const item of added) list.insertBefore(item, foot);
      showCount(next.total);
      if (focusWanted) added[0]?.querySelector('a')?.focus();
      focusWanted = false;
    })
      .catch((err) => {
        progress.textContent = `Could not load more: ${err.message}`;
      })
      .finally(() => {
        loading = null;
        more.removeAttribute('aria-busy');
        // Still near the end (a tall list): observing again says so at once.
        observer.unobserve(foot);
        observer.observe(foot);
      });
  }

  more.addEventListener('click', () => showMore({ focus: true }));
  const observer = new IntersectionObserver(
    (entries) => {
      if (entries.some((entry) => entry.isIntersecting)) showMore({ focus: false });
    },
    { root: list, rootMargin: `0px 0px ${AHEAD} 0px` },
  );
  observer.observe(foot);

  function row(thread, resource) {
    const title = shownTitle(thread);
    const link = h(
      'a',
      {
        href: `/threads/${encodeURIComponent(thread.id)}`,
        'data-route': true,
        class: 'thread-link',
        'aria-current': thread.id === current ? 'page' : null,
      },
      h('span', { class: 'thread-title' }, title),
      h('time', { class: 'thread-when', datetime: thread.updatedAt, title: thread.updatedAt }, ago(thread.updatedAt)),
    );
    const rename = h('button', { type: 'button', class: 'quiet icon', 'aria-label': `Rename “${title}”`, title: 'Rename' }, 'Rename');
    const remove = h('button', { type: 'button', class: 'quiet icon danger', 'aria-label': `Delete “${title}”`, title: 'Delete' }, 'Delete');
    const item = h('li', { class: 'thread-item', 'data-thread-id': thread.id }, link, h('div', { class: 'thread-actions' }, rename, remove));
    rename.addEventListener('click', () => renameForm(item, thread, resource, title));
    remove.addEventListener('click', () => confirmDelete(item, thread, resource, title));
    return item;
  }

  function renameForm(item, thread, resource, title) {
    const id = `rename-${thread.id}`;
    const input = h('input', { id, type: 'text', value: title, maxlength: 200, autocomplete: 'off', required: true });
    const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    const form = h(
      'form',
      { class: 'rename', 'aria-label': `Rename “${title}”` },
      h('label', { for: id, class: 'visually-hidden' }, 'New title'),
      input,
      error,
      h(
        'div',
        { class: 'actions' },
        h('button', { type: 'submit', class: 'primary' }, 'Save'),
        h('button', { type: 'button', class: 'quiet', onclick: () => done() }, 'Cancel'),
      ),
    );
    const done = () => {
      form.remove();
      return draw();
    };
    // Made again when the list is next drawn, whatever it shows then.
    item.dataset.shape = '';
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') done();
    });
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const title = input.value.trim();
      if (!title) {
        error.textContent = 'A title cannot be empty.';
        error.hidden = false;
        return;
      }
      try {
        await sendJson('PATCH', threadPath(thread.id, resource), { title });
        if (thread.id === current) onRenamed?.(title);
        await done();
        list.querySelector(`li[data-thread-id="${CSS.escape(thread.id)}"] a`)?.focus();
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
      }
    });
    item.replaceChildren(form);
    input.focus();
    input.select();
  }

  function confirmDelete(item, thread, resource, title) {
    const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    const yes = h('button', { type: 'button', class: 'danger' }, 'Delete');
    const box = h(
      'div',
      { class: 'confirm', role: 'group', 'aria-label': `Delete “${title}”?` },
      h('p', {}, 'Delete ', h('strong', {}, title), '? Its messages go, and any question it waits on is cancelled.'),
      error,
      h('div', { class: 'actions' }, yes, h('button', { type: 'button', class: 'quiet', onclick: () => done() }, 'Keep')),
    );
    const done = () => {
      box.remove();
      return draw();
    };
    item.dataset.shape = '';
    yes.addEventListener('click', async () => {
      try {
        await sendJson('DELETE', `${threadPath(thread.id, resource)}&cancelRuns=true`);
        if (thread.id === current) onDeleted?.();
        await done();
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
      }
    });
    item.replaceChildren(box);
    yes.focus();
  }

  return { panel, draw, setCurrent: (id) => (current = id) };
}

/**
 * Says which resource the page acts as; a choice when the token may use
 * several, which starts a new chat among the chosen one's conversations.
 */
function drawActing(acting, me, resource) {
  if (me.resources && me.resources.length > 1) {
    const select = h(
      'select',
      { id: 'resource' },
      me.resources.map((r) => h('option', { value: r, selected: r === resource }, r)),
    );
    select.addEventListener('change', () => {
      sessionStorage.setItem(RESOURCE_KEY, select.value);
      // As the router does for a link (app.js listens).
      history.pushState({}, '', '/');
      window.dispatchEvent(new PopStateEvent('popstate'));
    });
    acting.replaceChildren(h('label', { for: 'resource' }, 'Acting as '), select);
  } else {
    acting.replaceChildren('Acting as ', h('strong', { class: 'resource' }, resource));
  }
  acting.title = me.resources
    ? 'The conversations of this resource; other tokens cannot see them.'
    : 'Anyone who can reach this server shares these conversations.';
}
