// Every call to the server's API: the token (kept for this browser tab in
// sessionStorage), JSON errors as ApiError, and streams read with fetch
// (EventSource cannot send an Authorization header).

const TOKEN_KEY = 'askloop.token';

export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `the server answered ${status}`);
    this.status = status;
    this.code = error?.code || 'error';
    this.accepted = error?.accepted;
  }
}

/** Raised on 401; the page then asks for the token. */
export class Unauthorized extends ApiError {}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

// Decisions made here are stored as made through the page.
function headers(extra = {}) {
  const all = { 'X-Askloop-Interface': 'page', ...extra };
  const t = token();
  if (t) all.Authorization = `Bearer ${t}`;
  return all;
}

async function fail(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.status === 401) {
    const err = new Unauthorized(401, body?.error);
    for (const listener of unauthorizedListeners) listener(err);
    return err;
  }
  return new ApiError(response.status, body?.error);
}

export async function getJson(path, { signal } = {}) {
  const response = await fetch(path, { headers: headers({ Accept: 'application/json' }), signal });
  if (!response.ok) throw await fail(response);
  return response.json();
}

export async function postJson(path, body) {
  return sendJson('POST', path, body);
}

/** A request with a JSON body (or none) whose answer is JSON. */
export async function sendJson(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: headers({ 'Content-Type': 'application/json', Accept: 'application/json' }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await fail(response);
  return response.json();
}

/** Lines of an SSE body, as {event, data} frames. */
async function* frames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) yield { event, data: data.join('\n') };
    }
  }
}

/**
 * POSTs to one of the agent routes that answer with a stream of chunks
 * (stream, resume-stream, approve-tool-call, decline-tool-call). Throws
 * ApiError before the stream starts (e.g. 422 with the reason); otherwise
 * returns an async iterator of chunks.
 */
export async function postStream(path, body) {
  const response = await fetch(path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }),
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await fail(response);
  return (async function* chunks() {
    for await (const frame of frames(response)) {
      if (frame.data === '[DONE]') return;
      try {
        yield JSON.parse(frame.data);
      } catch {
        // A frame that is not JSON is not a chunk; skip it.
      }
    }
  })();
}

/** GET /api/events: run changes, as {event, data} frames, until aborted. */
export async function runEvents(signal) {
  const response = await fetch('/api/events', { headers: headers({ Accept: 'text/event-stream' }), signal });
  if (!response.ok) throw await fail(response);
  return frames(response);
}

export const agentPath = (agentId, action) => `/api/agents/${encodeURIComponent(agentId)}/${action}`;

/**
 * Who the server takes this page for (GET /api/me): `resource` is where
 * the page keeps its conversations (the token's name, or the server's
 * shared `page` when any resource may be named).
 */
let me = null;
export async function whoAmI() {
  me ??= getJson('/api/me').catch((err) => {
    me = null;
    throw err;
  });
  return me;
}

/** Forgets who the page acts as (a new token was entered). */
export function forgetMe() {
  me = null;
}
