// Run view (/runs/{runId}): one run's conversation, its questions and
// answers, its status, and what it waits on, answerable here. Every text of
// the run's is drawn with its invisible characters marked (`shown`).

import { postJson, getJson, postStream } from './api.js';
import { ago, claim, h, shortId, shown, statusBadge } from './dom.js';
import { pendingCallForm } from './questions.js';
import { answered, errorBox, showError } from './forms.js';
import { assistantTurn, streamInto } from './turns.js';

let current = null;

export async function runView(main, runId) {
  // forms: the open questions' forms by tool call id, kept across redraws
  // so that what a person has typed or chosen survives a change elsewhere.
  current = { runId, main, mine: claim(main), busy: false, forms: new Map() };
  main.replaceChildren(h('p', { class: 'loading' }, 'Loading the run…'));
  await refreshRun();
}

/** Redraws the run view if it shows `runId` (or any run, when unknown). */
export async function refreshRun(runId) {
  const view = current;
  if (!view || !view.mine() || view.busy) return;
  if (runId && runId !== view.runId) return;
  let run;
  try {
    run = await getJson(`/api/runs/${encodeURIComponent(view.runId)}`);
    // Another run or view was opened while this one was read.
    if (current !== view || !view.mine()) return;
  } catch (err) {
    if (current !== view || !view.mine()) return;
    if (err.status === 404) {
      view.main.replaceChildren(
        h('section', { class: 'run' }, h('h1', {}, 'Run not found'), h('p', { class: 'notice' }, err.message)),
      );
      return;
    }
    throw err;
  }
  render(run);
}

function results(messages) {
  const byId = new Map();
  for (const m of messages) if (m.role === 'tool') byId.set(m.toolCallId, m);
  return byId;
}

function contentText(content) {
  return typeof content === 'string' ? content : JSON.stringify(content);
}

function render(run) {
  const { main } = current;
  const done = results(run.messages);
  const log = h('div', { class: 'log', role: 'log', 'aria-label': 'Conversation' });
  for (const m of run.messages) {
    if (m.role === 'user') {
      log.append(h('article', { class: 'turn user' }, h('div', { class: 'turn-body' }, h('div', { class: 'text' }, shown(contentText(m.content))))));
    } else if (m.role === 'assistant') {
      const body = h('div', { class: 'turn-body' });
      if (m.content) body.append(h('div', { class: 'text' }, shown(contentText(m.content))));
      for (const call of m.toolCalls || []) {
        const result = done.get(call.id);
        if (call.name === 'ask_user' && run.builtInAskUser) {
          body.append(
            h(
              'div',
              { class: 'qa' },
              h('p', { class: 'q' }, shown(call.args?.question || 'Question')),
              result
                ? h('p', { class: 'a' }, shown(contentText(result.content).replace(/^User answered: /, '')))
                : h('p', { class: 'a waiting' }, 'Waiting for an answer'),
            ),
          );
        } else {
          body.append(
            h(
              'div',
              { class: 'qa' },
              h('p', { class: 'tool-line' }, 'Called ', h('code', {}, shown(call.name))),
              h('pre', { class: 'args' }, shown(JSON.stringify(call.args, null, 2))),
              result ? h('p', { class: result.isError ? 'a error' : 'a' }, shown(contentText(result.content))) : null,
            ),
          );
        }
      }
      log.append(h('article', { class: 'turn assistant' }, h('header', { class: 'turn-head' }, h('span', { class: 'who' }, shown(run.agentId))), body));
    }
  }

  const turn = assistantTurn(run.agentId);
  turn.querySelector('.turn-head').remove();
  turn.prepend(h('span', { class: 'turn-status', role: 'status' }));
  const pending = run.pendingToolCalls.length
    ? h(
        'section',
        { class: 'waiting', 'aria-labelledby': 'waiting-title' },
        h('h2', { id: 'waiting-title' }, run.pendingToolCalls.length === 1 ? 'Waiting on you' : `Waiting on ${run.pendingToolCalls.length} answers`),
        allAtOnce(run, turn),
        h(
          'div',
          { class: 'pending-group' },
          run.pendingToolCalls.map((call) => formFor(run, call, turn)),
        ),
        turn,
      )
    : null;

  // When each waiting call stops waiting, and who resolved what so far.
  const limits = run.pendingToolCalls.filter((call) => call.expiresAt);
  const deadlines = limits.length
    ? h(
        'ul',
        { class: 'deadlines', 'aria-label': 'Time limits' },
        limits.map((call) =>
          h('li', {}, h('code', {}, shown(call.toolCallId)), ' expires ', h('time', { datetime: call.expiresAt, title: call.expiresAt }, untilTime(call.expiresAt))),
        ),
      )
    : null;
  const resolutions = (run.resolutions || []).length
    ? h(
        'section',
        { class: 'resolutions', 'aria-labelledby': 'resolutions-title' },
        h('h2', { id: 'resolutions-title' }, 'Decisions'),
        h(
          'ul',
          {},
          run.resolutions.map((r) =>
            h(
              'li',
              {},
              r.kind,
              r.toolCallId ? [' ', h('code', {}, shown(r.toolCallId))] : null,
              r.via === 'grant'
                ? [' by ', grantWho(r)]
                : [` via ${r.via}`, r.by ? [' by ', shown(r.by)] : r.declared ? [', ', shown(r.declared), ' (declared by the client, not verified)'] : ''],
              r.madeBy ? [' (a link made by ', shown(r.madeBy), ')'] : '',
              r.grant && r.via !== 'grant' ? ` (made a standing approval for this ${r.grant.scope === 'thread' ? 'chat' : 'resource'})` : '',
              ' ',
              h('time', { datetime: r.at, title: r.at }, ago(r.at)),
            ),
          ),
        ),
      )
    : null;

  const cancel = !['completed', 'failed', 'cancelled'].includes(run.status)
    ? h('button', { type: 'button', class: 'quiet', onclick: () => cancelRun(run.runId) }, 'Cancel run')
    : null;

  // A redraw moves the kept forms; keep the focus where the person was.
  const focused = main.contains(document.activeElement) ? document.activeElement : null;
  main.replaceChildren(
    h(
      'section',
      { class: 'run', 'aria-labelledby': 'run-title' },
      h(
        'div',
        { class: 'toolbar' },
        h('h1', { id: 'run-title' }, 'Run ', h('code', {}, shown(run.runId))),
        h('div', { class: 'run-status' }, 'Status ', statusBadge(run.status)),
      ),
      h(
        'dl',
        { class: 'facts' },
        h('div', {}, h('dt', {}, 'Agent'), h('dd', {}, shown(run.agentId))),
        h('div', {}, h('dt', {}, 'Started'), h('dd', {}, h('time', { datetime: run.createdAt, title: run.createdAt }, ago(run.createdAt)))),
        h('div', {}, h('dt', {}, 'Updated'), h('dd', {}, h('time', { datetime: run.updatedAt, title: run.updatedAt }, ago(run.updatedAt)))),
        h('div', {}, h('dt', {}, 'Steps'), h('dd', {}, String(run.steps))),
        cancel ? h('div', { class: 'fact-action' }, cancel) : null,
      ),
      run.error ? h('p', { class: 'form-error', role: 'alert' }, shown(run.error)) : null,
      deadlines,
      pending,
      resolutions,
      h('h2', { class: 'section-title' }, 'Conversation'),
      log,
    ),
  );
  if (focused?.isConnected && document.activeElement !== focused) focused.focus({ preventScroll: true });
}

