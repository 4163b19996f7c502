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

/** Brings the list up to date: new calls added, calls answered elsewhere removed. */
export async function refreshInbox() {
  if (!list || !list.isConnected) return;
  const calls = await waitingCalls();
  const seen = new Set();
  let previous = null;
  for (const { run, call } of calls) {
    const key = call.toolCallId + '@' + run.runId;
    seen.add(key);
    let card = list.querySelector(`li[data-key="${CSS.escape(key)}"]`);
    if (!card) card = inboxCard(run, call, key);
    else card.querySelector('.when').textContent = ago(run.updatedAt);
    if (previous) previous.after(card);
    else list.prepend(card);
    previous = card;
  }
  for (const card of [...list.querySelectorAll('li[data-key]')]) {
    if (!seen.has(card.dataset.key) && !answered.has(card.dataset.key)) card.remove();
  }
  list.querySelector('.empty')?.remove();
  if (!list.querySelector('li[data-key]')) {
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

function inboxCard(run, call, key) {
  const turn = assistantTurn(run.agentId);
  turn.querySelector('.turn-head').remove();
  const status = h('span', { class: 'turn-status', role: 'status' });
  const card = h(
    'li',
    { class: 'card', 'data-key': key },
    h(
      'div',
      { class: 'card-head' },
      h('span', { class: 'agent' }, run.agentId),
      h('span', { class: 'dot', 'aria-hidden': 'true' }, '·'),
      h('a', { href: `/runs/${encodeURIComponent(run.runId)}`, 'data-route': true, class: 'run-ref' }, `Run ${shortId(run.runId)}`),
      h('span', { class: 'dot', 'aria-hidden': 'true' }, '·'),
      h('time', { class: 'when', datetime: run.updatedAt }, ago(run.updatedAt)),
      status,
    ),
  );
  turn.prepend(status);
  const form = pendingCallForm({
    runId: run.runId,
    agentId: run.agentId,
    call,
    onContinue: (chunks) => {
      answered.add(key);
      card.classList.add('continuing');
      streamInto(turn, chunks, run.agentId);
    },
  });
  card.append(form, turn);
  return card;
}
