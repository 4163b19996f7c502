// The page of an answer link (`/links/{token}`): one question, answered as
// the person the link was made out to, with no token and no account.
//
// Loading the page only reads the question (a mail scanner that follows
// the link answers nothing). The answer is a POST to the link, as JSON,
// with the form token the question came with; the server takes the link
// once, so a second answer through it is refused, and says so.

import { ApiError } from './api.js';
import { h, shown } from './dom.js';
import { pendingCallForm } from './questions.js';

const main = document.getElementById('main');
const token = decodeURIComponent(location.pathname.split('/')[2] || '');
const linkPath = `/links/${encodeURIComponent(token)}`;

// What a person reads when a link no longer answers; the server's own
// words (with the time, and who answered a closed question) follow.
const CLOSED = {
  link_used: ['This link was already used', 'An answer was sent through it already: a link answers once.'],
  link_revoked: ['This link was revoked', 'Whoever sent it took it back.'],
  link_expired: ['This link has expired', 'It worked only for a limited time.'],
  question_closed: ['This question is closed', 'It no longer waits for an answer.'],
  link_invalid: ['This link is not valid', 'It may have been cut short when it was copied.'],
  links_off: ['Answer links are off', 'This server does not answer through links.'],
};

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

/** "in 2 h", "in 5 min", "in 3 days", for a time ahead. */
function until(iso) {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return '';
  const minutes = Math.round((at - Date.now()) / 60000);
  if (minutes < 1) return 'in less than a minute';
  if (minutes < 60) return `in ${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `in ${hours} h`;
  return `in ${Math.round(hours / 24)} days`;
}

function panel(kind, title, ...body) {
  return h('section', { class: `link-card link-${kind}`, 'aria-labelledby': 'link-title' },
    h('h1', { id: 'link-title', tabindex: -1 }, title),
    ...body);
}

function showClosed(error) {
  const [title, reason] = (Object.hasOwn(CLOSED, error?.code ?? '') && CLOSED[error.code]) || [
    'This link cannot be used',
    'The server could not show its question.',
  ];
  main.replaceChildren(
    panel('closed', title,
      h('p', { class: 'link-reason', role: 'alert' }, reason),
      error?.message ? h('p', { class: 'link-detail' }, 'The server says: ', shown(error.message), '.') : null,
      h('p', { class: 'link-meta' }, 'Nothing was changed. If the question still needs you, ask for a new link.')),
  );
  document.getElementById('link-title').focus();
}

/** The link's POST, in place of the agent's routes. */
function sender(question) {
  return async (route, body) => {
    const sent = { formToken: question.formToken };
    if (route === 'approve-tool-call') sent.approved = true;
    else if (route === 'decline-tool-call') {
      sent.approved = false;
      if (body.reason) sent.reason = body.reason;
    } else sent.resumeData = body.resumeData;
    const response = await fetch(linkPath, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(sent),
    });
    const answer = await readJson(response);
    if (!response.ok) {
      const err = new ApiError(response.status, answer?.error);
      // The link itself no longer answers: say so instead of the form.
      if (response.status === 410 || err.code === 'link_invalid') showClosed(answer?.error);
      throw err;
    }
    document.getElementById('link-done').hidden = false;
    document.getElementById('link-meta').hidden = true;
    return null;
  };
}

function render(question) {
  const form = pendingCallForm({
    runId: question.runId,
    agentId: question.agentId,
    call: question.call,
    send: sender(question),
  });
  const expires = new Date(question.expiresAt);
  main.replaceChildren(
    panel('open', question.call.kind === 'approval' ? 'Your approval is needed' : 'A question for you',
      h('p', { class: 'link-from' },
        h('span', { class: 'agent' }, shown(question.agentName)),
        question.call.kind === 'approval' ? ' asks before it goes on.' : ' is waiting for your answer.'),
      form,
      h('p', { class: 'link-meta', id: 'link-meta' },
        'You answer as ', h('strong', {}, shown(question.recipient)),
        question.madeBy ? [', on a link made by ', h('strong', {}, shown(question.madeBy))] : null,
        `. This link works once, until ${expires.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' })} (${until(question.expiresAt)}).`),
      h('div', { class: 'link-done', id: 'link-done', role: 'status', hidden: true },
        h('strong', {}, 'Thank you, ', shown(question.recipient), '.'),
        ' Your answer was sent and the agent goes on without you. You can close this page.')),
  );
  main.querySelector('textarea, input')?.focus();
}

async function load() {
  if (!token) return showClosed({ code: 'link_invalid', message: 'This address holds no link.' });
  try {
    const response = await fetch(`${linkPath}/question`, { headers: { Accept: 'application/json' } });
    const body = await readJson(response);
    if (!response.ok) return showClosed(body?.error);
    render(body);
  } catch (err) {
    showClosed({ code: 'error', message: `The server could not be reached (${err.message}).` });
  }
}

load();
