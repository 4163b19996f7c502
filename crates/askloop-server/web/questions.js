// A waiting tool call as a form a person answers: an ask_user question
// (free text, single-select, multi-select), an MCP server's form
// (elicitation.js), or a tool call to approve or decline. Used by the
// Chat, the Inbox and the Run view alike.
//
// A refused answer (e.g. 422: not one of the options) shows the server's
// reason beside the form, which keeps what was typed or chosen.
//
// By default a form sends its decision to the agent's routes and hands the
// rest of the run's stream to `onContinue`. The answer link's page passes
// `send(route, body)` instead, which posts to the link.
//
// The question, its labels and descriptions, the tool's name and its
// arguments are shown with their bidirectional controls and invisible
// characters marked (`shown` in dom.js): what the person approves reads as
// it will run.

import { agentPath, postStream } from './api.js';
import { h, isInvisible, markedCount, markedText, shown, uid } from './dom.js';
import { answered, errorBox, setBusy, showError } from './forms.js';
import { elicitationForm, isElicitation } from './elicitation.js';

/**
 * `thread` is where the run is ({resourceId}), when it is on a thread:
 * only then can an approval stick (always allow in this chat, or for the
 * whole resource). `send` replaces the agent routes (the answer link page
 * posts to its link instead).
 *
 * @param {{runId: string, agentId: string, call: object, thread?: {resourceId: string} | null, onContinue?: (chunks: AsyncIterable<object>, what: string) => void, send?: (route: string, body: object) => Promise<any>}} options
 */
export function pendingCallForm(options) {
  const { agentId, call } = options;
  const send = options.send || ((route, body) => postStream(agentPath(agentId, route), body));
  const all = { ...options, thread: options.thread || null, send, editable: !options.send };
  if (call.kind === 'approval' || call.requiresApproval) return approvalForm(all);
  if (isElicitation(call)) return elicitationForm(all);
  return questionForm(all);
}

function questionForm({ runId, call, onContinue, send }) {
  const payload = call.suspendPayload || call.args || {};
  const question = payload.question || `${call.toolName} is waiting for input`;
  const options = Array.isArray(payload.options) ? payload.options : null;
  const multi = payload.selectionMode === 'multi_select';
  const error = errorBox();
  const form = h('form', {
    class: 'pending question',
    'data-tool-call-id': call.toolCallId,
    'aria-label': markedText(question),
    novalidate: true,
  });
  const name = uid('answer');

  let read;
  if (options) {
    const list = h('div', { class: 'options' });
    for (const option of options) {
      const id = uid('opt');
      const descId = option.description ? uid('desc') : undefined;
      list.append(
        h(
          'div',
          { class: 'option' },
          h('input', {
            type: multi ? 'checkbox' : 'radio',
            id,
            name,
            value: option.label,
            'aria-describedby': descId,
          }),
          h(
            'label',
            { for: id },
            h('span', { class: 'option-label' }, shown(option.label)),
            option.description ? h('span', { class: 'option-desc', id: descId }, shown(option.description)) : null,
          ),
        ),
      );
    }
    form.append(
      h(
        'fieldset',
        {},
        h('legend', {}, shown(question)),
        h('p', { class: 'hint' }, multi ? 'Choose one or more.' : 'Choose one.'),
        list,
      ),
    );
    read = () => {
      const chosen = [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value);
      return multi ? chosen : chosen[0] ?? null;
    };
  } else {
    const id = uid('text');
    const box = h('textarea', { id, name, rows: 2, required: true, autocomplete: 'off' });
    form.append(h('label', { for: id, class: 'question-text' }, shown(question)), box);
    box.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.metaKey || event.ctrlKey)) form.requestSubmit();
    });
    read = () => box.value;
  }
  form.append(error, h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Send answer')));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    setBusy(form, true);
    try {
      const chunks = await send('resume-stream', {
        runId,
        toolCallId: call.toolCallId,
        resumeData: read(),
      });
      const value = read();
      answered(form, ['Answered: ', shown(Array.isArray(value) ? value.join(', ') : value)]);
      onContinue?.(chunks, 'answer');
    } catch (err) {
      setBusy(form, false);
      showError(error, err);
    }
  });
  return form;
}

/**
 * Arguments as JSON to edit: each character the page marks written as a
 * `\u` escape, which reads back as the same value but shows what it is.
 */
function editableJson(value) {
  const text = JSON.stringify(value, null, 2) ?? 'null';
  return Array.from(text, (c) =>
    isInvisible(c)
      ? Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join('')
      : c,
  ).join('');
}