/**
 * With several calls waiting for approval: approve or decline them all in
 * one decision (POST /api/runs/{runId}/decisions, `all`), each exactly
 * once, the model called once after the last. Questions stay open.
 */
function allAtOnce(run, turn) {
  const approvals = run.pendingToolCalls.filter((call) => call.kind === 'approval');
  if (approvals.length < 2) return null;
  const error = errorBox();
  const decide = async (all, bar) => {
    error.hidden = true;
    for (const button of bar.querySelectorAll('button')) button.disabled = true;
    current.busy = true;
    try {
      const chunks = await postStream(`/api/runs/${encodeURIComponent(run.runId)}/decisions`, { all });
      for (const call of approvals) {
        const form = current.forms.get(call.toolCallId);
        if (form) answered(form, all === 'approve' ? 'Approved with the others' : 'Declined with the others');
      }
      await streamInto(turn, chunks, run.agentId);
    } catch (err) {
      for (const button of bar.querySelectorAll('button')) button.disabled = false;
      showError(error, err);
    } finally {
      current.busy = false;
      refreshRun(run.runId);
    }
  };
  const bar = h(
    'div',
    { class: 'all-at-once', role: 'group', 'aria-label': 'Decide every approval' },
    h('p', {}, `${approvals.length} calls wait for approval.`),
    h('button', { type: 'button', class: 'primary', onclick: () => decide('approve', bar) }, `Approve all ${approvals.length}`),
    h('button', { type: 'button', class: 'danger', onclick: () => decide('decline', bar) }, `Decline all ${approvals.length}`),
    error,
  );
  return bar;
}

/** The form of a waiting call: the one already shown, or a new one. */
function formFor(run, call, turn) {
  const kept = current.forms.get(call.toolCallId);
  if (kept && !kept.classList.contains('answered')) return kept;
  const form = pendingCallForm({
    runId: run.runId,
    agentId: run.agentId,
    call,
    thread: run.resourceId ? { resourceId: run.resourceId } : null,
    onContinue: async (chunks) => {
      current.busy = true;
      // The continuation streams into the turn shown with the form now.
      await streamInto(form.closest('section.waiting')?.querySelector('.turn') || turn, chunks, run.agentId, run.resourceId ? { resourceId: run.resourceId } : null);
      current.busy = false;
      refreshRun(run.runId);
    },
  });
  current.forms.set(call.toolCallId, form);
  return form;
}

async function cancelRun(runId) {
  try {
    await postJson(`/api/runs/${encodeURIComponent(runId)}/cancel`, {});
  } finally {
    refreshRun(runId);
  }
}

/** Who stands behind a call approved by an earlier approval that sticks (a grant). */
function grantWho(r) {
  const made = r.grant ? [', made through the ', r.grant.grantedVia, ' ', h('time', { datetime: r.grant.grantedAt, title: r.grant.grantedAt }, ago(r.grant.grantedAt))] : [];
  return [r.by ? [shown(r.by), "'s standing approval"] : 'a standing approval', ...made, r.grant ? [' (grant ', h('code', { title: r.grant.id }, shortId(r.grant.id)), ')'] : null];
}

/** How long until an RFC 3339 time, for a countdown ("in 4 min", or "now"). */
function untilTime(at) {
  const seconds = Math.round((Date.parse(at) - Date.now()) / 1000);
  if (!(seconds > 0)) return 'now';
  if (seconds < 90) return `in ${seconds} s`;
  if (seconds < 5400) return `in ${Math.round(seconds / 60)} min`;
  return `in ${Math.round(seconds / 3600)} h`;
}
