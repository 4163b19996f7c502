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

// What a person decides on is shown as it is. A model's, a tool's or a
// client's text may hold characters that change how it reads while staying
// unseen: a right-to-left override makes `docs/report_\u202Ehs.gpj` read
// `docs/report_jpg.sh`, isolates and zero-width characters hide where a
// word ends, tag characters carry hidden text. Each of them is shown
// marked, as its code point (<U+202E>), by the rule the server states for
// Slack, email and the terminal (crates/askloop/src/visible.rs), which a
// browser test holds this one to:
//
// - marked: control characters but tab, line feed and carriage return;
//   bidirectional embeddings, overrides, isolates and marks; Unicode's
//   default-ignorable code points; line and paragraph separators;
//   interlinear annotation characters;
// - except a joiner doing its job between two visible non-ASCII characters
//   (an emoji sequence, Persian or Indic writing), and one variation
//   selector right after a visible non-ASCII character or in a keycap.

const INVISIBLE =
  /[\0-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\xAD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u2028-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFFB\u{1BCA0}-\u{1BCA3}\u{1D173}-\u{1D17A}\u{E0000}-\u{E0FFF}]/u;
const SELECTOR = /[\uFE00-\uFE0F\u{E0100}-\u{E01EF}]/u;
const WHITE_SPACE = /\p{White_Space}/u;

/** Whether `c` (one code point) is one the rule marks, before its exceptions. */
export function isInvisible(c) {
  return INVISIBLE.test(c);
}

/** A character that shows as itself: not ASCII, not white space, not marked. */
function visibleNonAscii(c) {
  return c !== undefined && c.codePointAt(0) > 0x7f && !WHITE_SPACE.test(c) && !INVISIBLE.test(c);
}

/** A joiner between two visible characters, or one selector on the character it varies. */
function doesItsJob(before, beforeMarked, c, after) {
  if (before === undefined || beforeMarked) return false;
  if (c === '\u200C' || c === '\u200D') {
    return (visibleNonAscii(before) || SELECTOR.test(before)) && visibleNonAscii(after);
  }
  if (SELECTOR.test(c)) return visibleNonAscii(before) || (/^[0-9#*]$/.test(before) && after === '\u20E3');
  return false;
}

/** `U+202E`: how a marked character is named. */
export function codePoint(c) {
  return `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
}

/**
 * `text` in pieces: strings shown as they are, and `{ marked: c }` for
 * each character the rule marks.
 */
export function pieces(text) {
  const chars = Array.from(String(text ?? ''));
  const out = [];
  let run = '';
  let beforeMarked = false;
  chars.forEach((c, i) => {
    if (INVISIBLE.test(c) && !doesItsJob(chars[i - 1], beforeMarked, c, chars[i + 1])) {
      if (run) out.push(run);
      run = '';
      out.push({ marked: c });
      beforeMarked = true;
    } else {
      run += c;
      beforeMarked = false;
    }
  });
  if (run) out.push(run);
  return out;
}

/** How many characters of `text` the rule marks. */
export function markedCount(text) {
  return pieces(text).filter((p) => typeof p !== 'string').length;
}

/** `text` with each marked character written `<U+202E>`: for attributes and options, which hold text only. */
export function markedText(text) {
  return pieces(text)
    .map((p) => (typeof p === 'string' ? p : `<${codePoint(p.marked)}>`))
    .join('');
}

/** `text` as nodes to append: its marked characters as styled `<U+202E>` badges. */
export function shown(text) {
  return pieces(text).map((p) =>
    typeof p === 'string'
      ? p
      : h('span', { class: 'invisible-char', title: `An invisible character, ${codePoint(p.marked)}` }, `<${codePoint(p.marked)}>`),
  );
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

export function statusBadge(status) {
  return h('span', { class: `status status-${status}` }, status);
}
