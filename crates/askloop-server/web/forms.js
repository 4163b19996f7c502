// What every answer form shares: the box for a refused answer's reason,
// the busy state while a request is out, and the note once it is answered.
// A reason may quote what was sent: its invisible characters are marked.

import { h, shown } from './dom.js';

export function errorBox() {
  return h('p', { class: 'form-error', role: 'alert', hidden: true });
}

export function showError(box, err) {
  box.textContent = '';
  box.append(h('strong', {}, 'Not accepted: '), shown(err.message));
  if (err.accepted?.length) box.append(h('span', { class: 'accepted' }, ' Accepted: ', shown(err.accepted.join(', ')), '.'));
  box.hidden = false;
}

export function setBusy(form, busy) {
  for (const el of form.querySelectorAll('button, input, textarea, select')) el.disabled = busy;
  form.setAttribute('aria-busy', busy ? 'true' : 'false');
}

/** `text`: a string, or nodes and strings (see `h`). */
export function answered(form, text) {
  form.classList.add('answered');
  setBusy(form, true);
  const note = h('p', { class: 'answered-note', role: 'status' }, text);
  form.append(note);
  return note;
}
