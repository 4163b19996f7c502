// A waiting tool call as a form a person answers: an ask_user question
// (free text, single-select, multi-select), an MCP server's form
// (elicitation.js), or a tool call to approve or decline. Used by the
// Chat, the Inbox and the Run view alike.
//
// A refused answer (e.g. 422: not one of the options) shows the server's
// reason beside the form, which keeps what was typed or chosen.

import { agentPath, postStream } from './api.js';
import { h, uid } from './dom.js';
import { answered, errorBox, setBusy, showError } from './forms.js';
import { elicitationForm, isElicitation } from './elicitation.js';

/**
 * @param {{runId: string, agentId: string, call: object, onContinue: (chunks: AsyncIterable<object>, what: string) => void}} options
 */
export function pendingCallForm({ runId, agentId, call, onContinue }) {
  if (call.kind === 'approval' || call.requiresApproval) return approvalForm({ runId, agentId, call, onContinue });
  if (isElicitation(call)) return elicitationForm({ runId, agentId, call, onContinue });
  return questionForm({ runId, agentId, call, onContinue });
}

function questionForm({ runId, agentId, call, onContinue }) {
  const payload = call.suspendPayload || call.args || {};
  const question = payload.question || `${call.toolName} is waiting for input`;
  const options = Array.isArray(payload.options) ? payload.options : null;
  const multi = payload.selectionMode === 'multi_select';
  const error = errorBox();
  const form = h('form', {
    class: 'pending question',
    'data-tool-call-id': call.toolCallId,
    'aria-label': question,
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
            h('span', { class: 'option-label' }, option.label),
            option.description ? h('span', { class: 'option-desc', id: descId }, option.description) : null,
          ),
        ),
      );
    }
    form.append(
      h(
        'fieldset',
        {},
        h('legend', {}, question),
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
    form.append(h('label', { for: id, class: 'question-text' }, question), box);
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
      const chunks = await postStream(agentPath(agentId, 'resume-stream'), {
        runId,
        toolCallId: call.toolCallId,
        resumeData: read(),
      });
      const value = read();
      answered(form, `Answered: ${Array.isArray(value) ? value.join(', ') : value}`);
      onContinue?.(chunks, 'answer');
    } catch (err) {
      setBusy(form, false);
      showError(error, err);
    }
  });
  return form;
}

function approvalForm({ runId, agentId, call, onContinue }) {
  const error = errorBox();
  const reasonId = uid('reason');
  const form = h(
    'form',
    { class: 'pending approval', 'data-tool-call-id': call.toolCallId, 'aria-label': `Approve ${call.toolName}?` },
    h(
      'p',
      { class: 'approval-title' },
      h('span', { class: 'tag' }, 'Approval'),
      ' ',
      h('code', { class: 'tool-name' }, call.toolName),
      ' wants to run with:',
    ),
    h('pre', { class: 'args', tabindex: 0, 'aria-label': `Arguments of ${call.toolName}` }, JSON.stringify(call.args, null, 2)),
    h('label', { for: reasonId }, 'Reason (optional)'),
    h('input', { id: reasonId, type: 'text', autocomplete: 'off' }),
    error,
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', class: 'primary', value: 'approve' }, 'Approve'),
      h('button', { type: 'submit', class: 'danger', value: 'decline' }, 'Decline'),
    ),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const approve = event.submitter?.value !== 'decline';
    const reason = form.querySelector('input').value.trim();
    error.hidden = true;
    setBusy(form, true);
    try {
      const body = { runId, toolCallId: call.toolCallId };
      // A reason goes with a decline; an approval takes none.
      if (reason && !approve) body.reason = reason;
      const chunks = await postStream(agentPath(agentId, approve ? 'approve-tool-call' : 'decline-tool-call'), body);
      answered(form, approve ? 'Approved' : `Declined${reason ? `: ${reason}` : ''}`);
      onContinue?.(chunks, approve ? 'approve' : 'decline');
    } catch (err) {
      setBusy(form, false);
      showError(error, err);
    }
  });
  return form;
}
