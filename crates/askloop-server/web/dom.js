// A tiny element builder: h('p', {class: 'x'}, 'text', child). Text is
// always set as text, never parsed as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = value;
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

let ids = 0;
/** A unique id for label/aria links. */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** "3 min ago", for a time in the past. */
export function ago(iso) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return '';
  const s = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (s < 45) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const hrs = Math.round(m / 60);
  if (hrs < 24) return `${hrs} h ago`;
  return new Date(then).toLocaleDateString();
}

/**
 * Makes the caller the view that owns `main`, and returns a check that
 * stays true until another view claims it. A view that reads the server
 * before it draws draws only while it still owns the page, so the slow
 * answer of an earlier navigation (or an earlier filter) never covers a
 * later one.
 */
export function claim(main) {
  const owner = {};
  main.owner = owner;
  return () => main.owner === owner;
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

export function statusBadge(status) {
  return h('span', { class: `status status-${status}` }, status);
}
