// A conversation's turns: the user's, the assistant's, and a run's chunks
// read into an assistant turn as they stream (text, each waiting call as a
// form, errors). The chat, the Inbox, the Run view and a thread's
// transcript all draw their turns with these.

import { h, shortId } from './dom.js';
import { pendingCallForm } from './questions.js';

/**
 * Reads a run's chunks into `turn` (an element of the conversation): text
 * as it streams, each waiting call as a form (answering it streams the
 * continuation into the same turn), errors as alerts. `thread`
 * ({resourceId}) when the run is on a thread: its approvals can stick.
 */
export async function streamInto(turn, chunks, agentId, thread = null) {
  let text = null;
  // The model's reasoning, as it streams: folded away under its summary,
  // for whoever wants to read how the reply came about.
  let reasoning = null;
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
        case 'reasoning-start':
          reasoning = h('div', { class: 'reasoning-text' });
          turn.querySelector('.turn-body').append(
            h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning'), reasoning),
          );
          break;
        case 'reasoning-delta':
          if (reasoning) reasoning.textContent += p.text || '';
          break;
        case 'reasoning-end':
          reasoning = null;
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
          addPending(turn, chunk.runId, agentId, thread, {
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
    // The conversation around it learns that a run it showed has stopped streaming.
    turn.dispatchEvent(new CustomEvent('settled', { bubbles: true }));
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

function addPending(turn, runId, agentId, thread, call) {
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
  const form = pendingCallForm({
    runId,
    agentId,
    call,
    thread,
    // Into the turn that shows the form then: a conversation drawn again
    // moves its forms into new turns.
    onContinue: (chunks) => streamInto(form.closest('.turn') || turn, chunks, agentId, thread),
  });
  group.append(form);
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
