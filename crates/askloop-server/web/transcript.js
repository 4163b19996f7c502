// A conversation as the server stores it (GET
// /api/memory/threads/{id}/messages, Mastra's message shape) drawn as the
// chat's turns: what was said, each question with its answer and who gave
// it, and each question still waiting as a form, answerable here. A
// waiting call is read from its run when the messages are read, never
// from a copy, so a reload shows it as it stands.

import { getJson } from './api.js';
import { ago, h, shortId, shown } from './dom.js';
import { pendingCallForm } from './questions.js';
import { assistantTurn, streamInto, userTurn } from './turns.js';
import { messageText, messagesPath } from './threads.js';

/** Messages read per request. */
const PER_PAGE = 1000;

/** Every message of the thread, oldest first. */
export async function threadMessages(threadId, resource) {
  const messages = [];
  for (let page = 0; ; page += 1) {
    const got = await getJson(messagesPath(threadId, resource, { page, perPage: PER_PAGE }));
    messages.push(...got.messages);
    if (!got.hasMore || got.messages.length === 0) return messages;
  }
}

function resultText(result) {
  const content = result?.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((c) => c.text ?? JSON.stringify(c)).join('\n');
  return JSON.stringify(content);
}

/** "answered via page by alice, 3 min ago". */
function resolutionText(resolution) {
  if (!resolution) return '';
  const who = resolution.by
    ? `by ${resolution.by}`
    : resolution.declared
      ? `${resolution.declared} (declared by the client, not verified)`
      : null;
  return [resolution.kind, `via ${resolution.via}`, who, ago(resolution.at)]
    .filter(Boolean)
    .join(' · ');
}

/**
 * The turns of `messages`, for agent `agent` ({id, name}). `forms` keeps
 * the forms of waiting calls by tool call id across redraws, so what a
 * person typed survives a change elsewhere. `thread` ({resourceId}) is the
 * conversation's, where an approval can stick.
 */
export function transcript(messages, agent, forms, thread) {
  const turns = [];
  for (const message of messages) {
    if (message.role === 'user') {
      turns.push(userTurn(messageText(message)));
      continue;
    }
    const turn = assistantTurn(agent.name || agent.id);
    const body = turn.querySelector('.turn-body');
    const meta = message.content?.metadata || {};
    const waiting = { ...(meta.suspendedTools || {}), ...(meta.pendingToolApprovals || {}) };
    let group = null;
    for (const part of message.content?.parts || []) {
      if (part.type === 'text' && part.text) {
        body.append(h('div', { class: 'text' }, shown(part.text)));
      } else if (part.type === 'tool-invocation') {
        const call = part.toolInvocation;
        // A tool call id is the model's: `constructor` is an id like any
        // other, never a property every object has.
        const open = Object.hasOwn(waiting, call.toolCallId) ? waiting[call.toolCallId] : undefined;
        if (open) {
          group ??= body.appendChild(h('div', { class: 'pending-group' }));
          group.append(formFor(open, call, agent, turn, forms, thread));
        } else {
          body.append(settledCall(call));
        }
      }
    }
    if (Object.keys(waiting).length) {
      const n = Object.keys(waiting).length;
      turn.querySelector('.turn-status').textContent = n === 1 ? 'Waiting for your answer' : `Waiting for ${n} answers`;
      const runId = Object.values(waiting)[0].runId;
      setRunLink(turn, runId);
    }
    turns.push(turn);
  }
  return turns;
}

function setRunLink(turn, runId) {
  const link = turn.querySelector('.run-link');
  link.href = `/runs/${encodeURIComponent(runId)}`;
  link.dataset.runId = runId;
  link.textContent = `Run ${shortId(runId)}`;
  link.hidden = false;
}

/** A call that no longer waits: the question and its answer, or the tool and its result. */
function settledCall(call) {
  const result = call.state === 'result' ? call.result : null;
  const how = resolutionText(call.resolution);
  if (call.builtInAskUser) {
    return h(
      'div',
      { class: 'qa' },
      h('p', { class: 'q' }, shown(call.args?.question || 'Question')),
      result ? h('p', { class: 'a' }, shown(resultText(result).replace(/^User answered: /, ''))) : h('p', { class: 'a' }, 'Not answered'),
      how ? h('p', { class: 'how' }, shown(how)) : null,
    );
  }
  return h(
    'div',
    { class: 'qa' },
    h('p', { class: 'tool-line' }, 'Called ', h('code', {}, shown(call.toolName))),
    result ? h('p', { class: result.isError ? 'a error' : 'a' }, shown(resultText(result))) : null,
    how ? h('p', { class: 'how' }, shown(how)) : null,
  );
}

/** The form of a waiting call: the one already shown, or a new one. */
function formFor(open, call, agent, turn, forms, thread) {
  const kept = forms.get(call.toolCallId);
  if (kept && !kept.classList.contains('answered')) return kept;
  const form = pendingCallForm({
    runId: open.runId,
    agentId: agent.id,
    call: {
      toolCallId: call.toolCallId,
      toolName: call.toolName,
      args: call.args,
      kind: open.type === 'approval' ? 'approval' : 'suspended',
      suspendPayload: open.suspendPayload,
    },
    thread,
    onContinue: (chunks) => streamInto(form.closest('.turn') || turn, chunks, agent.id, thread),
  });
  forms.set(call.toolCallId, form);
  return form;
}
