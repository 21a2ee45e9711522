// berth web console: a small application over the /v1 API, no build step.
// Rules it keeps (docs/console.md): everything that comes from the API is
// put on the page as text (textContent, text nodes, attribute values set
// through the DOM), never parsed as HTML; the credential lives in this
// tab's sessionStorage and travels only in the Authorization header (on
// WebSockets, which cannot carry one, in the berth.bearer. subprotocol),
// never in a URL.
'use strict';
(() => {
  // xterm.js writes its theme into <style> elements; the page's CSP lets
  // only those carrying this answer's nonce apply.
  const NONCE = document.currentScript ? document.currentScript.nonce : '';
  const createElement = Document.prototype.createElement;
  Document.prototype.createElement = function (tag, opts) {
    const el = createElement.call(this, tag, opts);
    if (NONCE && String(tag).toLowerCase() === 'style') el.nonce = NONCE;
    return el;
  };

  const KEY = 'berth.key';
  const SESSION = 'berth.session'; // key id of a key from a sign-in code
  const $ = (sel) => document.querySelector(sel);
  const main = $('#main');

  // h builds an element: attrs are set as properties or attributes, never
  // as markup; string children become text nodes.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k in el && k !== 'list') el[k] = v;
      else el.setAttribute(k, v);
    }
    for (const c of kids.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const svgEl = (tag, attrs) => {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    return el;
  };

  // ---- formatting ----
  function ago(t) {
    if (!t) return '';
    const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
    if (s < 60) return Math.floor(s) + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
    return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
  }
  function bytes(n) {
    if (n === undefined || n === null) return '';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
  }
  const when = (t) => (t ? new Date(t).toLocaleString() : '');
  const stateBadge = (s) => h('span', { class: 'state ' + s, text: s });
  function storageOf(sb) {
    const parts = [];
    if (sb.disk && sb.disk.used_bytes !== undefined) parts.push(bytes(sb.disk.used_bytes) + (sb.disk.cap_bytes ? ' / ' + bytes(sb.disk.cap_bytes) : ''));
    if (sb.storage && sb.storage.used_bytes !== undefined) parts.push('vol ' + bytes(sb.storage.used_bytes));
    return parts.join(', ');
  }

  // ---- API ----
  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }
  const key = () => sessionStorage.getItem(KEY) || '';
  async function api(method, path, opts = {}) {
    const headers = Object.assign({ Authorization: 'Bearer ' + key() }, opts.headers || {});
    let body = opts.body;
    if (body !== undefined && !(body instanceof Blob) && typeof body !== 'string') {
      body = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    const r = await fetch(path, { method, headers, body, cache: 'no-store', signal: opts.signal });
    if (!r.ok) {
      let code = 'http_' + r.status, msg = r.statusText;
      try { const e = (await r.json()).error; code = e.code; msg = e.message; } catch (_) { /* not JSON */ }
      if (r.status === 401 && !opts.noSignout) signOut(msg);
      throw new APIError(r.status, code, msg);
    }
    if (opts.raw) return r;
    const ct = r.headers.get('Content-Type') || '';
    return ct.includes('json') ? r.json() : r.text();
  }
  const sbPath = (id) => '/v1/sandboxes/' + encodeURIComponent(id);
  const errorBox = (e) => h('p', { class: 'error', text: e && e.message ? e.message : String(e) });

  // sse reads a Server-Sent Events stream with fetch (EventSource cannot
  // send the Authorization header), resuming from the last event id after
  // a cut. onEvent gets each frame's parsed data.
  async function sse(path, onEvent, signal, lastID, onState) {
    let last = lastID ? String(lastID) : '';
    const state = (up) => { if (onState) onState(up); };
    while (!signal.aborted) {
      try {
        const headers = { Accept: 'text/event-stream', Authorization: 'Bearer ' + key() };
        if (last) headers['Last-Event-ID'] = last;
        const r = await fetch(path, { headers, signal, cache: 'no-store' });
        if (r.status === 401) { signOut('the session ended'); return; }
        if (!r.ok || !(r.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
          throw new Error('event stream: HTTP ' + r.status);
        }
        live(true);
        state(true);
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value.replace(/\r\n?/g, '\n');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const frame = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let data = [], id = '';
            for (const line of frame.split('\n')) {
              if (line.startsWith(':')) continue;
              const c = line.indexOf(':');
              const f = c < 0 ? line : line.slice(0, c);
              const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
              if (f === 'data') data.push(v);
              else if (f === 'id') id = v;
            }
            if (id) last = id;
            if (data.length) {
              try { onEvent(JSON.parse(data.join('\n'))); } catch (e) { console.warn('bad event frame', e); }
            }
          }
        }
      } catch (e) {
        if (signal.aborted) return;
        live(false, e.message);
      }
      if (signal.aborted) return;
      state(false);
      live(false, 'reconnecting');
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
  function live(on, why) {
    const el = $('#live');
    el.hidden = false;
    el.className = 'live ' + (on ? 'on' : 'off');
    el.textContent = on ? 'live' : 'offline' + (why ? ' (' + why + ')' : '');
  }

  // ---- sign in ----
  function signOut(why) {
    const sess = sessionStorage.getItem(SESSION);
    const k = key();
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(SESSION);
    if (sess && k) {
      // A key from a sign-in code dies with the sign-out.
      fetch('/v1/keys/' + encodeURIComponent(sess), { method: 'DELETE', headers: { Authorization: 'Bearer ' + k } }).catch(() => {});
    }
    teardown();
    $('#nav').hidden = true;
    $('#live').hidden = true;
    showSignIn(why);
  }
  function showSignIn(why, err) {
    const input = h('input', { type: 'password', id: 'apikey', autocomplete: 'off', placeholder: 'berth_...', required: true });
    const msg = h('p', { class: 'error', id: 'signin-error', text: err || '' });
    main.replaceChildren(h('div', { class: 'card signin' },
      h('h1', { text: 'Sign in to berth' }),
      why ? h('p', { class: 'muted', text: why }) : null,
      h('form', { id: 'signin', onsubmit: async (ev) => {
        ev.preventDefault();
        msg.textContent = '';
        const k = input.value.trim();
        sessionStorage.setItem(KEY, k);
        try {
          await api('GET', '/v1/version', { noSignout: true });
        } catch (e) {
          sessionStorage.removeItem(KEY);
          msg.textContent = e.message;
          return;
        }
        input.value = '';
        start();
      } },
      h('p', {}, h('label', { for: 'apikey', text: 'API key' })), input,
      h('p', {}, h('button', { class: 'act', type: 'submit', id: 'signin-submit', text: 'Sign in' }))),
      msg,
      h('p', { class: 'muted', text: 'On the daemon\u2019s host, `berth console` prints a one-time sign-in link instead.' })));
    input.focus();
  }
  // A sign-in link carries its one-time code in the fragment (#code=...):
  // never sent to a server, never in a Referer. It is dropped from the
  // address bar and history before anything else, then traded for a key.
  async function redeemCode() {
    const m = /^#code=([A-Za-z0-9_%]+)$/.exec(location.hash);
    if (!m) return false;
    history.replaceState(null, '', location.pathname + location.search + '#/');
    try {
      const r = await fetch('/v1/console/session', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ code: decodeURIComponent(m[1]) }), cache: 'no-store' });
      const b = await r.json();
      if (!r.ok) throw new Error(b.error ? b.error.message : 'HTTP ' + r.status);
      sessionStorage.setItem(KEY, b.api_key);
      sessionStorage.setItem(SESSION, b.key_id);
      return true;
    } catch (e) {
      showSignIn('', 'The sign-in link did not work: ' + e.message);
      return null;
    }
  }

  // ---- views ----
  let cleanups = [];
  function teardown() {
    for (const c of cleanups.splice(0)) { try { c(); } catch (_) { /* already gone */ } }
  }
  function abortable() {
    const ac = new AbortController();
    cleanups.push(() => ac.abort());
    return ac.signal;
  }
  function every(ms, f) {
    const t = setInterval(f, ms);
    cleanups.push(() => clearInterval(t));
  }

  function table(cols, rows, opts = {}) {
    const tb = h('tbody');
    const t = h('table', { id: opts.id }, h('thead', {}, h('tr', {}, cols.map((c) => h('th', { class: c.cls, text: c.label })))), tb);
    for (const r of rows) tb.append(rowOf(cols, r, opts.key));
    if (!rows.length) tb.append(h('tr', {}, h('td', { class: 'muted', colSpan: cols.length, text: opts.empty || 'none' })));
    return t;
  }
  function rowOf(cols, r, keyFn) {
    const tr = h('tr', keyFn ? { 'data-id': keyFn(r) } : {});
    for (const c of cols) {
      const v = c.get(r);
      tr.append(h('td', { class: [c.cls, c.wrap ? 'wrap' : ''].filter(Boolean).join(' ') }, v instanceof Node ? v : (v === undefined || v === null ? '' : String(v))));
    }
    return tr;
  }
  function kv(obj) {
    const dl = h('dl');
    for (const [k, v] of Object.entries(obj)) {
      if (v === undefined || v === null || v === '' || (Array.isArray(v) && !v.length)) continue;
      dl.append(h('dt', { text: k }), h('dd', {}, v instanceof Node ? v : (typeof v === 'object' ? JSON.stringify(v) : String(v))));
    }
    return dl;
  }
  const labelsText = (l) => Object.entries(l || {}).map(([k, v]) => k + '=' + v).join(' ');

  async function listView(title, path, cols, pick) {
    main.replaceChildren(h('h1', { text: title }), h('p', { class: 'muted', text: 'loading' }));
    try {
      const b = await api('GET', path);
      const rows = pick ? pick(b) : b;
      main.replaceChildren(h('h1', { text: title }), h('div', { class: 'card' }, table(cols, rows || [])));
    } catch (e) {
      main.replaceChildren(h('h1', { text: title }), errorBox(e));
    }
  }

  // The sandboxes list follows the event stream: each event refreshes
  // its sandbox's row (a new sandbox gets one, a deleted one loses it).
  const sbCols = [
    { label: 'sandbox', get: (s) => h('a', { href: '#/sandbox/' + encodeURIComponent(s.id), class: 'sb-link', text: s.name || s.id }) },
    { label: 'state', get: (s) => stateBadge(s.state) },
    { label: 'template', get: (s) => s.template },
    { label: 'age', get: (s) => h('span', { class: 'age', 'data-t': s.created_at, text: ago(s.created_at) }) },
    { label: 'idle', get: (s) => h('span', { class: 'age', 'data-t': s.last_activity_at || '', text: ago(s.last_activity_at) }) },
    { label: 'storage', get: (s) => storageOf(s) },
    { label: 'persistent', cls: 'hide-sm', get: (s) => (s.persistent ? 'yes' : '') },
    { label: 'labels', cls: 'hide-sm', wrap: true, get: (s) => labelsText(s.labels) },
  ];
  async function sandboxesView() {
    const signal = abortable();
    const tpl = h('input', { type: 'text', id: 'new-template', placeholder: 'template (default)' });
    const pers = h('input', { type: 'checkbox', id: 'new-persistent' });
    const msg = h('span', { class: 'error' });
    const form = h('form', { class: 'row', onsubmit: async (ev) => {
      ev.preventDefault();
      msg.textContent = '';
      try {
        await api('POST', '/v1/sandboxes', { body: { template: tpl.value.trim() || undefined, persistent: pers.checked || undefined } });
      } catch (e) { msg.textContent = e.message; }
    } }, tpl, h('label', {}, pers, ' persistent'), h('button', { class: 'act', type: 'submit', text: 'New sandbox' }), msg);
    const holder = h('div', { class: 'card' }, h('p', { class: 'muted', text: 'loading' }));
    main.replaceChildren(h('h1', { text: 'Sandboxes' }), form, holder);
    let sbs;
    try { sbs = await api('GET', '/v1/sandboxes'); } catch (e) { holder.replaceChildren(errorBox(e)); return; }
    const t = table(sbCols, [], { id: 'sandboxes', empty: 'no sandboxes yet' });
    const tb = t.tBodies[0];
    const byID = new Map();
    const upsert = (s) => {
      if (!byID.size) tb.replaceChildren();
      const tr = rowOf(sbCols, s, (x) => x.id);
      const old = byID.get(s.id);
      if (old) old.replaceWith(tr); else tb.prepend(tr);
      byID.set(s.id, tr);
    };
    for (const s of sbs.slice().reverse()) upsert(s);
    if (!sbs.length) tb.append(h('tr', {}, h('td', { class: 'muted', colSpan: sbCols.length, text: 'no sandboxes yet' })));
    holder.replaceChildren(t);
    const pending = new Map();
    const refresh = (id) => {
      if (pending.has(id)) return;
      pending.set(id, setTimeout(async () => {
        pending.delete(id);
        try {
          const s = await api('GET', sbPath(id), { signal });
          if (s.state === 'deleted') drop(id); else upsert(s);
        } catch (e) {
          if (e.status === 404) drop(id);
        }
      }, 150));
    };
    const drop = (id) => { const tr = byID.get(id); if (tr) { tr.remove(); byID.delete(id); } };
    cleanups.push(() => pending.forEach((t) => clearTimeout(t)));
    every(5000, () => document.querySelectorAll('#sandboxes .age').forEach((el) => { el.textContent = ago(el.dataset.t); }));
    // While the stream is down (a cut, or a daemon without it), the list
    // is polled instead, so it never goes stale.
    let streaming = false;
    every(3000, async () => {
      if (streaming) return;
      try {
        const now = await api('GET', '/v1/sandboxes', { signal });
        const ids = new Set(now.map((s) => s.id));
        for (const id of [...byID.keys()]) if (!ids.has(id)) drop(id);
        for (const s of now.slice().reverse()) upsert(s);
      } catch (_) { /* the indicator says offline */ }
    });
    sse('/v1/events', (ev) => { if (ev.sandbox_id) refresh(ev.sandbox_id); }, signal, 0, (up) => { streaming = up; });
  }

  async function sandboxView(id) {
    const signal = abortable();
    main.replaceChildren(h('h1', { text: id }), h('p', { class: 'muted', text: 'loading' }));
    let sb;
    try { sb = await api('GET', sbPath(id)); } catch (e) { main.replaceChildren(h('h1', { text: id }), errorBox(e)); return; }
    const head = h('div');
    const actMsg = h('span', { class: 'error' });
    const act = (op, danger) => h('button', { class: 'act' + (danger ? ' danger' : ''), type: 'button', 'data-op': op, text: op, onclick: async () => {
      actMsg.textContent = '';
      try {
        if (op === 'delete') { await api('DELETE', sbPath(id) + '?force=true'); location.hash = '#/sandboxes'; return; }
        await api('POST', sbPath(id) + '/' + op);
      } catch (e) { actMsg.textContent = e.message; }
    } });
    const summary = h('div', { class: 'card' });
    const drawHead = () => {
      head.replaceChildren(h('h1', {}, (sb.name || sb.id) + ' ', stateBadge(sb.state)));
      summary.replaceChildren(h('h2', { text: 'Sandbox' }), kv({
        id: sb.id, name: sb.name, template: sb.template, state: sb.state, persistent: sb.persistent ? 'yes' : 'no',
        created: when(sb.created_at), started: when(sb.started_at), 'last activity': when(sb.last_activity_at),
        expires: when(sb.expires_at), 'next action': sb.next_action ? sb.next_action + ' at ' + when(sb.next_action_at) : '',
        hostname: sb.hostname, ipv4: sb.ipv4, labels: labelsText(sb.labels), cause: sb.cause, reason: sb.reason, error: sb.error,
        runtime: sb.isolation && sb.isolation.runtime, lineage: sb.lineage,
      }));
    };
    drawHead();
    const policy = h('div', { class: 'card' }, h('h2', { text: 'Policies' }), kv(Object.assign({ timeout_seconds: sb.timeout_seconds }, sb.policy || {})));
    const resources = h('div', { class: 'card' }, h('h2', { text: 'Resources' }), kv(Object.assign({}, sb.resources || {},
      { disk: storageOf(sb), 'disk enforced': sb.disk && sb.disk.enforced })));
    // Timeline: what the list holds, then the stream from its last id.
    const tlCols = [{ label: 'id', get: (e) => e.id }, { label: 'time', get: (e) => when(e.time) }, { label: 'type', get: (e) => e.type },
      { label: 'transition', get: (e) => (e.from || e.to ? (e.from || '') + ' \u2192 ' + (e.to || '') : '') },
      { label: 'actor', cls: 'hide-sm', get: (e) => e.actor }, { label: 'cause', cls: 'hide-sm', get: (e) => e.cause },
      { label: 'message', wrap: true, get: (e) => [e.reason, e.outcome, e.message].filter(Boolean).join(' \u2014 ') }];
    const tl = table(tlCols, [], { id: 'timeline', empty: 'no events' });
    const timeline = h('div', { class: 'card wide' }, h('h2', { text: 'Timeline' }), tl);
    const seen = new Set();
    const addEvent = (e) => {
      if (seen.has(e.id)) return;
      if (!seen.size) tl.tBodies[0].replaceChildren();
      seen.add(e.id);
      tl.tBodies[0].append(rowOf(tlCols, e));
    };
    let lastEvent = 0;
    try {
      for (const e of await api('GET', sbPath(id) + '/events?limit=500')) { addEvent(e); lastEvent = Math.max(lastEvent, e.id); }
    } catch (e) { timeline.append(errorBox(e)); }
    const sbRefresh = async () => {
      try { sb = await api('GET', sbPath(id), { signal }); drawHead(); } catch (_) { /* gone; the timeline says so */ }
    };
    sse(sbPath(id) + '/events', (e) => { addEvent(e); sbRefresh(); }, signal, lastEvent);

    const network = h('div', { class: 'card' }, h('h2', { text: 'Network rules' }));
    api('GET', sbPath(id) + '/network').then((n) => network.append(kv(n))).catch((e) => network.append(errorBox(e)));
    const flows = h('div', { class: 'card wide' }, h('h2', { text: 'Flow log' }));
    api('GET', sbPath(id) + '/flows').then((fs) => flows.append(table([
      { label: 'time', get: (f) => when(f.time) }, { label: 'kind', get: (f) => f.kind }, { label: 'proto', get: (f) => f.proto },
      { label: 'src', cls: 'hide-sm', get: (f) => f.src }, { label: 'dst', get: (f) => f.dst }, { label: 'name', wrap: true, get: (f) => f.name },
      { label: 'decision', get: (f) => f.decision }, { label: 'rule', wrap: true, get: (f) => f.rule }], fs || [], { empty: 'no flows' })))
      .catch((e) => flows.append(errorBox(e)));
    const procs = h('div', { class: 'card wide' }, h('h2', { text: 'Processes' }));
    const loadProcs = () => api('GET', sbPath(id) + '/processes').then((b) => procs.replaceChildren(h('h2', { text: 'Processes' }),
      h('button', { class: 'act', type: 'button', text: 'refresh', onclick: loadProcs }),
      table([{ label: 'id', get: (p) => p.id }, { label: 'tag', get: (p) => p.tag }, { label: 'pid', get: (p) => p.pid },
        { label: 'state', get: (p) => p.state }, { label: 'argv', wrap: true, get: (p) => (p.argv || []).join(' ') },
        { label: 'started', cls: 'hide-sm', get: (p) => when(p.started) }, { label: 'exit', get: (p) => (p.exit ? p.exit.code : '') }],
      (b && b.processes) || [], { id: 'processes', empty: 'no background processes' })))
      .catch((e) => procs.replaceChildren(h('h2', { text: 'Processes' }), errorBox(e)));
    loadProcs();

    const files = h('div', { class: 'card wide', id: 'files' });
    const terminal = h('div', { class: 'card wide' }, h('h2', { text: 'Terminal' }));
    main.replaceChildren(head, h('div', { class: 'row' }, ['pause', 'resume', 'stop', 'start', 'hibernate', 'wake'].map((o) => act(o)), act('delete', true), actMsg),
      h('div', { class: 'grid' }, summary, policy, resources, network, timeline, terminal, files, procs, flows));
    fileBrowser(files, id, sb.workdir || '/tmp');
    openTerminal(terminal, id);
  }

  function fileBrowser(card, id, start) {
    let dir = start;
    const pathIn = h('input', { type: 'text', id: 'files-path', value: dir });
    const upload = h('input', { type: 'file', id: 'files-upload', multiple: true });
    const msg = h('p', { class: 'error', id: 'files-msg' });
    const list = h('div');
    const join = (d, n) => (d.endsWith('/') ? d : d + '/') + n;
    const load = async (d) => {
      msg.textContent = '';
      try {
        const fis = (await api('GET', sbPath(id) + '/files/list?path=' + encodeURIComponent(d))) || [];
        dir = d;
        pathIn.value = d;
        fis.sort((a, b) => (b.is_dir - a.is_dir) || (a.name < b.name ? -1 : 1));
        const up = d.replace(/\/+$/, '').replace(/\/[^/]*$/, '') || '/';
        list.replaceChildren(table([
          { label: 'name', wrap: true, get: (f) => (f.is_dir ? h('a', { href: '#', class: 'dir', text: f.name + '/', onclick: (ev) => { ev.preventDefault(); load(join(dir, f.name)); } }) : h('span', { class: 'fname', text: f.name })) },
          { label: 'size', get: (f) => (f.is_dir ? '' : bytes(f.size)) },
          { label: 'mode', cls: 'hide-sm', get: (f) => f.mode_string },
          { label: 'modified', cls: 'hide-sm', get: (f) => when(f.mod_time) },
          { label: '', get: (f) => (f.is_dir ? '' : h('button', { class: 'act download', type: 'button', 'data-name': f.name, text: 'download', onclick: () => download(join(dir, f.name), f.name) })) },
        ], fis, { id: 'file-list', empty: 'empty directory' }));
        if (d !== '/') list.prepend(h('a', { href: '#', text: '\u2191 ' + up, onclick: (ev) => { ev.preventDefault(); load(up); } }));
      } catch (e) { msg.textContent = e.message; }
    };
    const download = async (p, name) => {
      try {
        const r = await api('GET', sbPath(id) + '/files?path=' + encodeURIComponent(p), { raw: true });
        const url = URL.createObjectURL(await r.blob());
        const a = h('a', { href: url, download: name });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      } catch (e) { msg.textContent = e.message; }
    };
    upload.addEventListener('change', async () => {
      for (const f of upload.files) {
        try {
          await api('PUT', sbPath(id) + '/files?path=' + encodeURIComponent(join(dir, f.name)), { body: f, headers: { 'Content-Type': 'application/octet-stream' } });
        } catch (e) { msg.textContent = f.name + ': ' + e.message; }
      }
      upload.value = '';
      load(dir);
    });
    card.replaceChildren(h('h2', { text: 'Files' }),
      h('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); load(pathIn.value.trim() || '/'); } }, pathIn,
        h('button', { class: 'act', type: 'submit', text: 'open' }), h('label', {}, 'upload ', upload)), msg, list);
    load(dir);
  }

  // The terminal is xterm.js over the PTY WebSocket: the first message is
  // the JSON exec request, then binary frames tagged by their first byte
  // (0 stdin, 1 stdout, 2 stderr, 3 resize, 4 exit, 6 error).
  function openTerminal(card, id) {
    if (!window.Terminal) { card.append(errorBox('xterm.js did not load')); return; }
    const box = h('div', { class: 'term', id: 'terminal' });
    const status = h('p', { class: 'muted', id: 'terminal-status', text: 'connecting' });
    card.append(box, status);
    // Links the sandbox prints (OSC 8) open with noopener: a window opened
    // without it gets a copy of this tab's sessionStorage, the key with it,
    // and a sandbox page behind the path port proxy shares this origin.
    const linkHandler = {
      activate: (event, uri) => {
        let u;
        try { u = new URL(uri); } catch (_) { return; }
        if (u.origin === location.origin || (u.protocol !== 'https:' && u.protocol !== 'http:')) return;
        window.open(u.href, '_blank', 'noopener,noreferrer');
      },
    };
    const term = new window.Terminal({ fontFamily: 'ui-monospace, Menlo, Consolas, monospace', fontSize: 13, cursorBlink: true, linkHandler });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(box);
    try { fit.fit(); } catch (_) { /* not laid out yet */ }
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(proto + '//' + location.host + sbPath(id) + '/exec/ws', ['berth', 'berth.bearer.' + key()]);
    ws.binaryType = 'arraybuffer';
    const enc = new TextEncoder();
    const dec = new TextDecoder();
    const frame = (kind, payload) => {
      const b = new Uint8Array(1 + payload.length);
      b[0] = kind;
      b.set(payload, 1);
      return b;
    };
    ws.onopen = () => {
      status.textContent = 'connected';
      ws.send(JSON.stringify({ cmd: ['/bin/sh'], tty: true, rows: term.rows, cols: term.cols, env: { TERM: 'xterm-256color' } }));
      term.focus();
    };
    ws.onmessage = (m) => {
      const b = new Uint8Array(m.data);
      if (!b.length) return;
      const body = b.subarray(1);
      switch (b[0]) {
        case 1: case 2: term.write(body); break;
        case 4: status.textContent = 'exited: ' + dec.decode(body); break;
        case 6: try { status.textContent = 'error: ' + JSON.parse(dec.decode(body)).message; } catch (_) { status.textContent = 'error'; } break;
        default:
      }
    };
    ws.onclose = () => { if (status.textContent === 'connected') status.textContent = 'disconnected'; };
    ws.onerror = () => { status.textContent = 'connection failed'; };
    const d1 = term.onData((d) => { if (ws.readyState === 1) ws.send(frame(0, enc.encode(d))); });
    const d2 = term.onResize(({ rows, cols }) => { if (ws.readyState === 1) ws.send(frame(3, enc.encode(JSON.stringify({ rows, cols })))); });
    const onResize = () => { try { fit.fit(); } catch (_) { /* hidden */ } };
    window.addEventListener('resize', onResize);
    cleanups.push(() => { window.removeEventListener('resize', onResize); d1.dispose(); d2.dispose(); ws.close(); term.dispose(); });
  }

  // ---- dashboard: the measures of /metrics, sampled while it is open ----
  function parseMetrics(text) {
    const out = new Map();
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      if (!out.has(m[1])) out.set(m[1], []);
      out.get(m[1]).push({ labels, value: Number(m[4]) });
    }
    return out;
  }
  const sumOf = (snap, name, f) => (snap.get(name) || []).filter((s) => !f || f(s.labels)).reduce((a, s) => a + s.value, 0);
  const charts = [
    { id: 'live', title: 'Live sandboxes', fmt: (v) => String(Math.round(v)), val: (s) => sumOf(s, 'berth_sandboxes', (l) => !['deleted', 'failed'].includes(l.state)) },
    { id: 'creates', title: 'Creates / min', rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, 'berth_sandbox_creates_total') },
    { id: 'tti', title: 'Time to interactive (mean, s)', mean: 'berth_time_to_interactive_seconds', fmt: (v) => v.toFixed(3) },
    { id: 'execs', title: 'Exec completions / min', rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, 'berth_exec_completions_total') },
    { id: 'resume', title: 'Resume latency (mean, s)', mean: 'berth_resume_seconds', fmt: (v) => v.toFixed(3) },
    { id: 'cleanup', title: 'Cleanup lag (mean, s)', mean: 'berth_cleanup_lag_seconds', fmt: (v) => v.toFixed(3) },
    { id: 'storage', title: 'Storage', fmt: bytes, val: (s) => sumOf(s, 'berth_storage_bytes') },
    { id: 'undeleted', title: 'Left after failed deletion', fmt: (v) => String(Math.round(v)), val: (s) => sumOf(s, 'berth_sandboxes_undeleted') },
    { id: 'teardown', title: 'Teardown failures / min', rate: true, fmt: (v) => v.toFixed(1), val: (s) => sumOf(s, 'berth_teardown_failures_total') },
    { id: 'requests', title: 'API requests / min', rate: true, fmt: (v) => v.toFixed(0), val: (s) => sumOf(s, 'berth_http_requests_total') },
  ];
  function drawChart(el, pts, fmt) {
    const svg = svgEl('svg', { viewBox: '0 0 300 90', preserveAspectRatio: 'none', role: 'img' });
    svg.append(svgEl('line', { x1: 0, y1: 89, x2: 300, y2: 89 }));
    const ys = pts.filter((p) => p !== null);
    const max = Math.max(1e-9, ...ys);
    if (ys.length > 1) {
      const step = 300 / Math.max(1, pts.length - 1);
      const coords = pts.map((p, i) => (p === null ? null : (i * step).toFixed(1) + ',' + (88 - (p / max) * 84).toFixed(1))).filter(Boolean);
      svg.append(svgEl('polyline', { points: coords.join(' ') }));
    }
    const cur = ys.length ? fmt(ys[ys.length - 1]) : '\u2014';
    el.querySelector('.val').textContent = cur;
    el.querySelector('.max').textContent = ys.length ? 'max ' + fmt(max) : '';
    el.querySelector('svg').replaceWith(svg);
  }
  async function dashboardView() {
    const signal = abortable();
    const grid = h('div', { class: 'charts', id: 'charts' });
    const note = h('p', { class: 'muted', text: 'Sampled from /metrics every 3 s while this page is open.' });
    const counts = h('div', { class: 'card', id: 'state-counts' }, h('h2', { text: 'Sandboxes by state' }));
    main.replaceChildren(h('h1', { text: 'Dashboard' }), counts, h('div', { class: 'card' }, h('h2', { text: 'Measures' }), note, grid));
    const els = new Map();
    for (const c of charts) {
      const el = h('div', { class: 'chart', 'data-chart': c.id }, h('div', { class: 'muted', text: c.title }), h('div', { class: 'val', text: '\u2014' }), svgEl('svg', {}), h('div', { class: 'muted max' }));
      grid.append(el);
      els.set(c.id, { el, pts: [] });
    }
    let prev = null, prevT = 0;
    const sample = async () => {
      let text;
      try {
        text = await api('GET', '/metrics', { signal });
      } catch (e) {
        if (e.status === 403) note.textContent = 'The measures are the host\u2019s: this key\u2019s tenant sees its sandboxes below.';
        else if (!signal.aborted) note.textContent = 'metrics: ' + e.message;
        return false;
      }
      const snap = parseMetrics(text);
      const t = Date.now();
      for (const c of charts) {
        const st = els.get(c.id);
        let v = null;
        if (c.mean) {
          const s = sumOf(snap, c.mean + '_sum'), n = sumOf(snap, c.mean + '_count');
          if (prev) {
            const dn = n - sumOf(prev, c.mean + '_count');
            v = dn > 0 ? (s - sumOf(prev, c.mean + '_sum')) / dn : (n > 0 ? s / n : 0);
          } else v = n > 0 ? s / n : 0;
        } else if (c.rate) {
          v = prev ? Math.max(0, (c.val(snap) - c.val(prev)) / ((t - prevT) / 60000)) : null;
        } else v = c.val(snap);
        st.pts.push(v);
        if (st.pts.length > 60) st.pts.shift();
        drawChart(st.el, st.pts, c.fmt);
      }
      prev = snap;
      prevT = t;
      return true;
    };
    const stateCounts = async () => {
      try {
        const sbs = await api('GET', '/v1/sandboxes', { signal });
        const by = {};
        for (const s of sbs) by[s.state] = (by[s.state] || 0) + 1;
        counts.replaceChildren(h('h2', { text: 'Sandboxes by state' }), Object.keys(by).length ? kv(by) : h('p', { class: 'muted', text: 'no sandboxes' }));
      } catch (e) { counts.append(errorBox(e)); }
    };
    stateCounts();
    if (await sample()) every(3000, sample);
    every(10000, stateCounts);
  }

  const views = {
    '': dashboardView,
    sandboxes: sandboxesView,
    sandbox: sandboxView,
    templates: () => listView('Templates', '/v1/templates', [
      { label: 'name', get: (t) => t.name }, { label: 'tenant', get: (t) => t.tenant || 'shared' },
      { label: 'source', wrap: true, get: (t) => t.source }, { label: 'size', get: (t) => bytes(t.size) },
      { label: 'builtin', cls: 'hide-sm', get: (t) => (t.builtin ? 'yes' : '') }, { label: 'created', cls: 'hide-sm', get: (t) => when(t.created_at) }]),
    pools: () => listView('Warm pools', '/v1/pools', [
      { label: 'template', get: (p) => p.template }, { label: 'tenant', get: (p) => p.tenant || 'shared' },
      { label: 'min', get: (p) => p.min }, { label: 'ready', get: (p) => p.ready }, { label: 'starting', get: (p) => p.starting },
      { label: 'hits', get: (p) => p.hits }, { label: 'misses', get: (p) => p.misses }]),
    volumes: () => listView('Volumes', '/v1/volumes', [
      { label: 'name', get: (v) => v.name }, { label: 'state', get: (v) => v.state }, { label: 'size', get: (v) => bytes(v.size_bytes) },
      { label: 'used', get: (v) => bytes(v.used_bytes) }, { label: 'attached to', get: (v) => v.attached_to },
      { label: 'created', cls: 'hide-sm', get: (v) => when(v.created_at) }]),
    snapshots: () => listView('Snapshots', '/v1/snapshots', [
      { label: 'id', get: (s) => s.id }, { label: 'name', get: (s) => s.name }, { label: 'sandbox', get: (s) => s.sandbox_id },
      { label: 'template', get: (s) => s.template }, { label: 'size', get: (s) => bytes(s.size_bytes) },
      { label: 'created', cls: 'hide-sm', get: (s) => when(s.created_at) }, { label: 'expires', cls: 'hide-sm', get: (s) => when(s.expires_at) }]),
    audit: () => listView('Audit log', '/v1/audit?limit=200', [
      { label: 'seq', get: (a) => a.seq }, { label: 'time', get: (a) => when(a.time) }, { label: 'tenant', cls: 'hide-sm', get: (a) => a.tenant },
      { label: 'actor', get: (a) => a.actor }, { label: 'action', wrap: true, get: (a) => a.action }, { label: 'target', get: (a) => a.target },
      { label: 'result', get: (a) => a.result }, { label: 'source', cls: 'hide-sm', get: (a) => a.source }],
    (b) => (Array.isArray(b) ? b : b.entries)),
  };

  function route() {
    teardown();
    const parts = location.hash.replace(/^#\/?/, '').split('/');
    const view = views[parts[0]] || views[''];
    document.querySelectorAll('#nav a').forEach((a) => {
      const target = a.getAttribute('href').replace(/^#\/?/, '');
      a.classList.toggle('active', target === parts[0] || (target === 'sandboxes' && parts[0] === 'sandbox'));
    });
    view(parts.slice(1).map(decodeURIComponent).join('/')).catch((e) => main.replaceChildren(errorBox(e)));
  }

  function start() {
    $('#nav').hidden = false;
    if (!/^#\//.test(location.hash)) history.replaceState(null, '', '#/');
    route();
  }

  async function boot() {
    $('#signout').addEventListener('click', () => signOut('signed out'));
    window.addEventListener('hashchange', () => { if (key()) route(); });
    const redeemed = await redeemCode();
    if (redeemed === null) return;
    if (key()) start(); else showSignIn();
  }
  boot();
})();
