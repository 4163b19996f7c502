// Chat: pick an agent, send a message, read the reply as it streams in;
// the agent's questions and approvals appear in the conversation as forms.

import { agentPath, getJson, postStream } from './api.js';
import { h, shortId } from './dom.js';
import { pendingCallForm } from './questions.js';

/**
 * Reads a run's chunks into `turn` (an element of the conversation): text
 * as it streams, each waiting call as a form (answering it streams the
 * continuation into the same turn), errors as alerts.
 */
export async function streamInto(turn, chunks, agentId) {
  let text = null;
  const status = turn.querySelector('.turn-status');
  const setStatus = (value) => {
    if (status) status.textContent = value;
  };
  setStatus('Working…');
  turn.setAttribute('aria-busy', 'true');
  try {
    for await (const chunk of chunks) {
      const p = chunk.payload || {};
      switch (chunk.type) {
        case 'start':
          if (chunk.runId) setRun(turn, chunk.runId);
          break;
        case 'text-delta':
          if (!text) {
            text = h('div', { class: 'text' });
            turn.querySelector('.turn-body').append(text);
          }
          text.textContent += p.text || '';
          break;
        case 'text-end':
          text = null;
          break;
        case 'tool-call':
          if (p.toolName !== 'ask_user') {
            turn.querySelector('.turn-body').append(h('p', { class: 'tool-line' }, 'Calls ', h('code', {}, p.toolName)));
          }
          break;
        case 'tool-result':
          if (p.toolName !== 'ask_user') {
            turn.querySelector('.turn-body').append(h('p', { class: 'tool-line' }, h('code', {}, p.toolName), ' finished'));
          }
          break;
        case 'tool-output-denied':
          turn.querySelector('.turn-body').append(h('p', { class: 'tool-line' }, h('code', {}, p.toolName), ' was declined'));
          break;
        case 'tool-call-suspended':
        case 'tool-call-approval':
          addPending(turn, chunk.runId, agentId, {
            toolCallId: p.toolCallId,
            toolName: p.toolName,
            args: p.args,
            kind: chunk.type === 'tool-call-approval' ? 'approval' : 'suspended',
            suspendPayload: p.suspendPayload,
          });
          text = null;
          break;
        case 'error':
          turn.querySelector('.turn-body').append(
            h('p', { class: 'form-error', role: 'alert' }, p.error?.message || 'The run failed.'),
          );
          break;
        default:
          break;
      }
    }
    const waiting = turn.querySelectorAll('form.pending:not(.answered)').length;
    setStatus(waiting ? `Waiting for ${waiting === 1 ? 'your answer' : `${waiting} answers`}` : 'Done');
  } catch (err) {
    turn.querySelector('.turn-body').append(h('p', { class: 'form-error', role: 'alert' }, `The stream broke off: ${err.message}`));
    setStatus('Interrupted');
  } finally {
    turn.setAttribute('aria-busy', 'false');
  }
}

function setRun(turn, runId) {
  const link = turn.querySelector('.run-link');
  if (link && !link.dataset.runId) {
    link.dataset.runId = runId;
    link.href = `/runs/${encodeURIComponent(runId)}`;
    link.textContent = `Run ${shortId(runId)}`;
    link.hidden = false;
  }
}

function addPending(turn, runId, agentId, call) {
  const body = turn.querySelector('.turn-body');
  // In the Inbox and the Run view the run's open calls are already shown
  // beside the turn; a continuation that suspends again repeats them.
  const scope = turn.closest('li.card, section.waiting') || body;
  if (scope.querySelector(`form[data-tool-call-id="${CSS.escape(call.toolCallId)}"]`)) return;
  let group = body.lastElementChild?.classList.contains('pending-group') ? body.lastElementChild : null;
  if (!group) {
    group = h('div', { class: 'pending-group' });
    body.append(group);
  }
  group.append(
    pendingCallForm({
      runId,
      agentId,
      call,
      onContinue: (chunks) => streamInto(turn, chunks, agentId),
    }),
  );
  const first = group.querySelector('input, textarea');
  if (first && group.children.length === 1 && turn.closest('.chat')) first.focus({ preventScroll: false });
}

/** An assistant turn: who, which run, its status, its body. */
export function assistantTurn(agentName) {
  return h(
    'article',
    { class: 'turn assistant' },
    h(
      'header',
      { class: 'turn-head' },
      h('span', { class: 'who' }, agentName),
      h('a', { class: 'run-link', href: '#', 'data-route': true, hidden: true }),
      h('span', { class: 'turn-status', role: 'status' }),
    ),
    h('div', { class: 'turn-body' }),
  );
}

export function userTurn(text) {
  return h('article', { class: 'turn user' }, h('div', { class: 'turn-body' }, h('div', { class: 'text' }, text)));
}

let state = null;

export async function chatView(main) {
  if (!state) state = { agentId: null, history: [], log: null, agents: [] };
  const agents = await getJson('/api/agents');
  state.agents = Object.values(agents);
  if (!state.agentId || !state.agents.some((a) => a.id === state.agentId)) state.agentId = state.agents[0]?.id;

  const select = h(
    'select',
    { id: 'agent', name: 'agent' },
    state.agents.map((a) => h('option', { value: a.id, selected: a.id === state.agentId }, a.name || a.id)),
  );
  select.addEventListener('change', () => {
    state.agentId = select.value;
    state.history = [];
    state.log.replaceChildren(emptyChat());
  });
  if (!state.log) {
    state.log = h('div', { class: 'log', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'polite' }, emptyChat());
  }
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
  composer.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = message.value.trim();
    if (!text || !state.agentId) return;
    const agent = state.agents.find((a) => a.id === state.agentId);
    state.log.querySelector('.empty')?.remove();
    state.log.append(userTurn(text));
    const turn = assistantTurn(agent?.name || state.agentId);
    state.log.append(turn);
    message.value = '';
    state.history.push({ role: 'user', content: text });
    send.disabled = true;
    try {
      const chunks = await postStream(agentPath(state.agentId, 'stream'), { messages: state.history });
      await streamInto(turn, chunks, state.agentId);
      const reply = [...turn.querySelectorAll('.turn-body > .text')].map((t) => t.textContent).join('\n');
      if (reply) state.history.push({ role: 'assistant', content: reply });
    } catch (err) {
      turn.querySelector('.turn-body').append(h('p', { class: 'form-error', role: 'alert' }, err.message));
      turn.querySelector('.turn-status').textContent = 'Failed';
    } finally {
      send.disabled = false;
      message.focus();
    }
  });

  main.replaceChildren(
    h(
      'section',
      { class: 'chat', 'aria-labelledby': 'chat-title' },
      h(
        'div',
        { class: 'toolbar' },
        h('h1', { id: 'chat-title' }, 'Chat'),
        h('div', { class: 'field-inline' }, h('label', { for: 'agent' }, 'Agent'), select),
      ),
      state.log,
      composer,
    ),
  );
  message.focus();
}

function emptyChat() {
  return h(
    'div',
    { class: 'empty' },
    h('p', { class: 'empty-title' }, 'Start a conversation'),
    h('p', {}, 'When the agent needs something from you, its question appears here as a form. Questions from every run also wait in the Inbox.'),
  );
}
