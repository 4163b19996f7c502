// Chat: pick an agent, send a message, read the reply as it streams in;
// the agent's questions and approvals appear in the conversation as forms.
// Every conversation is a thread of the server's (see threads.js): a
// message sends only itself with `memory: {thread, resource}`, and the
// thread gives the agent what was said before, so a reload or another
// device shows the whole conversation, its open questions answerable.

import { Unauthorized, agentPath, getJson, postStream } from './api.js';
import { claim, h } from './dom.js';
import { grantList } from './grants.js';
import { conversationList, currentResource, newThreadId, shownTitle, threadPath, titleFrom } from './threads.js';
import { threadMessages, transcript } from './transcript.js';
import { assistantTurn, streamInto, userTurn } from './turns.js';

/** The conversation on screen, or null. */
let current = null;

/**
 * The chat at `/` (a new conversation, started by its first message) or
 * at `/threads/{threadId}` (one that exists, read from the server).
 */
export async function chatView(main, threadId = null) {
  const mine = claim(main);
  const [agents, resource] = await Promise.all([getJson('/api/agents'), currentResource()]);
  const view = {
    main,
    threadId,
    resource,
    thread: null,
    agents: Object.values(agents),
    agentId: null,
    forms: new Map(),
    busy: false,
    /** What the messages last read showed (see `signature`), and a count of this tab's own changes. */
    signature: null,
    generation: 0,
    log: h('div', { class: 'log', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'polite' }),
    title: h('h1', { id: 'chat-title' }, 'New chat'),
  };
  if (threadId) {
    try {
      view.thread = await getJson(threadPath(threadId, resource));
    } catch (err) {
      if (err.status !== 404 && err.status !== 403) throw err;
      if (!mine()) return;
      current = null;
      const list = conversationList({ current: null });
      main.replaceChildren(
        h(
          'div',
          { class: 'chat-layout' },
          list.panel,
          h('section', { class: 'chat' }, h('h1', {}, 'Conversation not found'), h('p', { class: 'notice' }, err.message)),
        ),
      );
      await list.draw();
      return;
    }
  }
  if (!mine()) return;
  current = view;
  const remembered = sessionStorage.getItem('askloop.agent');
  view.agentId = view.thread?.agentId ?? (view.agents.some((a) => a.id === remembered) ? remembered : view.agents[0]?.id);

  const select = h(
    'select',
    { id: 'agent', name: 'agent', disabled: Boolean(view.thread) },
    view.agents.map((a) => h('option', { value: a.id, selected: a.id === view.agentId }, a.name || a.id)),
  );
  select.addEventListener('change', () => {
    view.agentId = select.value;
    sessionStorage.setItem('askloop.agent', select.value);
  });
  const message = h('textarea', {
    id: 'message',
    name: 'message',
    rows: 2,
    placeholder: 'Ask the agent something…',
    required: true,
  });
  const send = h('button', { type: 'submit', class: 'primary' }, 'Send');
  const composer = h(
    'form',
    { class: 'composer' },
    h('label', { for: 'message', class: 'visually-hidden' }, 'Message'),
    message,
    send,
  );
  message.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });

  const list = conversationList({
    current: threadId,
    onRenamed: (title) => {
      view.title.textContent = title;
      document.title = `${title} · askloop`;
    },
    onDeleted: () => {
      // To a new chat, as the router does for a link (app.js listens).
      history.pushState({}, '', '/');
      window.dispatchEvent(new PopStateEvent('popstate'));
    },
  });
  view.list = list;

  composer.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = message.value.trim();
    if (!text || !view.agentId) return;
    const agent = view.agents.find((a) => a.id === view.agentId);
    view.log.querySelector(':scope > .empty')?.remove();
    view.log.append(userTurn(text));
    const turn = assistantTurn(agent?.name || view.agentId);
    view.log.append(turn);
    message.value = '';
    send.disabled = true;
    view.busy = true;
    // The first message names the new thread and gives it its title.
    const starting = !view.threadId;
    if (starting) view.threadId = newThreadId();
    const thread = starting ? { id: view.threadId, title: titleFrom(text) } : view.threadId;
    try {
      const chunks = await postStream(agentPath(view.agentId, 'stream'), {
        messages: [{ role: 'user', content: text }],
        memory: { thread, resource: view.resource },
      });
      if (starting) {
        history.replaceState({}, '', `/threads/${encodeURIComponent(view.threadId)}`);
        view.title.textContent = thread.title;
        document.title = `${thread.title} · askloop`;
        select.disabled = true;
        view.thread = { id: view.threadId, agentId: view.agentId, title: thread.title };
        list.setCurrent(view.threadId);
        list.draw().catch(() => {});
      }
      await streamInto(turn, chunks, view.agentId, { resourceId: view.resource });
      // Its forms are kept when the conversation is drawn again from the server.
      for (const form of turn.querySelectorAll('form.pending[data-tool-call-id]')) view.forms.set(form.dataset.toolCallId, form);
    } catch (err) {
      if (starting && !(err instanceof Unauthorized)) view.threadId = null;
      turn.querySelector('.turn-body').append(h('p', { class: 'form-error', role: 'alert' }, err.message));
      turn.querySelector('.turn-status').textContent = 'Failed';
    } finally {
      view.busy = false;
      send.disabled = false;
      message.focus();
      if (view.thread) caughtUp(view).catch(() => {});
      list.draw().catch(() => {});
    }
  });

  // What this chat runs without asking (approvals that stick), each revocable.
  view.grants = grantList({
    title: 'Allowed without asking',
    query: () => ({ threadId: view.threadId, resourceId: view.resource }),
    here: () => view.threadId,
  });
  if (view.thread) {
    const title = shownTitle(view.thread);
    view.title.textContent = title;
    document.title = `${title} · askloop`;
    draw(view, await threadMessages(view.threadId, view.resource));
    view.grants.draw();
  } else {
    view.log.append(emptyChat());
  }

  if (!mine()) return;
  main.replaceChildren(
    h(
      'div',
      { class: 'chat-layout' },
      list.panel,
      h(
        'section',
        { class: 'chat', 'aria-labelledby': 'chat-title' },
        h(
          'div',
          { class: 'toolbar' },
          view.title,
          h('div', { class: 'field-inline' }, h('label', { for: 'agent' }, 'Agent'), select),
        ),
        view.grants.section,
        view.log,
        composer,
      ),
    ),
  );
  // A run continued from here (an answer, an approval) stopped streaming.
  view.log.addEventListener('settled', () => {
    if (view.thread) view.grants.draw();
    if (!view.busy) caughtUp(view).catch(() => {});
  });
  await list.draw();
  const last = view.log.querySelector('form.pending:not(.answered) input, form.pending:not(.answered) textarea');
  (last || message).focus();
}

