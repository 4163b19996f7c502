// Inbox: every question and approval waiting in the store, newest first,
// whoever started the run (this page, the CLI, a program, another server).
// It redraws itself when a run changes anywhere (see app.js); a card that
// was answered here stays, showing the run continuing.

import { getJson } from './api.js';
import { ago, h, shortId } from './dom.js';
import { pendingCallForm } from './questions.js';
import { assistantTurn, streamInto } from './chat.js';

/** Every pending call of every suspended run, newest first. */
export async function waitingCalls() {
  const page = await getJson('/api/runs?status=suspended&limit=500');
  const calls = [];
  for (const run of page.runs) {
    for (const call of run.pendingToolCalls) calls.push({ run, call });
  }
  calls.sort((a, b) => (b.run.updatedAt > a.run.updatedAt ? 1 : b.run.updatedAt < a.run.updatedAt ? -1 : 0));
  return calls;
}

let list = null;
/** Cards answered on this page: kept, to show the run continuing. */
const answered = new Set();

export async function inboxView(main) {
  list = h('ol', { class: 'inbox-list', 'aria-label': 'Waiting questions' });
  main.replaceChildren(
    h(
      'section',
      { class: 'inbox', 'aria-labelledby': 'inbox-title' },
      h(
        'div',
        { class: 'toolbar' },
        h('h1', { id: 'inbox-title' }, 'Inbox'),
        h('p', { class: 'subtitle' }, 'Questions and approvals waiting for a person, from every run.'),
      ),
      list,
    ),
  );
  await refreshInbox();
}

/** Brings the list up to date: new questions added, questions answered elsewhere removed. */
export async function refreshInbox() {
  if (!list || !list.isConnected) return;
  const calls = await waitingCalls();
  const runs = new Map();
  for (const { run, call } of calls) {
    if (!runs.has(run.runId)) runs.set(run.runId, { run, calls: [] });
    runs.get(run.runId).calls.push(call);
  }
  let previous = null;
  for (const { run, calls: pending } of runs.values()) {
    let card = list.querySelector(`li[data-run-id="${CSS.escape(run.runId)}"]`);
    if (!card) card = inboxCard(run);
    card.querySelector('.when').textContent = ago(run.updatedAt);
    const group = card.querySelector('.pending-group');
    const open = new Set(pending.map((c) => c.toolCallId));
    for (const call of pending) {
      if (!group.querySelector(`form[data-tool-call-id="${CSS.escape(call.toolCallId)}"]`)) {
        group.append(questionIn(card, run, call));
      }
    }
    for (const form of [...group.querySelectorAll('form:not(.answered)')]) {
      if (!open.has(form.dataset.toolCallId)) form.remove();
    }
    // Moved only when out of place: moving a card would take the focus
    // from a person typing in it.
    if (previous ? previous.nextElementSibling !== card : list.firstElementChild !== card) {
      if (previous) previous.after(card);
      else list.prepend(card);
    }
    previous = card;
  }
  for (const card of [...list.querySelectorAll('li[data-run-id]')]) {
    if (!runs.has(card.dataset.runId) && !answered.has(card.dataset.runId)) card.remove();
  }
  list.querySelector('.empty')?.remove();
  if (!list.querySelector('li[data-run-id]')) {
    list.append(
      h(
        'li',
        { class: 'empty' },
        h('p', { class: 'empty-title' }, 'Nothing is waiting for you'),
        h('p', {}, 'When an agent asks a question or needs an approval, it shows up here, wherever the run was started.'),
      ),
    );
  }
}

/** One run's card: who asks, which run, since when; its questions below. */
function inboxCard(run) {
  const turn = assistantTurn(run.agentId);
  turn.querySelector('.turn-head').remove();
  const status = h('span', { class: 'turn-status', role: 'status' });
  turn.prepend(status);
  return h(
    'li',
    { class: 'card', 'data-run-id': run.runId },
    h(
      'div',
      { class: 'card-head' },
      h('span', { class: 'agent' }, run.agentId),
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
    onContinue: (chunks) => {
      answered.add(run.runId);
      card.classList.add('continuing');
      streamInto(turn, chunks, run.agentId);
    },
  });
}
