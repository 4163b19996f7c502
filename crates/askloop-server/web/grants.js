// Approvals that stick (grants): the calls a person allowed once for a
// whole chat or resource, which then run without asking. Listed live
// (GET /api/grants, newest first), each revocable (POST
// /api/grants/{id}/revoke): the next such call asks again.

import { getJson, postJson } from './api.js';
import { ago, h, uid } from './dom.js';
import { errorBox, showError } from './forms.js';

/** The live grants matching `query` ({threadId, resourceId, agentId}; empty ones left out). */
async function liveGrants(query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value) params.set(key, value);
  return (await getJson(`/api/grants?${params}`)).grants;
}

/** One grant as a row: what, how far, who and when, and a Revoke button. */
function grantRow(grant, here, redraw, error) {
  const revoke = h('button', { type: 'button', class: 'quiet danger', 'aria-label': `Revoke always allowing ${grant.tool}` }, 'Revoke');
  revoke.addEventListener('click', async () => {
    revoke.disabled = true;
    error.hidden = true;
    try {
      await postJson(`/api/grants/${encodeURIComponent(grant.id)}/revoke`, {});
    } catch (err) {
      showError(error, err);
    }
    await redraw();
  });
  const where =
    grant.scope !== 'thread'
      ? `for everything of ${grant.resourceId}`
      : grant.threadId === here
        ? 'in this chat'
        : ['in ', h('a', { href: `/threads/${encodeURIComponent(grant.threadId)}`, 'data-route': true }, 'one conversation')];
  return h(
    'li',
    { class: 'grant', 'data-grant-id': grant.id },
    h(
      'div',
      { class: 'grant-what' },
      h('code', { class: 'tool-name' }, grant.tool),
      ' ',
      h('span', { class: 'grant-scope' }, where),
      grant.args ? h('span', { class: 'grant-args' }, ' with the same arguments') : null,
    ),
    h(
      'div',
      { class: 'grant-meta' },
      `by ${grant.grantedBy?.by || grant.grantedBy?.via || 'someone'} `,
      h('time', { datetime: grant.grantedAt, title: grant.grantedAt }, ago(grant.grantedAt)),
      grant.expiresAt ? [' · until ', h('time', { datetime: grant.expiresAt, title: grant.expiresAt }, new Date(grant.expiresAt).toLocaleString())] : null,
    ),
    revoke,
  );
}

/**
 * A section listing the live grants matching `query()` (read at each draw:
 * a new chat has its thread only after its first message), drawn again by
 * `draw()` (after a run, or a change elsewhere). Hidden while there are none
 * unless `empty` (what to say then) is given. `here()` is the thread on
 * screen, whose grants say "in this chat".
 */
export function grantList({ title, query, here = () => null, empty = null }) {
  const list = h('ul', { class: 'grant-list' });
  const error = errorBox();
  const titleId = uid('grants');
  const section = h('section', { class: 'grants', 'aria-labelledby': titleId, hidden: !empty }, h('h2', { id: titleId }, title), list, error);
  const note = empty ? h('p', { class: 'hint' }, empty) : null;
  if (note) section.append(note);
  async function draw() {
    let grants;
    try {
      grants = await liveGrants(query());
    } catch (err) {
      showError(error, err);
      return;
    }
    list.replaceChildren(...grants.map((g) => grantRow(g, here(), draw, error)));
    if (note) note.hidden = grants.length > 0;
    section.hidden = !empty && grants.length === 0;
  }
  return { section, draw };
}
