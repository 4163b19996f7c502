// An MCP server's question (an elicitation, `kind: "mcp-elicitation"`) as
// a form: one field per property of its requested schema, in MCP's flat
// subset: text (with the email, uri and date formats), integer and number
// (with their bounds), yes/no, one of a list (enum, or oneOf with titles,
// or the older enumNames), and several of a list (an array of those).
// Send answers `{"action": "accept", "content": {...}}`; Decline and Cancel
// answer with that action alone. The server checks the content against the
// schema again; a refusal shows beside the form, which keeps what was filled in.
//
// The server's words (its message, titles, descriptions, choices) are shown
// with their invisible characters marked (`shown` in dom.js). Field names
// are the server's too: `__proto__` or `constructor` is a field like any
// other, so the answer is built from [name, value] pairs, never by
// assigning to a plain object.

import { h, markedText, shown, uid } from './dom.js';
import { answered, errorBox, setBusy, showError } from './forms.js';

export function isElicitation(call) {
  const payload = call.suspendPayload;
  return payload?.kind === 'mcp-elicitation' && typeof payload.requestedSchema === 'object';
}

/** The choices of a one-of-a-list schema, as [{value, title}], or null. */
function choices(schema) {
  if (!schema || typeof schema !== 'object') return null;
  if (Array.isArray(schema.oneOf ?? schema.anyOf)) {
    return (schema.oneOf ?? schema.anyOf)
      .filter((c) => c && 'const' in c)
      .map((c) => ({ value: String(c.const), title: c.title ?? String(c.const) }));
  }
  if (Array.isArray(schema.enum)) {
    const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
    return schema.enum.map((v, i) => ({ value: String(v), title: names[i] ?? String(v) }));
  }
  return null;
}

const INPUT_TYPES = new Map([
  ['email', 'email'],
  ['uri', 'url'],
  ['date', 'date'],
  ['date-time', 'datetime-local'],
]);

/** One field: its element and how to read its value (undefined: left empty). */
function field(key, schema, required) {
  const id = uid('field');
  const title = shown(schema.title || key);
  const descId = schema.description ? uid('desc') : undefined;
  const label = h('label', { for: id, class: 'field-label' }, title, required ? h('span', { class: 'required', 'aria-hidden': 'true' }, ' *') : null);
  const desc = schema.description ? h('span', { class: 'field-desc', id: descId }, shown(schema.description)) : null;
  const many = schema.type === 'array' ? choices(schema.items) : null;
  const one = schema.type !== 'array' ? choices(schema) : null;

  if (many) {
    const chosen = new Set(Array.isArray(schema.default) ? schema.default.map(String) : []);
    const boxes = many.map((c) => {
      const boxId = uid('opt');
      const input = h('input', { type: 'checkbox', id: boxId, value: c.value, checked: chosen.has(c.value) });
      return { input, el: h('div', { class: 'option' }, input, h('label', { for: boxId }, h('span', { class: 'option-label' }, shown(c.title)))) };
    });
    const el = h(
      'fieldset',
      { class: 'field', 'aria-describedby': descId },
      h('legend', { class: 'field-label' }, shown(schema.title || key), required ? h('span', { class: 'required', 'aria-hidden': 'true' }, ' *') : null),
      desc,
      h('div', { class: 'options' }, boxes.map((b) => b.el)),
    );
    return { el, read: () => boxes.filter((b) => b.input.checked).map((b) => b.input.value) };
  }
  if (one) {
    const select = h(
      'select',
      { id, required, 'aria-describedby': descId },
      required && schema.default !== undefined ? null : h('option', { value: '' }, '—'),
      one.map((c) => h('option', { value: c.value, selected: String(schema.default) === c.value }, markedText(c.title))),
    );
    return { el: h('div', { class: 'field' }, label, desc, select), read: () => select.value || undefined };
  }
  if (schema.type === 'boolean') {
    const box = h('input', { type: 'checkbox', id, checked: schema.default === true, 'aria-describedby': descId });
    const el = h('div', { class: 'field field-check' }, box, h('label', { for: id, class: 'field-label' }, shown(schema.title || key)), desc);
    return { el, read: () => box.checked };
  }
  if (schema.type === 'integer' || schema.type === 'number') {
    const input = h('input', {
      type: 'number',
      id,
      required,
      min: schema.minimum,
      max: schema.maximum,
      step: schema.type === 'integer' ? 1 : 'any',
      value: schema.default,
      'aria-describedby': descId,
    });
    const read = () => (input.value.trim() === '' ? undefined : Number(input.value));
    return { el: h('div', { class: 'field' }, label, desc, input), read };
  }
  const input = h('input', {
    type: INPUT_TYPES.get(schema.format) ?? 'text',
    id,
    required,
    minlength: schema.minLength,
    maxlength: schema.maxLength,
    value: schema.default,
    autocomplete: 'off',
    'aria-describedby': descId,
  });
  return { el: h('div', { class: 'field' }, label, desc, input), read: () => (input.value === '' ? undefined : input.value) };
}

export function elicitationForm({ runId, call, onContinue, send }) {
  const payload = call.suspendPayload;
  const schema = payload.requestedSchema || {};
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(schema.properties || {}).map(([key, s]) => ({ key, ...field(key, s || {}, required.has(key)) }));
  const error = errorBox();
  const message = payload.message || `${call.toolName} asks for details`;
  const form = h(
    'form',
    { class: 'pending question elicitation', 'data-tool-call-id': call.toolCallId, 'aria-label': markedText(message), novalidate: true },
    h('p', { class: 'approval-title' }, h('span', { class: 'tag' }, 'Form'), ' ', h('code', { class: 'tool-name' }, shown(`${payload.server} · ${payload.tool}`))),
    h('p', { class: 'question-text' }, shown(message)),
    h('div', { class: 'fields' }, fields.map((f) => f.el)),
    error,
    h(
      'div',
      { class: 'actions' },
      h('button', { type: 'submit', class: 'primary', value: 'accept' }, 'Send'),
      h('button', { type: 'submit', value: 'decline' }, 'Decline'),
      h('button', { type: 'submit', class: 'danger', value: 'cancel' }, 'Cancel'),
    ),
  );

  // Object.fromEntries defines each field as the object's own property,
  // which `out[key] = value` would not for `__proto__`.
  const content = () =>
    Object.fromEntries(
      fields
        .map((f) => [f.key, f.read()])
        .filter(([key, value]) => value !== undefined && !(Array.isArray(value) && value.length === 0 && !required.has(key))),
    );

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const action = event.submitter?.value ?? 'accept';
    const resumeData = action === 'accept' ? { action, content: content() } : { action };
    error.hidden = true;
    setBusy(form, true);
    try {
      const chunks = await send('resume-stream', { runId, toolCallId: call.toolCallId, resumeData });
      answered(form, action === 'accept' ? 'Sent' : action === 'decline' ? 'Declined' : 'Cancelled');
      onContinue?.(chunks, action === 'accept' ? 'answer' : 'decline');
    } catch (err) {
      setBusy(form, false);
      showError(error, err);
    }
  });
  return form;
}
