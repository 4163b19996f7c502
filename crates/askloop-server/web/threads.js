// The conversations beside the chat: the threads of the resource the page
// acts as (GET /api/me), newest first, each at its own address
// (/threads/{id}), renamed and deleted from the list. A conversation's
// title is its first message, shortened, unless someone renamed it; a
// thread started elsewhere without a title is named by its first message
// as the list is drawn.

import { getJson, sendJson, whoAmI } from './api.js';
import { ago, h } from './dom.js';

const RESOURCE_KEY = 'askloop.resource';
/** The most conversations the list shows. */
const LISTED = 100;

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

/** The resource's conversations, newest first. */
export async function listThreads(resource) {
  const page = await getJson(`/api/memory/threads?resourceId=${encodeURIComponent(resource)}&perPage=${LISTED}`);
  return page.threads;
}

/** Titles made from first messages, by thread id: they never change. */
const firstMessages = new Map();

/** The title to show: the stored one, else the first message's, else a placeholder. */
export function shownTitle(thread) {
  return thread.title || firstMessages.get(thread.id) || 'New conversation';
}

/** Reads the first message of each untitled thread, for its title. */
async function nameUntitled(threads, resource) {
  const untitled = threads.filter((t) => !t.title && !firstMessages.has(t.id));
  await Promise.all(
    untitled.map(async (t) => {
      try {
        const page = await getJson(messagesPath(t.id, resource, { perPage: 1 }));
        const text = messageText(page.messages[0]);
        if (text) firstMessages.set(t.id, titleFrom(text));
      } catch {
        // Left as a placeholder; the list says nothing is wrong with the thread.
      }
    }),
  );
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
    acting,
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

  async function draw() {
    const me = await whoAmI();
    const resource = await currentResource();
    drawActing(acting, me, resource);
    const threads = await listThreads(resource);
    await nameUntitled(threads, resource);
    // A row being renamed, or asking whether to delete, stays as it is.
    if (list.querySelector('form.rename, .confirm')) return;
    list.replaceChildren(...threads.map((t) => row(t, resource)));
    status.textContent = threads.length ? '' : 'No conversations yet. Your first message starts one.';
  }

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