/**
 * What of a conversation the chat shows: its messages and how many calls
 * each still waits on. Drawn again only when this changes.
 */
function signature(messages) {
  return JSON.stringify(
    messages.map((m) => {
      const meta = m.content?.metadata || {};
      return [m.id, Object.keys(meta.suspendedTools || {}).length + Object.keys(meta.pendingToolApprovals || {}).length];
    }),
  );
}

/** Draws the conversation's messages. */
function draw(view, messages) {
  const agent = view.agents.find((a) => a.id === view.agentId) || { id: view.agentId };
  const turns = transcript(messages, agent, view.forms, { resourceId: view.resource });
  view.signature = signature(messages);
  // A redraw moves the kept forms; keep the focus where the person was.
  const focused = view.log.contains(document.activeElement) ? document.activeElement : null;
  view.log.replaceChildren(...(turns.length ? turns : [emptyChat()]));
  if (focused?.isConnected && document.activeElement !== focused) focused.focus({ preventScroll: true });
}

/** Whether a change of this tab's is under way: an answer on its way, a run streaming in. */
function settling(view) {
  return view.busy || Boolean(view.log.querySelector('.turn[aria-busy="true"], form.pending[aria-busy="true"]:not(.answered)'));
}

/**
 * After a run streamed in here: what the server now holds is what the chat
 * shows (as streamed), so it is not drawn again for it; changes elsewhere
 * still are.
 */
async function caughtUp(view) {
  view.generation += 1;
  const messages = await threadMessages(view.threadId, view.resource);
  if (!settling(view)) view.signature = signature(messages);
}

/**
 * Brings the open conversation up to date after a change elsewhere (an
 * answer from the Inbox, another device, the CLI): the list beside it, and
 * its messages when they changed. Not while this tab changes it.
 */
export async function refreshConversation() {
  const view = current;
  if (!view || !view.main.isConnected || !view.log.isConnected) return;
  await view.list?.draw();
  if (!view.thread || settling(view)) return;
  view.grants.draw();
  const generation = view.generation;
  const messages = await threadMessages(view.threadId, view.resource);
  if (generation !== view.generation || settling(view) || signature(messages) === view.signature) return;
  draw(view, messages);
}

function emptyChat() {
  return h(
    'div',
    { class: 'empty' },
    h('p', { class: 'empty-title' }, 'Start a conversation'),
    h('p', {}, 'When the agent needs something from you, its question appears here as a form. The conversation is kept: come back to it from the list, after a reload or on another device.'),
  );
}