function approvalForm({ runId, call, thread, onContinue, send, editable }) {
  const error = errorBox();
  const reasonId = uid('reason');
  const argsId = uid('args');
  const json = JSON.stringify(call.args, null, 2) ?? 'null';
  const tool = markedText(call.toolName);
  // The arguments, editable before approving: the call then runs with the
  // edited ones, checked against the tool's input schema by the server (a
  // refusal shows beside the form, which keeps the edit).
  const editor = h('textarea', {
    id: argsId,
    class: 'args-editor',
    rows: Math.min(12, json.split('\n').length + 1),
    spellcheck: 'false',
    autocomplete: 'off',
  });
  editor.value = editableJson(call.args);
  const editing = h(
    'div',
    { class: 'args-edit', hidden: true },
    h('label', { for: argsId }, 'Arguments of ', shown(call.toolName), ' (JSON)'),
    editor,
  );
  const args = h('pre', { class: 'args', tabindex: 0, 'aria-label': `Arguments of ${tool}` }, shown(json));
  // Said in words too: a marked character may be what the call is about.
  const hidden = markedCount(call.toolName) + markedCount(json);
  const warning = hidden
    ? h(
        'p',
        { class: 'hidden-warning', role: 'note' },
        hidden === 1
          ? 'One character of this call does not show on screen; it is marked above as its code point.'
          : `${hidden} characters of this call do not show on screen; each is marked above as its code point.`,
      )
    : null;
  // Arguments are edited only where the person acts with their own token:
  // an answer link approves or declines the call as it stands.
  const editButton = editable ? h('button', { type: 'button', class: 'quiet' }, 'Edit arguments') : null;
  editButton?.addEventListener('click', () => {
    editing.hidden = false;
    args.hidden = true;
    if (warning) warning.hidden = true;
    editButton.hidden = true;
    editor.focus();
  });
  const form = h(
    'form',
    { class: 'pending approval', 'data-tool-call-id': call.toolCallId, 'aria-label': `Approve ${tool}?` },
    h(
      'p',
      { class: 'approval-title' },
      h('span', { class: 'tag' }, 'Approval'),
      ' ',
      h('code', { class: 'tool-name' }, shown(call.toolName)),
      ' wants to run with:',
    ),
    args,
    warning,
    editing,
    h('label', { for: reasonId }, 'Reason (optional)'),
    h('input', { id: reasonId, type: 'text', autocomplete: 'off' }),
    error,
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', class: 'primary', value: 'approve' }, 'Approve'),
      thread ? h('button', { type: 'submit', value: 'thread', title: `Approve, and run ${tool} without asking for the rest of this chat` }, 'Always allow in this chat') : null,
      h('button', { type: 'submit', class: 'danger', value: 'decline' }, 'Decline'),
      editButton,
    ),
    thread
      ? h(
          'p',
          { class: 'hint always-wider' },
          h('button', { type: 'submit', class: 'link', value: 'resource' }, 'Always allow for everything of ', shown(thread.resourceId)),
        )
      : null,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const choice = event.submitter?.value || 'approve';
    const approve = choice !== 'decline';
    // An approval that sticks runs the call as the model asked it.
    const always = choice === 'thread' || choice === 'resource' ? choice : null;
    const reason = form.querySelector(`#${reasonId}`).value.trim();
    error.hidden = true;
    const body = { runId, toolCallId: call.toolCallId };
    let edited = false;
    if (always) body.always = always;
    else if (approve && !editing.hidden) {
      let value;
      try {
        value = JSON.parse(editor.value);
      } catch (err) {
        showError(error, new Error(`the arguments are not valid JSON (${err.message})`));
        return;
      }
      if (JSON.stringify(value) !== JSON.stringify(call.args)) {
        body.args = value;
        edited = true;
      }
    }
    // A reason goes with a decline; an approval takes none.
    if (reason && !approve) body.reason = reason;
    setBusy(form, true);
    try {
      const chunks = await send(approve ? 'approve-tool-call' : 'decline-tool-call', body);
      const note = always
        ? always === 'thread'
          ? ['Approved; ', shown(call.toolName), ' runs without asking in this chat']
          : ['Approved; ', shown(call.toolName), ' runs without asking for ', shown(thread.resourceId)]
        : approve
          ? edited
            ? 'Approved with edited arguments'
            : 'Approved'
          : ['Declined', reason ? [': ', shown(reason)] : ''];
      answered(form, note);
      onContinue?.(chunks, approve ? 'approve' : 'decline');
    } catch (err) {
      setBusy(form, false);
      showError(error, err);
    }
  });
  return form;
}
