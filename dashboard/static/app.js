// Berth dashboard: plain JavaScript, no build step, no dependency.
//
// The API key is asked for once and kept in sessionStorage only (gone when
// the tab closes; never a cookie, never in a URL). Every datum comes from
// Berth's API with an Authorization header: the page polls while it is
// visible and follows logs over a streamed fetch.
'use strict';

const KEY = 'berth.apiKey';
const POLL_MS = 2000;

let apiKey = sessionStorage.getItem(KEY) || '';
let view = null;          // the current view: {refresh(), stop()}
let pollTimer = null;
let polling = false;
let lastOK = 0;           // time of the last successful poll

// ---------- DOM helpers ----------

// h builds an element: h('div.card#x', {attrs}, children...). Text children
// are text nodes, so API data is never parsed as HTML.
function h(sel, attrs, ...kids) {
  const m = sel.match(/^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i);
  const el = document.createElement(m[1] || 'div');
  for (const part of (m[2] || '').match(/[.#][\w-]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1)); else el.id = part.slice(1);
  }
  if (attrs !== undefined && attrs !== null && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    kids.unshift(attrs); attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className += ' ' + v;
    else if (k === 'style') el.style.cssText = v; // CSSOM: allowed by the page's CSP, a style attribute is not
    else if (k in el && k !== 'list' && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
}

function clear(el, ...kids) { el.replaceChildren(); append(el, kids); return el; }

const $app = () => document.getElementById('app');

// ---------- formatting ----------

function dur(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
  const m = Math.floor(s / 60), rs = Math.floor(s % 60);
  if (m < 60) return m + 'm ' + String(rs).padStart(2, '0') + 's';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
}

// latency is dur with sub-second detail: 0.42 ms, 7.5 ms, 120 ms.
function latency(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1) return ms.toFixed(2) + ' ms';
  if (ms < 10) return ms.toFixed(1) + ' ms';
  return dur(ms);
}

// age is a waiting time at a glance: whole seconds and up.
function age(ms) { return ms < 1000 ? '<1 s' : dur(ms); }

function ago(t) {
  if (!t) return '—';
  const ms = Date.now() - new Date(t).getTime();
  if (ms < 5000) return 'just now';
  return dur(ms) + ' ago';
}

function bytes(n) {
  if (!n && n !== 0) return '—';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

function pretty(v) {
  if (v === undefined) return '';
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

function short(id) { return id && id.length > 13 ? id.slice(0, 8) + '…' + id.slice(-4) : id; }

const STATUS = {
  IN_QUEUE: ['warn', 'queued'], IN_PROGRESS: ['run spin', 'running'], COMPLETED: ['ok', 'completed'],
  FAILED: ['bad', 'failed'], CANCELLED: ['', 'cancelled'], TIMED_OUT: ['bad', 'timed out'],
};
function statusPill(st) {
  const [cls, text] = STATUS[st] || ['', String(st || '').toLowerCase()];
  return h('span.pill', { class: cls, 'data-status': st }, text);
}

const WSTATE = { idle: 'ok', running: 'run', initializing: 'warn', throttled: 'warn', unhealthy: 'bad', draining: 'run', lost: 'bad', exited: '', frozen: 'ok' };
function workerPill(st) { return h('span.pill', { class: WSTATE[st] ?? '', 'data-state': st }, st || 'unknown'); }

// ---------- API ----------

class AuthError extends Error {}

async function api(path, opts = {}) {
  const headers = { Authorization: 'Bearer ' + apiKey };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method: opts.method || 'GET', headers, cache: 'no-store',
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body), signal: opts.signal });
  if (res.status === 401) {
    signOut('Berth refused the API key. Enter it again.');
    throw new AuthError('unauthorized');
  }
  const text = await res.text();
  let body = text;
  try { body = text ? JSON.parse(text) : null; } catch { /* plain text */ }
  if (!res.ok) {
    const msg = (body && (body.message || body.error)) || res.status + ' ' + res.statusText;
    const err = new Error(msg);
    err.status = res.status;
    throw err;
  }
  return body;
}

// ---------- shell ----------

const NAV = [['#/', 'Endpoints'], ['#/gpus', 'GPUs'], ['#/pods', 'Pods'], ['#/templates', 'Templates'], ['#/volumes', 'Volumes'], ['#/keys', 'Keys']];

function brand() {
  const a = h('a.brand', { href: '#/' });
  a.innerHTML = '<svg viewBox="0 0 32 32" aria-hidden="true"><rect width="32" height="32" rx="7" fill="#2563eb"/><path d="M7 19h18l-3 6H10z" fill="#fff"/><path d="M11 17V9h5v8M18 17v-5h4v5" fill="none" stroke="#fff" stroke-width="2" stroke-linejoin="round"/></svg>';
  a.append('Berth');
  return a;
}

function shell() {
  const route = location.hash || '#/';
  const section = route.startsWith('#/endpoint') || route === '#/' || route.startsWith('#/logs/worker') || route.startsWith('#/build/') ? '#/' :
    route.startsWith('#/logs/pod') ? '#/pods' : route.replace(/^(#\/[a-z]+).*$/, '$1');
  const nav = h('nav.nav', NAV.map(([href, text]) => h('a', { href, class: href === section ? 'active' : null }, text)));
  const live = h('span#live', h('span.live-dot'), 'live');
  const out = h('button.btn.small#signout', { onclick: () => signOut('') }, 'Sign out');
  const main = h('main#main');
  clear($app(), h('header.topbar', brand(), nav, h('div.right', live, out)), main);
  return main;
}

function setLive(ok) {
  const el = document.getElementById('live');
  if (!el) return;
  clear(el, h('span.live-dot', { class: ok ? null : 'off' }), ok ? 'live' : 'offline');
  el.title = ok ? 'Updated every ' + POLL_MS / 1000 + ' s' : 'Berth does not answer';
}

// ---------- sign in ----------

function signIn(message) {
  stopView();
  const input = h('input#key-input', { type: 'password', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'BERTH_API_KEY', 'aria-label': 'API key', autofocus: true });
  const err = h('div.form-error#key-error', message || '');
  const btn = h('button.btn.primary#key-submit', { type: 'submit' }, 'Open dashboard');
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const k = input.value.trim();
      if (!k) { clear(err, 'Enter the API key.'); return; }
      btn.disabled = true;
      apiKey = k;
      try {
        // The endpoint list: every key may read it (filtered to its endpoints).
        const res = await fetch('/v1/endpoints', { headers: { Authorization: 'Bearer ' + k }, cache: 'no-store' });
        if (res.status === 401) throw new Error('Berth refused this key.');
        if (!res.ok) throw new Error('Berth answered ' + res.status + '.');
        sessionStorage.setItem(KEY, k);
        route();
      } catch (e) {
        apiKey = '';
        clear(err, e.message === 'Failed to fetch' ? 'Berth does not answer.' : e.message);
        btn.disabled = false;
      }
    },
  }, h('label.field', { for: 'key-input' }, 'API key'), input, err, btn);
  clear($app(), h('div.panel.login', brand(),
    h('p', 'Enter an API key (BERTH_API_KEY, the one Berth printed at its first start, or one made with berth key create). It is kept in this tab only, until you close it.'),
    form));
  input.focus();
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  apiKey = '';
  signIn(message);
}

// ---------- routing and polling ----------

function stopView() {
  if (view && view.stop) view.stop();
  view = null;
  clearTimeout(pollTimer);
}

function route() {
  if (!apiKey) { signIn(''); return; }
  stopView();
  window.scrollTo(0, 0);
  const main = shell();
  const parts = (location.hash || '#/').slice(2).split('/').map(decodeURIComponent);
  switch (parts[0]) {
    case '': view = endpointsView(main); break;
    case 'endpoint': view = endpointView(main, parts[1]); break;
    case 'gpus': view = gpusView(main); break;
    case 'pods': view = podsView(main); break;
    case 'templates': view = templatesView(main); break;
    case 'volumes': view = volumesView(main); break;
    case 'keys': view = keysView(main); break;
    case 'logs': view = logsView(main, parts[1], parts.slice(2)); break;
    case 'build': view = buildView(main, parts[1], parts[2]); break;
    default: clear(main, h('div.panel.empty', 'No such page. ', h('a', { href: '#/' }, 'Back to the endpoints')));
  }
  poll();
}

async function poll() {
  clearTimeout(pollTimer);
  const v = view;
  if (v && v.refresh && !document.hidden && !polling) {
    polling = true;
    try {
      await v.refresh();
      lastOK = Date.now();
      setLive(true);
    } catch (e) {
      if (!(e instanceof AuthError)) {
        setLive(false);
        console.warn('refresh:', e);
      }
    } finally {
      polling = false;
    }
  }
  if (view && view === v && view.refresh) pollTimer = setTimeout(poll, POLL_MS);
}

document.addEventListener('visibilitychange', () => { if (!document.hidden && view) poll(); });
window.addEventListener('hashchange', route);

// ---------- shared data ----------

// workerGPUs maps GPU uuid → holder id, and names each GPU.
async function loadGPUs() {
  const gpus = await orNone(api('/v1/gpus'));
  return gpus || [];
}

// orNone is a list the key may not read (a Restricted key: GPUs, pods)
// as an empty one: the page shows what the key may see (docs/keys.md).
async function orNone(p) {
  try { return await p; } catch (e) { if (e.status === 403) return []; throw e; }
}

function endpointHealth(e, q) {
  const st = e.status || {};
  const counts = Object.assign({ initializing: 0, idle: 0, running: 0, throttled: 0, unhealthy: 0, draining: 0 }, st.workers || {});
  // The runtime's counts are its containers': a worker attached from the
  // host (berth worker-env) is the queue's only, and counts too.
  for (const w of e.workers || []) {
    if (!e.status || w.external) counts[w.state] = (counts[w.state] || 0) + 1;
  }
  let pill = h('span.pill.ok', 'ready');
  if (st.unhealthy) pill = h('span.pill.bad', 'unhealthy');
  else if (st.reason && counts.idle + counts.running === 0) pill = h('span.pill.warn', 'waiting');
  else if (q && q.inQueue > 0 && counts.running + counts.idle === 0) pill = h('span.pill.warn', 'scaling up');
  else if (counts.running > 0) pill = h('span.pill.run', 'busy');
  else if (counts.initializing > 0 && counts.idle === 0) pill = h('span.pill.warn.spin', 'starting');
  else if (counts.idle + counts.initializing === 0 && counts.frozen > 0) pill = h('span.pill.ok', 'frozen (flashboot)');
  else if (counts.idle + counts.initializing === 0) pill = h('span.pill', 'scaled to zero');
  return { counts, pill, reason: st.reason, warning: st.warning, lastError: st.lastError };
}

function workerChips(counts) {
  const chips = Object.entries(counts).filter(([, n]) => n > 0).map(([st, n]) => h('span.pill', { class: WSTATE[st] }, n + ' ' + st));
  return chips.length ? h('div.chips', chips) : h('span.faint.small', 'no workers');
}

function metric(k, v, cls) { return h('div.metric', h('div.k', k), h('div.v', { class: cls || null }, v)); }

// ---------- endpoints ----------

function endpointsView(main) {
  const tiles = h('div.tiles');
  const grid = h('div.grid-cards#endpoints');
  const create = newEndpointForm();
  clear(main, h('div.page-head', h('div', h('h1', 'Endpoints'), h('div.sub', 'Queues, workers and the GPUs they hold. Updated live.')), create.button),
    create.panel, tiles, grid);
  return {
    async refresh() {
      const [eps, gpus, pods] = await Promise.all([api('/v1/endpoints?includeWorkers=true'), loadGPUs(), orNone(api('/v1/pods'))]);
      const queues = await Promise.all(eps.map((e) => api('/v1/endpoints/' + e.id + '/queue').catch(() => null)));
      let queued = 0, running = 0, workers = 0, busyWorkers = 0;
      eps.forEach((e, i) => {
        const q = queues[i] || {};
        queued += q.inQueue || 0; running += q.inProgress || 0;
        const { counts } = endpointHealth(e, q);
        workers += Object.values(counts).reduce((a, b) => a + b, 0);
        busyWorkers += counts.running;
      });
      const held = gpus.filter((g) => g.holder).length;
      const podsUp = (pods || []).filter((p) => p.desiredStatus === 'RUNNING').length;
      const tile = (label, value, sub) => h('div.panel.tile', h('div.label', label), h('div.value', value, sub ? h('small', ' ' + sub) : null));
      clear(tiles,
        tile('Queued', queued, running ? '· ' + running + ' running' : ''),
        tile('Endpoints', eps.length),
        tile('Workers', workers, busyWorkers ? '· ' + busyWorkers + ' busy' : ''),
        tile('GPUs used', held, '/ ' + gpus.length),
        tile('Pods up', podsUp, '/ ' + (pods || []).length));
      if (!eps.length) {
        clear(grid, h('div.panel.empty', { style: 'grid-column: 1 / -1' },
          h('p', 'No endpoints yet.'),
          h('p.small', 'Create a template and an endpoint with the API (POST /v1/templates, POST /v1/endpoints) or the CLI; it shows here at once.')));
        return;
      }
      clear(grid, eps.map((e, i) => endpointCard(e, queues[i], gpus)));
    },
  };
}

// newEndpointForm makes an endpoint from a serverless template (POST
// /v1/endpoints), with the console's Model field.
function newEndpointForm() {
  const name = h('input#new-ep-name', { type: 'text', placeholder: 'my-endpoint', 'aria-label': 'Name' });
  const tpl = h('select#new-ep-template', { 'aria-label': 'Template' });
  const compute = h('select#new-ep-compute', { 'aria-label': 'Compute type' }, h('option', { value: 'CPU' }, 'CPU'), h('option', { value: 'GPU' }, 'GPU'));
  const wmin = h('input#new-ep-workers-min', { type: 'number', min: 0, value: '0', 'aria-label': 'Workers min' });
  const wmax = h('input#new-ep-workers-max', { type: 'number', min: 0, value: '1', 'aria-label': 'Workers max' });
  const models = h('textarea#new-ep-models', { spellcheck: 'false', rows: 2, placeholder: MODEL_HINT, 'aria-label': 'Model references' });
  const err = h('div.form-error#new-ep-error');
  const submit = h('button.btn.primary#new-ep-create', { type: 'submit' }, 'Create endpoint');
  const field = (label, el, cls) => h('div', { class: cls || null }, h('label.field', { for: el.id }, label), el);
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      clear(err);
      if (!tpl.value) { clear(err, 'Choose a template (an image): create one with POST /v1/templates or berth deploy.'); return; }
      submit.disabled = true;
      try {
        const e = await api('/v1/endpoints', { method: 'POST', body: { name: name.value.trim(), templateId: tpl.value, computeType: compute.value,
          workersMin: Number(wmin.value), workersMax: Number(wmax.value), modelReferences: parseModels(models.value) } });
        location.hash = '#/endpoint/' + encodeURIComponent(e.id);
      } catch (e) {
        if (!(e instanceof AuthError)) clear(err, e.message);
      } finally { submit.disabled = false; }
    },
  }, h('div.form-grid', field('Name', name), field('Template', tpl), field('Compute', compute),
    h('div.row', { style: 'align-items:end;flex-wrap:nowrap' }, field('Workers min', wmin), field('max', wmax)),
    field('Model (Hugging Face: ' + MODEL_HINT + ')', models, 'full')), err, h('div.row', submit));
  const panel = h('section.panel#new-endpoint', { hidden: true, style: 'margin-bottom:16px' }, h('header', h('h2', 'New endpoint')), h('div.body', form));
  const button = h('button.btn#new-ep-open', { type: 'button', onclick: async () => {
    panel.hidden = !panel.hidden;
    if (panel.hidden) return;
    try {
      const ts = (await api('/v1/templates?includeEndpointBoundTemplates=true') || []).filter((t) => t.isServerless);
      clear(tpl, ts.length ? ts.map((t) => h('option', { value: t.id }, t.name + ' · ' + t.imageName)) : h('option', { value: '' }, 'no serverless template'));
    } catch (e) { if (!(e instanceof AuthError)) clear(err, e.message); }
    name.focus();
  } }, 'New endpoint');
  return { panel, button };
}

function gpusOf(e, gpus) {
  const ids = new Set((e.workers || []).map((w) => w.id));
  return gpus.filter((g) => g.holder && ids.has(g.holder));
}

function endpointCard(e, q, gpus) {
  q = q || {};
  const hl = endpointHealth(e, q);
  const held = gpusOf(e, gpus);
  return h('a.panel.card.endpoint-card', { href: '#/endpoint/' + encodeURIComponent(e.id), 'data-endpoint': e.id },
    h('div.title', h('div', h('div.name', e.name || e.id), h('div.id', e.id)), hl.pill),
    h('div.metrics',
      metric('Queued', q.inQueue ?? '—', q.inQueue > 0 ? 'warn' : null),
      metric('Running', q.inProgress ?? '—'),
      metric('Oldest', q.inQueue ? age(q.oldestWaitMs) : '—'),
      metric('Done', (q.completed ?? 0) + (q.failed ? ' / ' + q.failed + '✗' : ''))),
    h('div.row', h('span.small.muted', 'Workers'), workerChips(hl.counts),
      h('span.spacer'), h('span.small.faint', (e.workersMin ?? 0) + '–' + (e.workersMax ?? 0))),
    held.length ? h('div.row.small', h('span.muted', 'GPUs'), held.map((g) => h('span.pill.plain.run', '#' + g.index + ' ' + g.name))) :
      h('div.small.faint', e.computeType === 'CPU' ? 'CPU endpoint' : 'No GPU held' + (e.gpuTypeIds && e.gpuTypeIds.length ? ' · wants ' + e.gpuTypeIds.join(', ') : '')),
    hl.reason ? h('div.note', hl.reason) : null,
    !hl.reason && hl.warning ? h('div.note.subtle', hl.warning) : null);
}

// ---------- plots ----------

// An endpoint's last hour or day (GET /v1/endpoints/ID/metrics), drawn as
// small SVG charts: bars for counts, lines for levels and latencies. Each
// bar and point carries a <title>, so hovering reads its value.

const SVG = 'http://www.w3.org/2000/svg';

function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, v);
  for (const k of kids.flat(Infinity)) if (k) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

const PLOT_W = 600, PLOT_H = 120;

function bucketLabel(b, secs) {
  const t = new Date(b.start);
  const hm = (d) => d.toTimeString().slice(0, 5);
  return hm(t) + '–' + hm(new Date(t.getTime() + secs * 1000));
}

// niceMax rounds a chart's top up to 1, 2 or 5 × 10^n.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// bars stacks series (each {key, label, get(b)}) per bucket.
function barChart(name, buckets, secs, series) {
  const n = buckets.length, bw = PLOT_W / n;
  const totals = buckets.map((b) => series.reduce((a, x) => a + (x.get(b) || 0), 0));
  const top = niceMax(Math.max(...totals));
  const g = [];
  buckets.forEach((b, i) => {
    if (!totals[i]) return;
    let y = PLOT_H;
    const parts = series.filter((x) => x.get(b)).map((x) => x.get(b) + ' ' + x.label);
    for (const x of series) {
      const v = x.get(b) || 0;
      if (!v) continue;
      const hgt = v / top * PLOT_H;
      y -= hgt;
      g.push(s('rect', { class: 'bar ' + x.key, x: (i * bw + bw * 0.12).toFixed(2), y: y.toFixed(2), width: (bw * 0.76).toFixed(2), height: hgt.toFixed(2), 'data-n': v },
        s('title', {}, bucketLabel(b, secs) + ': ' + parts.join(', '))));
    }
  });
  return { top, svg: plotSVG(name, g), total: totals.reduce((a, v) => a + v, 0) };
}

// lineChart draws series (each {key, label, get(b)}, null for no value)
// as step lines, one level per bucket, broken where a value is missing.
function lineChart(name, buckets, secs, series, fmt) {
  const n = buckets.length, bw = PLOT_W / n;
  let hi = 0;
  for (const b of buckets) for (const x of series) { const v = x.get(b); if (v !== null && v !== undefined) hi = Math.max(hi, v); }
  const top = niceMax(hi);
  const g = [];
  for (const x of series) {
    let d = '', pen = false;
    buckets.forEach((b, i) => {
      const v = x.get(b);
      if (v === null || v === undefined) { pen = false; return; }
      const y = (PLOT_H - v / top * PLOT_H).toFixed(2);
      d += (pen ? 'L' : 'M') + (i * bw).toFixed(2) + ' ' + y + 'L' + ((i + 1) * bw).toFixed(2) + ' ' + y;
      pen = true;
    });
    if (d) g.push(s('path', { class: 'line ' + x.key, d, 'vector-effect': 'non-scaling-stroke' }));
  }
  // One hover target per bucket with a value, titled with every series.
  let points = 0;
  buckets.forEach((b, i) => {
    const vals = series.map((x) => [x, x.get(b)]).filter(([, v]) => v !== null && v !== undefined);
    if (!vals.length) return;
    points++;
    g.push(s('rect', { class: 'hover', x: (i * bw).toFixed(2), y: 0, width: bw.toFixed(2), height: PLOT_H },
      s('title', {}, bucketLabel(b, secs) + ': ' + vals.map(([x, v]) => x.label + ' ' + fmt(v)).join(' · '))));
  });
  return { top: fmt(top), svg: plotSVG(name, g), points };
}

function plotSVG(name, kids) {
  const grid = [0.25, 0.5, 0.75].map((f) => s('line', { class: 'grid', x1: 0, x2: PLOT_W, y1: PLOT_H * f, y2: PLOT_H * f, 'vector-effect': 'non-scaling-stroke' }));
  return s('svg', { viewBox: '0 0 ' + PLOT_W + ' ' + PLOT_H, preserveAspectRatio: 'none', 'data-plot': name, role: 'img' }, grid, kids);
}

function plotsPanel(base) {
  let win = sessionStorage.getItem('berth.plotWindow') || 'hour';
  const seg = h('div.seg#plot-window');
  const body = h('div.plots#plots');
  const drawSeg = () => clear(seg, [['hour', 'Last hour'], ['day', 'Last day']].map(([w, text]) =>
    h('button', { type: 'button', class: w === win ? 'on' : null, 'data-window': w, onclick: () => { win = w; sessionStorage.setItem('berth.plotWindow', w); drawSeg(); refresh().catch(() => {}); } }, text)));
  drawSeg();
  const panel = h('section.panel.plots-panel', { style: 'margin-bottom:16px' },
    h('header', h('h2', 'Activity'), seg), body);

  function legend(items) {
    return h('div.legend', items.map((x) => h('span', h('i.swatch', { class: x.key }), x.label)));
  }

  function chart(name, title, summary, c, items) {
    const ends = win === 'hour' ? ['60 min ago', '30 min', 'now'] : ['24 h ago', '12 h', 'now'];
    return h('figure.plot', { 'data-plot': name },
      h('figcaption', h('span.t', title), h('span.small.muted', summary)),
      h('div.plot-area', h('div.ymax.small.faint', String(c.top)), c.svg),
      h('div.axis.small.faint', ends.map((e) => h('span', e))),
      items ? legend(items) : null);
  }

  function draw(v) {
    const b = v.buckets, secs = v.bucketSeconds, per = secs === 60 ? 'minute' : (secs / 60) + ' minutes';
    const sum = (f) => b.reduce((a, x) => a + (f(x) || 0), 0);
    const outcomes = [
      { key: 'completed', label: 'completed', get: (x) => x.completed },
      { key: 'failed', label: 'failed', get: (x) => x.failed },
      { key: 'timedout', label: 'timed out', get: (x) => x.timedOut },
      { key: 'cancelled', label: 'cancelled', get: (x) => x.cancelled },
    ];
    const jobs = barChart('jobs', b, secs, outcomes);
    const states = [
      { key: 'running', label: 'running', get: (x) => x.workers && x.workers.running },
      { key: 'idle', label: 'idle', get: (x) => x.workers && x.workers.idle },
      { key: 'initializing', label: 'initializing', get: (x) => x.workers && x.workers.initializing },
      { key: 'throttled', label: 'throttled', get: (x) => x.workers && x.workers.throttled },
      { key: 'unhealthy', label: 'unhealthy', get: (x) => x.workers && x.workers.unhealthy },
      { key: 'frozen', label: 'frozen', get: (x) => x.workers && x.workers.frozen },
    ];
    const workers = barChart('workers', b, secs, states);
    const cold = barChart('cold', b, secs, [{ key: 'cold', label: 'cold starts', get: (x) => x.coldStarts }]);
    const count = (v) => String(v);
    const queue = lineChart('queue', b, secs, [{ key: 'queue', label: 'queued', get: (x) => x.queueDepth ?? null }], count);
    const lat = (f) => [
      { key: 'p50', label: 'p50', get: (x) => (x[f] ? x[f].p50 : null) },
      { key: 'p95', label: 'p95', get: (x) => (x[f] ? x[f].p95 : null) }];
    const delay = lineChart('delay', b, secs, lat('delayMs'), latency);
    const exec = lineChart('execution', b, secs, lat('executionMs'), latency);
    const lastOf = (f) => { for (let i = b.length - 1; i >= 0; i--) if (b[i][f]) return b[i][f]; return null; };
    const latSummary = (f) => { const p = lastOf(f); return p ? 'last p50 ' + latency(p.p50) + ' · p95 ' + latency(p.p95) : 'no jobs ran'; };
    const depths = b.map((x) => x.queueDepth).filter((d) => d !== undefined && d !== null);
    clear(body,
      chart('jobs', 'Jobs per ' + per, sum((x) => x.completed) + ' completed · ' + (sum((x) => x.failed) + sum((x) => x.timedOut)) + ' failed · ' + sum((x) => x.cancelled) + ' cancelled', jobs, outcomes),
      chart('queue', 'Queue depth', depths.length ? 'peak ' + Math.max(...depths) + ' in the ' + (win === 'hour' ? 'hour' : 'day') : 'not sampled', queue, null),
      chart('delay', 'Delay time', latSummary('delayMs'), delay, lat('delayMs')),
      chart('execution', 'Execution time', latSummary('executionMs'), exec, lat('executionMs')),
      chart('workers', 'Workers by state', '', workers, states),
      chart('cold', 'Cold starts', cold.total + ' in the ' + (win === 'hour' ? 'hour' : 'day'), cold, null));
  }

  // Every poll: a job run from the form shows in its minute's bar at once.
  async function refresh() {
    const w = win;
    const v = await api(base + '/metrics?window=' + w);
    if (w === win) draw(v); // not a window switched away from meanwhile
  }
  return { panel, refresh };
}

// ---------- one endpoint ----------

function endpointView(main, id) {
  const base = '/v1/endpoints/' + encodeURIComponent(id);
  const head = h('div.page-head');
  const stats = h('div.metrics', { style: 'margin-bottom:16px' });
  const note = h('div');
  const workersBody = h('div');
  const jobsBody = h('div#jobs');
  const plots = plotsPanel(base);
  const deploys = deploysPanel(id);
  const models = modelsPanel(id);
  const actErr = h('div.form-error#job-action-error', { style: 'padding: 0 16px' });
  const expanded = new Set();
  const details = new Map(); // job id → last full view (with stream)
  let filter = '';
  let endpoint = null;

  // Submit a job and watch it.
  const input = h('textarea#run-input', { spellcheck: 'false', 'aria-label': 'Job input (JSON)' });
  input.value = sessionStorage.getItem('berth.lastInput.' + id) || '{\n  "prompt": "hello"\n}';
  const formErr = h('div.form-error#run-error');
  const runBtn = h('button.btn.primary#run-submit', { type: 'submit' }, 'Run job');
  const watch = h('div#job-watch');
  let watching = null;
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      clear(formErr);
      let parsed;
      try { parsed = JSON.parse(input.value); } catch (e) { clear(formErr, 'Input is not valid JSON: ' + e.message); return; }
      runBtn.disabled = true;
      try {
        const r = await api('/v2/' + encodeURIComponent(id) + '/run', { method: 'POST', body: { input: parsed } });
        sessionStorage.setItem('berth.lastInput.' + id, input.value);
        watching = r.id;
        expanded.add(r.id);
        renderWatch({ id: r.id, status: r.status });
        poll();
      } catch (e) {
        if (!(e instanceof AuthError)) clear(formErr, e.message);
      } finally {
        runBtn.disabled = false;
      }
    },
  }, h('label.field', { for: 'run-input' }, 'Input (JSON: the job\'s "input")'), input, formErr,
  h('div.row', runBtn, h('span.small.faint', 'POST /v2/' + id + '/run')), watch);

  function renderWatch(j) {
    if (!j) { clear(watch); return; }
    const out = [];
    if (j.status === 'IN_PROGRESS' && j.stream && j.stream.length) out.push(h('div.small.muted', 'Stream'), h('pre.code#job-stream', j.stream.map((c) => JSON.stringify(c.output ?? c)).join('\n')));
    if (j.output !== undefined) out.push(h('div.small.muted', j.status === 'IN_PROGRESS' ? 'Progress' : 'Output'), h('pre.code#job-output', pretty(j.output)));
    if (j.error) out.push(h('div.small.muted', 'Error'), h('pre.code#job-error', j.error));
    clear(watch, h('div.watch', { 'data-job': j.id, 'data-status': j.status },
      h('div.row', h('span.mono.small', j.id), statusPill(j.status)),
      h('div.small.muted', 'Delay ' + dur(j.delayTime) + ' · execution ' + dur(j.executionTime) + (j.workerId ? ' · worker ' + j.workerId : '')),
      out));
  }

  const filters = h('div.seg#job-filter');
  const setFilter = (f) => { filter = f; drawFilters(); poll(); };
  function drawFilters() {
    clear(filters, [['', 'All'], ['IN_QUEUE', 'Queued'], ['IN_PROGRESS', 'Running'], ['COMPLETED', 'Completed'], ['FAILED,TIMED_OUT', 'Failed'], ['CANCELLED', 'Cancelled']]
      .map(([f, text]) => h('button', { type: 'button', class: f === filter ? 'on' : null, onclick: () => setFilter(f) }, text)));
  }
  drawFilters();

  clear(main, head, note, stats, plots.panel,
    h('div.two-col',
      h('div.stack',
        h('section.panel', h('header', h('h2', 'Workers')), workersBody),
        h('section.panel', h('header', h('h2', 'Run a job')), h('div.body', form))),
      h('section.panel', h('header', h('h2', 'Jobs'), filters), actErr, jobsBody)),
    deploys.builds,
    h('div.two-col', { style: 'margin-top:16px' }, models.panel, deploys.releases));

  async function act(path, jobId) {
    clear(actErr);
    try {
      await api('/v2/' + encodeURIComponent(id) + '/' + path + '/' + encodeURIComponent(jobId), { method: 'POST' });
    } catch (e) {
      if (!(e instanceof AuthError)) clear(actErr, path + ' ' + short(jobId) + ': ' + e.message);
    }
    poll();
  }

  function jobDetail(j) {
    const d = details.get(j.id) || j;
    const blocks = [];
    if (d.resultExpired) {
      blocks.push(h('div.full.small.muted', 'The result expired (kept 1 minute after /runsync, 30 minutes after /run, as on RunPod): only the job\'s status, times and worker are still known.'));
    } else blocks.push(h('div', h('h3', 'Input'), h('pre.code', d.input === undefined ? '—' : pretty(d.input))));
    if (d.status === 'IN_PROGRESS' && d.stream && d.stream.length) blocks.push(h('div', h('h3', 'Stream (not yet read by a client)'), h('pre.code', d.stream.map((c) => JSON.stringify(c.output ?? c)).join('\n'))));
    if (!d.resultExpired && d.status !== 'IN_QUEUE' && (d.status !== 'IN_PROGRESS' || d.output !== undefined)) {
      blocks.push(h('div', h('h3', d.status === 'IN_PROGRESS' ? 'Progress' : 'Output'), h('pre.code', d.output === undefined ? '—' : pretty(d.output))));
    }
    if (d.error) blocks.push(h('div.full', h('h3', 'Error'), h('pre.code', d.error)));
    const actions = [];
    if (d.status === 'IN_QUEUE' || d.status === 'IN_PROGRESS') actions.push(h('button.btn.small.danger.job-cancel', { onclick: () => act('cancel', j.id) }, 'Cancel'));
    if (!d.resultExpired && (d.status === 'FAILED' || d.status === 'TIMED_OUT')) actions.push(h('button.btn.small.job-retry', { onclick: () => act('retry', j.id) }, 'Retry'));
    if (d.workerId) actions.push(h('a.btn.small', { href: '#/logs/worker/' + encodeURIComponent(id) + '/' + encodeURIComponent(d.workerId) + '/' + encodeURIComponent(j.id) }, 'Logs of this job'));
    return h('tr.detail', h('td', { colspan: 6 },
      h('div.row.small.muted', h('span.mono', j.id), h('span', 'created ' + ago(d.createdAt)), d.retries ? h('span', d.retries + ' retries') : null,
        d.lowPriority ? h('span', 'low priority') : null, h('span.spacer'), actions),
      h('div.detail-grid', blocks)));
  }

  function jobRows(jobs) {
    if (!jobs.length) return h('div.empty', filter ? 'No jobs in this state.' : 'No jobs yet. Run one with the form.');
    const body = h('tbody');
    for (const j of jobs) {
      const open = expanded.has(j.id);
      const toggle = () => { if (expanded.has(j.id)) expanded.delete(j.id); else expanded.add(j.id); poll(); };
      body.append(h('tr.clickable', { class: open ? 'open' : null, 'data-job': j.id, 'data-status': j.status,
        tabindex: 0, 'aria-expanded': open ? 'true' : 'false', onclick: toggle,
        onkeydown: (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); toggle(); } } },
      h('td', { 'data-label': 'Status' }, statusPill(j.status)),
      h('td.mono', { 'data-label': 'Job', title: j.id }, short(j.id)),
      h('td.num', { 'data-label': 'Created' }, ago(j.createdAt), j.resultExpired ? h('div.small.faint.expired', 'result expired') : null),
      h('td.num', { 'data-label': 'Delay' }, dur(j.delayTime)),
      h('td.num', { 'data-label': 'Execution' }, dur(j.executionTime)),
      h('td.mono.hide-phone', { 'data-label': 'Worker' }, j.workerId ? short(j.workerId) : '—')));
      if (open) body.append(jobDetail(j));
    }
    return h('table.list', h('thead', h('tr', ['Status', 'Job', 'Created', 'Delay', 'Execution'].map((t) => h('th', t)), h('th.hide-phone', 'Worker'))), body);
  }

  function workerRows(e, gpus) {
    const ws = e.workers || [];
    if (!ws.length) return h('div.empty', 'No workers. ', e.workersMin ? 'Starting…' : 'Workers start when a job is queued (workersMin is 0).');
    const gpuBy = new Map(gpus.map((g) => [g.holder, g]));
    return h('table.list#workers', h('tbody', ws.map((w) => {
      const g = gpuBy.get(w.id);
      return h('tr', { 'data-worker': w.id },
        h('td', { 'data-label': 'Worker' }, h('div.mono.small', w.id), w.statusMessage ? h('div.small.muted', w.statusMessage) : null,
          h('div.small.faint', (w.external ? 'external · ' : '') + (w.lastSeenAt ? 'seen ' + ago(w.lastSeenAt) : 'not seen yet'))),
        h('td', { 'data-label': 'State' }, workerPill(w.state), w.jobsInProgress ? h('span.small.muted', ' ' + w.jobsInProgress + ' job' + (w.jobsInProgress > 1 ? 's' : '')) : null),
        h('td.small', { 'data-label': 'GPU' }, g ? '#' + g.index + ' ' + g.name : (w.gpu ? w.gpu.displayName : 'CPU')),
        h('td', w.external ? null : h('a.btn.small.logs-link', { href: '#/logs/worker/' + encodeURIComponent(id) + '/' + encodeURIComponent(w.id) }, 'Logs')));
    })));
  }

  return {
    async refresh() {
      const qs = '?limit=50' + (filter ? '&status=' + filter : '');
      const [e, q, jobs, gpus] = await Promise.all([api(base + '?includeWorkers=true&includeTemplate=true'), api(base + '/queue'),
        api(base + '/jobs' + qs), loadGPUs(), plots.refresh(), deploys.refresh()]);
      endpoint = e;
      const open = jobs.filter((j) => expanded.has(j.id) && (j.status === 'IN_PROGRESS' || j.status === 'IN_QUEUE' || j.id === watching));
      await Promise.all(open.map((j) => api(base + '/jobs/' + encodeURIComponent(j.id)).then((d) => details.set(j.id, d)).catch(() => {})));
      for (const j of jobs) if (!open.includes(j)) details.delete(j.id);
      if (watching) {
        const w = details.get(watching) || jobs.find((j) => j.id === watching);
        if (w) renderWatch(w);
        else api(base + '/jobs/' + encodeURIComponent(watching)).then(renderWatch).catch(() => {});
      }
      const hl = endpointHealth(e, q);
      const tpl = e.template;
      clear(head, h('div',
        h('a.crumb', { href: '#/' }, '← Endpoints'),
        h('div.row', h('h1', e.name || e.id), hl.pill),
        h('div.sub', h('span.mono', e.id), tpl ? ' · ' + tpl.imageName : '', ' · workers ' + e.workersMin + '–' + e.workersMax,
          ' · ' + (e.computeType === 'CPU' ? 'CPU' : (e.gpuCount || 1) + '× ' + ((e.gpuTypeIds || []).join(', ') || 'any GPU')))));
      clear(note, hl.reason ? h('div.note', { style: 'margin-bottom:12px' }, hl.reason) : null,
        hl.lastError ? h('div.note.bad', { style: 'margin-bottom:12px' }, hl.lastError) : null);
      clear(stats, metric('Queued', q.inQueue, q.inQueue > 0 ? 'warn' : null), metric('Running', q.inProgress),
        metric('Oldest', q.inQueue ? age(q.oldestWaitMs) : '—'), metric('Done', q.completed + (q.failed ? ' / ' + q.failed + '✗' : ''), q.failed ? 'warn' : null));
      clear(workersBody, workerRows(e, gpus));
      models.draw(e, hl.reason || '');
      // Rows are rebuilt on every refresh: keep the keyboard focus on its job.
      const focused = document.activeElement && jobsBody.contains(document.activeElement) ? document.activeElement.dataset.job : null;
      clear(jobsBody, jobRows(jobs));
      if (focused) { const row = jobsBody.querySelector('tr[data-job="' + CSS.escape(focused) + '"]'); if (row) row.focus(); }
    },
  };
}

// ---------- builds, releases and models of an endpoint ----------

const BSTATUS = {
  PENDING: ['warn', 'pending'], BUILDING: ['run spin', 'building'], UPLOADING: ['run spin', 'uploading'], TESTING: ['run spin', 'testing'],
  COMPLETED: ['ok', 'completed'], FAILED: ['bad', 'failed'], CANCELLED: ['', 'cancelled'], TEST_FAILED: ['bad', 'test failed'],
};
const buildDone = (st) => st === 'COMPLETED' || st === 'FAILED' || st === 'CANCELLED' || st === 'TEST_FAILED';
function buildPill(st) {
  const [cls, text] = BSTATUS[st] || ['', String(st || '').toLowerCase()];
  return h('span.pill', { class: cls, 'data-status': st }, text);
}

// buildSource is where a build's code came from: the commit and branch of
// a git build, else the uploaded context's size.
function buildSource(b) {
  if (b.commitHash) {
    const msg = (b.commitMessage || '').split('\n')[0];
    return [h('span.mono', b.commitHash.slice(0, 7)), b.branch ? h('span.pill.plain', b.branch) : null,
      msg ? h('div.small.muted.commit-msg', msg) : null];
  }
  return h('span.small.muted', 'upload · ' + bytes(b.contextBytes || 0) + (b.reused ? ' · reused' : ''));
}

function took(b) {
  if (!b.startedAt) return '—';
  const end = b.completedAt ? new Date(b.completedAt) : new Date();
  return dur(end - new Date(b.startedAt));
}

function buildHref(ep, id) { return '#/build/' + encodeURIComponent(ep) + '/' + encodeURIComponent(id); }

// deploysPanel lists an endpoint's builds (GET /v2/serverless/ID/builds)
// and releases (…/releases), newest first.
function deploysPanel(ep) {
  const base = '/v2/serverless/' + encodeURIComponent(ep);
  const buildsBody = h('div#builds');
  const relBody = h('div#releases');
  const rollout = h('span.small.muted#rollout');
  const builds = h('section.panel', { style: 'margin-top:16px' }, h('header', h('h2', 'Builds'),
    h('span.small.faint', 'berth deploy DIR, or POST ' + base + '/builds')), buildsBody);
  const releases = h('section.panel', h('header', h('h2', 'Releases'), rollout), relBody);

  function drawBuilds(list) {
    if (!list.length) { clear(buildsBody, h('div.empty', 'No builds. berth deploy DIR builds the image from a Dockerfile and rolls it out.')); return; }
    const body = h('tbody');
    for (const b of list) {
      body.append(h('tr', { 'data-build': b.id, 'data-status': b.status },
        h('td', { 'data-label': 'Status' }, buildPill(b.status)),
        h('td.mono', { 'data-label': 'Build', title: b.id }, h('a.build-link', { href: buildHref(ep, b.id) }, short(b.id))),
        h('td', { 'data-label': 'Source' }, buildSource(b)),
        h('td.mono.small.image', { 'data-label': 'Image' }, b.imageName || '—'),
        h('td.num', { 'data-label': 'Started', title: b.startedAt || '' }, b.startedAt ? ago(b.startedAt) : (b.status === 'PENDING' ? 'waiting' : '—')),
        h('td.num', { 'data-label': b.completedAt ? 'Took' : 'Running' }, took(b)),
        h('td.num', { 'data-label': 'Release' }, b.releaseVersion ? 'v' + b.releaseVersion : '—')));
      if (b.error) {
        body.append(h('tr.detail.build-error', { 'data-build': b.id }, h('td', { colspan: 7 },
          h('pre.code.error-text', b.error.split('\n').slice(0, 14).join('\n')))));
      }
    }
    clear(buildsBody, h('table.list', h('thead', h('tr', ['Status', 'Build', 'Source', 'Image', 'Started', 'Took', 'Release'].map((t) => h('th', t)))), body));
  }

  function drawReleases(r) {
    const ro = r.rollout || {};
    clear(rollout, ro.workersTotal ? (ro.inProgress ? 'rolling out: ' : '') + ro.workersOnLatest + ' of ' + ro.workersTotal + ' workers on v' + r.endpointVersion : '');
    const rels = r.releases || [];
    if (!rels.length) { clear(relBody, h('div.empty', 'No releases yet.')); return; }
    clear(relBody, h('table.list', h('thead', h('tr', ['Version', 'Source', 'Build', 'Workers', 'Time', 'Changed'].map((t) => h('th', t)))),
      h('tbody', rels.map((v) => h('tr', { 'data-release': v.version },
        h('td', { 'data-label': 'Version' }, h('b', 'v' + v.version), v.version === r.endpointVersion ? [' ', h('span.pill.ok.current', 'current')] : null),
        h('td', { 'data-label': 'Source' }, h('span.pill.plain', { class: v.source === 'GIT_BUILD' ? 'run' : null }, v.source)),
        h('td.mono', { 'data-label': 'Build' }, v.buildId ? h('a', { href: buildHref(ep, v.buildId), title: v.buildId }, short(v.buildId)) : '—'),
        h('td.num', { 'data-label': 'Workers' }, v.workerCount),
        h('td.num', { 'data-label': 'Time', title: v.createdAt }, ago(v.createdAt)),
        h('td.small.muted', { 'data-label': 'Changed' }, (v.diff || []).map((d) => d.field).join(', ') || '—'))))));
  }

  return {
    builds, releases,
    async refresh() {
      const [b, r] = await Promise.all([api(base + '/builds?limit=10').catch((e) => e), api(base + '/releases').catch((e) => e)]);
      if (b instanceof AuthError || r instanceof AuthError) throw b instanceof AuthError ? b : r;
      if (b instanceof Error) clear(buildsBody, h('div.empty', b.message)); else drawBuilds(b.builds || []);
      if (r instanceof Error) clear(relBody, h('div.empty', r.message)); else drawReleases(r);
    },
  };
}

// parseModels reads the Model field: one reference a line (commas too).
function parseModels(text) { return text.split(/[\n,]/).map((x) => x.trim()).filter(Boolean); }

const MODEL_HINT = 'https://huggingface.co/ORG/NAME[:REF], one a line';

// modelsPanel shows and edits an endpoint's model references (the
// console's "Model" field; PATCH /v1/endpoints/ID modelReferences) and
// their download's progress or failure (the endpoint's status reason).
function modelsPanel(ep) {
  const status = h('div#models-status');
  const input = h('textarea#models-input', { spellcheck: 'false', rows: 3, placeholder: MODEL_HINT, 'aria-label': 'Model references' });
  const err = h('div.form-error#models-error');
  const save = h('button.btn.primary#models-save', { type: 'submit' }, 'Save models');
  let dirty = false, current = null;
  input.addEventListener('input', () => { dirty = true; });
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      clear(err);
      save.disabled = true;
      try {
        const e = await api('/v1/endpoints/' + encodeURIComponent(ep), { method: 'PATCH', body: { modelReferences: parseModels(input.value) } });
        dirty = false;
        draw(e, null);
        poll();
      } catch (e) {
        if (!(e instanceof AuthError)) clear(err, e.message);
      } finally { save.disabled = false; }
    },
  }, h('label.field', { for: 'models-input' }, 'Model (Hugging Face, downloaded once into Berth\'s cache; workers start once complete)'), input, err,
  h('div.row', save, h('span.small.faint', 'empty clears')));
  const panel = h('section.panel#models', h('header', h('h2', 'Models')), h('div.body', status, form));

  function draw(e, reason) {
    const refs = e.modelReferences || [];
    const text = refs.join('\n');
    if (!dirty && text !== current) { input.value = text; current = text; }
    const dl = reason && /^downloading /.test(reason) ? reason : '';
    // reason null: not known yet (just saved); the next poll says.
    let st = null;
    if (dl) st = h('div.note.model-progress', { class: / failed /.test(dl) ? 'bad' : null }, dl);
    else if (refs.length && reason !== null) st = h('div.small.muted.model-ready', 'Complete in the cache: workers start with them.');
    clear(status, refs.length ? h('ul.models', refs.map((r) => h('li.mono.small', r))) : h('div.small.faint', 'No models.'), st);
  }
  return { panel, draw };
}

// buildView is one build: its record, cancel, and its log followed live
// (GET /v2/serverless/EP/builds/ID/logs, server-sent events read from a
// streamed fetch: an EventSource cannot send the Authorization header).
function buildView(main, ep, id) {
  const base = '/v2/serverless/' + encodeURIComponent(ep) + '/builds/' + encodeURIComponent(id);
  const head = h('div.page-head');
  const info = h('div');
  const box = h('pre.logbox#log-output', { tabindex: 0 });
  const state = h('span.pill#log-state', 'connecting');
  const cancelBtn = h('button.btn.small.danger#build-cancel', { hidden: true, onclick: async () => {
    cancelBtn.disabled = true;
    try { const b = await api(base + '/cancel', { method: 'POST' }); draw(b); } catch (e) { if (!(e instanceof AuthError)) clear(info, h('div.note.bad', e.message)); }
  } }, 'Cancel build');
  let stopped = false, ctrl = null, retry = null, done = false, last = null;
  clear(main, head, info, h('section.panel', h('header', h('div.row', h('h2', 'Log'), state), h('div.row', cancelBtn)), box));

  function setState(cls, text) { state.className = 'pill ' + cls; clear(state, text); }

  function draw(b) {
    last = b;
    done = buildDone(b.status);
    cancelBtn.hidden = done;
    clear(head, h('div',
      h('a.crumb', { href: '#/endpoint/' + encodeURIComponent(ep) }, '← Endpoint ' + ep),
      h('div.row', h('h1', 'Build ' + short(id)), h('span#build-status', buildPill(b.status))),
      h('div.sub.mono', b.imageName || '')));
    clear(info, h('section.panel', { style: 'margin-bottom:16px' }, h('div.body', h('dl.kv',
      h('dt', 'Build'), h('dd.mono', b.id),
      h('dt', 'Source'), h('dd', buildSource(b)),
      h('dt', 'Dockerfile'), h('dd.mono', b.dockerfile || '—'),
      h('dt', 'Started'), h('dd', b.startedAt ? new Date(b.startedAt).toLocaleString() + ' (' + ago(b.startedAt) + ')' : '—'),
      h('dt', 'Completed'), h('dd', b.completedAt ? new Date(b.completedAt).toLocaleString() + ' · took ' + took(b) : '—'),
      h('dt', 'Release'), h('dd', b.releaseVersion ? 'v' + b.releaseVersion : '—')),
    b.error ? h('pre.code.error-text#build-error', b.error) : null)));
  }

  const again = (delay) => { if (!stopped) retry = setTimeout(() => { if (!stopped) run(); }, delay); };

  // run reads the stream: the log so far, then its lines as they come
  // until the build ends. A stream that ends while the build has not
  // (still PENDING, or cut) is opened again, the log shown afresh.
  async function run() {
    ctrl = new AbortController();
    try {
      const res = await fetch(base + '/logs', { headers: { Authorization: 'Bearer ' + apiKey }, signal: ctrl.signal, cache: 'no-store' });
      if (res.status === 401) { signOut('Berth refused the API key. Enter it again.'); return; }
      if (!res.ok) {
        let msg = res.status + ' ' + res.statusText;
        try { const b = await res.json(); msg = b.message || b.error || msg; } catch { /* text */ }
        setState('bad', msg);
        return;
      }
      clear(box);
      setState('ok spin', 'live');
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let partial = '';
      for (;;) {
        const { value, done: end } = await reader.read();
        if (end) break;
        const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
        const events = (partial + dec.decode(value, { stream: true })).split('\n\n');
        partial = events.pop();
        for (const ev of events) {
          for (const l of ev.split('\n')) {
            if (!l.startsWith('data:')) continue;
            let line = l.slice(5).trim();
            try { line = JSON.parse(line).line; } catch { /* plain */ }
            box.append(buildLine(line));
          }
        }
        while (box.childNodes.length > MAX_LOG_LINES) box.firstChild.remove();
        if (atEnd) box.scrollTop = box.scrollHeight;
      }
      const b = await api(base).catch(() => last);
      if (b) draw(b);
      if (b && buildDone(b.status)) { setState(b.status === 'COMPLETED' ? 'ok' : b.status === 'CANCELLED' ? '' : 'bad', 'ended: ' + BSTATUS[b.status][1]); return; }
      setState('warn spin', b && b.status === 'PENDING' ? 'waiting for the build to start' : 'reconnecting');
      again(1000);
    } catch (e) {
      if (stopped) return;
      setState('bad', 'disconnected (' + e.message + '), retrying');
      again(3000);
    }
  }

  run();
  return {
    async refresh() { if (!done) draw(await api(base)); else if (!last) draw(await api(base)); },
    stop() { stopped = true; clearTimeout(retry); if (ctrl) ctrl.abort(); },
  };
}

// buildLine colours a build's log line: Berth's own, a step, an error.
function buildLine(text) {
  const cls = text.startsWith('berth:') ? 'l-meta' : /^Step \d+\/\d+ : /.test(text) ? 'l-job' : /\berror\b|failed/i.test(text) ? 'l-error' : null;
  return h('div', { class: cls }, text || '\u00a0');
}

// ---------- logs ----------

const MAX_LOG_LINES = 5000;

// logLine is one line of a container's log, coloured by its level (the
// level field of runpod-python's JSON lines, or a level word).
function logLine(text) {
  let level = '';
  if (text.startsWith('{')) {
    try { level = String(JSON.parse(text).level || ''); } catch { /* not JSON */ }
  }
  if (!level) level = (text.match(/\b(ERROR|FATAL|PANIC|WARN(?:ING)?|DEBUG|TRACE)\b/i) || [''])[0];
  level = level.toUpperCase();
  const cls = level === 'ERROR' || level === 'FATAL' || level === 'PANIC' ? 'l-error' :
    level.startsWith('WARN') ? 'l-warn' : level === 'DEBUG' || level === 'TRACE' ? 'l-debug' : null;
  return h('div', { class: cls }, text || '\u00a0');
}

function logsView(main, kind, args) {
  let path, title, back;
  if (kind === 'worker') {
    const [ep, wid, job] = args;
    path = '/v1/endpoints/' + encodeURIComponent(ep) + '/workers/' + encodeURIComponent(wid) + '/logs';
    if (job) path += '?jobId=' + encodeURIComponent(job) + '&';
    else path += '?';
    title = job ? 'Job ' + job : 'Worker ' + wid;
    back = h('a.crumb', { href: '#/endpoint/' + encodeURIComponent(ep) }, '← Endpoint ' + ep);
  } else {
    const [pod] = args;
    path = '/v1/pods/' + encodeURIComponent(pod) + '/logs?';
    title = 'Pod ' + pod;
    back = h('a.crumb', { href: '#/pods' }, '← Pods');
  }
  const box = h('pre.logbox#log-output', { tabindex: 0 });
  const state = h('span.pill#log-state', 'connecting');
  let follow = true, ctrl = null, stopped = false;
  const followBtn = h('button.btn.small#log-follow', { onclick: () => { follow = !follow; drawFollow(); if (follow) box.scrollTop = box.scrollHeight; } });
  const drawFollow = () => clear(followBtn, follow ? 'Pause scrolling' : 'Follow');
  drawFollow();
  const wrapBtn = h('button.btn.small', { onclick: () => box.classList.toggle('nowrap') }, 'Wrap');
  const clearBtn = h('button.btn.small', { onclick: () => clear(box) }, 'Clear');
  clear(main, h('div.page-head', h('div', back, h('h1', title), h('div.sub', 'stdout and stderr, following live'))),
    h('section.panel', h('header', h('div.row', state), h('div.row', followBtn, wrapBtn, clearBtn)), box));

  function setState(cls, text) { state.className = 'pill ' + cls; clear(state, text); }

  // A follow that ends after a long while was cut (a proxy, Berth's write
  // deadline on a silent container, a restart): connect again, replacing
  // what is shown by the last 500 lines. One that ends at once is a
  // container that has stopped.
  let retry = null;
  const again = (delay) => {
    if (stopped) return;
    retry = setTimeout(() => { if (!stopped) { clear(box); run(); } }, delay);
  };

  async function run() {
    ctrl = new AbortController();
    const started = Date.now();
    try {
      const res = await fetch(path + 'follow=true&tail=500', { headers: { Authorization: 'Bearer ' + apiKey }, signal: ctrl.signal, cache: 'no-store' });
      if (res.status === 401) { signOut('Berth refused the API key. Enter it again.'); return; }
      if (!res.ok) {
        let msg = res.status + ' ' + res.statusText;
        try { const b = await res.json(); msg = b.message || b.error || msg; } catch { /* text */ }
        setState('bad', msg);
        return;
      }
      setState('ok spin', 'live');
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let partial = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
        const lines = (partial + dec.decode(value, { stream: true })).split('\n');
        partial = lines.pop();
        for (const l of lines) box.append(logLine(l));
        while (box.childNodes.length > MAX_LOG_LINES) box.firstChild.remove();
        if (follow && (atEnd || box.childNodes.length <= lines.length)) box.scrollTop = box.scrollHeight;
      }
      if (partial) box.append(logLine(partial));
      if (Date.now() - started > 30000) { setState('warn spin', 'reconnecting'); again(1000); return; }
      setState('', 'ended: the container stopped');
    } catch (e) {
      if (stopped) return;
      setState('bad', 'disconnected (' + e.message + '), retrying');
      again(3000);
    }
  }
  run();
  return { stop() { stopped = true; clearTimeout(retry); if (ctrl) ctrl.abort(); } };
}

// ---------- GPUs ----------

function gpusView(main) {
  const body = h('div');
  clear(main, h('div.page-head', h('div', h('h1', 'GPUs'), h('div.sub', 'This host\'s GPUs, found by NVML, and who holds each.'))), body);
  return {
    async refresh() {
      const [gpus, eps, pods] = await Promise.all([loadGPUs(), api('/v1/endpoints?includeWorkers=true'), orNone(api('/v1/pods'))]);
      const owner = new Map();
      for (const e of eps) for (const w of e.workers || []) owner.set(w.id, ['worker of ', h('a', { href: '#/endpoint/' + encodeURIComponent(e.id) }, e.name || e.id)]);
      for (const p of pods || []) owner.set(p.id, ['pod ', h('a', { href: '#/pods' }, p.name || p.id)]);
      if (!gpus.length) {
        clear(body, h('div.panel.empty', h('p', 'No GPUs found.'), h('p.small', 'Berth lists what NVML reports: none without an NVIDIA driver, or in a build without cgo. Workers and pods run on CPU.')));
        return;
      }
      clear(body, h('div.grid-cards', gpus.map((g) => h('div.panel.card', { 'data-gpu': g.uuid },
        h('div.title', h('div', h('div.name', '#' + g.index + ' ' + g.name), h('div.id', g.uuid)),
          g.holder ? h('span.pill.run', 'in use') : h('span.pill.ok', 'free')),
        h('dl.kv', h('dt', 'Type'), h('dd', g.gpuTypeId || '—'), h('dt', 'Memory'), h('dd', g.memoryInMiB ? (g.memoryInMiB / 1024).toFixed(0) + ' GB' : '—'),
          h('dt', 'PCI bus'), h('dd.mono', g.pciBusId || '—'),
          h('dt', 'Holder'), h('dd', g.holder ? [owner.get(g.holder) || '', ' ', h('span.mono.small', g.holder)] : '—'))))));
    },
  };
}

// ---------- pods ----------

function podsView(main) {
  const body = h('div');
  clear(main, h('div.page-head', h('div', h('h1', 'Pods'), h('div.sub', 'Long-lived containers. Ports open in a new tab.'))), body);
  return {
    async refresh() {
      const pods = await api('/v1/pods') || [];
      if (!pods.length) {
        clear(body, h('div.panel.empty', h('p', 'No pods.'), h('p.small', 'Create one with POST /v1/pods.')));
        return;
      }
      const host = location.hostname;
      clear(body, h('div.grid-cards', pods.map((p) => {
        const ports = (p.ports || []).map((spec) => {
          const [port, proto] = String(spec).split('/');
          const hp = p.portMappings && p.portMappings[port];
          // The host the browser reached Berth at: Docker publishes the
          // port there too, and it is a name the browser can resolve.
          const where = host + ':' + hp;
          if (!hp) return h('span.pill.plain', port + '/' + (proto || 'tcp'));
          if (proto === 'http') return h('a.btn.small.port-link', { href: 'http://' + where + '/', target: '_blank', rel: 'noopener noreferrer' }, port + ' ↗');
          return h('span.pill.plain', { title: 'tcp' }, port + ' → ' + where);
        });
        const running = p.desiredStatus === 'RUNNING';
        return h('div.panel.card', { 'data-pod': p.id },
          h('div.title', h('div', h('div.name', p.name || p.id), h('div.id', p.id)),
            h('span.pill', { class: running ? 'ok' : p.desiredStatus === 'EXITED' ? '' : 'warn' }, (p.desiredStatus || '').toLowerCase())),
          h('dl.kv', h('dt', 'Image'), h('dd.mono', p.imageName || p.image || '—'),
            h('dt', 'GPU'), h('dd', p.gpu ? p.gpu.count + '× ' + (p.gpu.displayName || p.gpu.id) : (p.gpuCount ? p.gpuCount + '× (not placed)' : 'CPU')),
            h('dt', 'Started'), h('dd', p.lastStartedAt ? ago(p.lastStartedAt) : '—')),
          p.statusMessage ? h('div.note', p.statusMessage) : null,
          h('div.row', ports.length ? ports : h('span.small.faint', 'no ports'), h('span.spacer'),
            h('a.btn.small.logs-link', { href: '#/logs/pod/' + encodeURIComponent(p.id) }, 'Logs')));
      })));
    },
  };
}

// ---------- templates and volumes ----------

function templatesView(main) {
  const body = h('section.panel');
  clear(main, h('div.page-head', h('div', h('h1', 'Templates'), h('div.sub', 'Images and settings endpoints and pods are made from.'))), body);
  return {
    async refresh() {
      const ts = await api('/v1/templates?includeEndpointBoundTemplates=true') || [];
      if (!ts.length) { clear(body, h('div.empty', 'No templates. Create one with POST /v1/templates.')); return; }
      clear(body, h('table.list', h('thead', h('tr', ['Name', 'Image', 'Kind', 'Ports', 'Env', 'Created'].map((t) => h('th', t)))),
        h('tbody', ts.map((t) => h('tr', { 'data-template': t.id },
          h('td', { 'data-label': 'Name' }, h('div', t.name), h('div.faint.mono.small', t.id)),
          h('td.mono.small', { 'data-label': 'Image' }, t.imageName),
          h('td', { 'data-label': 'Kind' }, h('span.pill.plain', { class: t.isServerless ? 'run' : null }, t.isServerless ? 'serverless' : 'pod')),
          h('td.small', { 'data-label': 'Ports' }, (t.ports || []).join(', ') || '—'),
          h('td.num', { 'data-label': 'Env' }, Object.keys(t.env || {}).length),
          h('td.num', { 'data-label': 'Created' }, ago(t.createdAt)))))));
    },
  };
}

function volumesView(main) {
  const body = h('section.panel');
  clear(main, h('div.page-head', h('div', h('h1', 'Network volumes'), h('div.sub', 'Folders under the data directory, shared by pods and workers.'))), body);
  return {
    async refresh() {
      const vs = await api('/v1/networkvolumes') || [];
      if (!vs.length) { clear(body, h('div.empty', 'No network volumes. Create one with POST /v1/networkvolumes.')); return; }
      clear(body, h('table.list', h('thead', h('tr', ['Name', 'Size', 'Used', 'Path', 'Created'].map((t) => h('th', t)))),
        h('tbody', vs.map((v) => {
          const pct = v.size ? Math.min(100, (v.usedBytes || 0) / (v.size * 1e9) * 100) : 0;
          return h('tr', { 'data-volume': v.id },
            h('td', { 'data-label': 'Name' }, h('div', v.name), h('div.faint.mono.small', v.id)),
            h('td.num', { 'data-label': 'Size' }, v.size + ' GB'),
            h('td', { 'data-label': 'Used' }, h('div.small', bytes(v.usedBytes)), h('div.gpu-bar', { style: 'width:120px' }, h('span', { style: 'width:' + pct.toFixed(1) + '%' }))),
            h('td.mono.small', { 'data-label': 'Path' }, v.path || '—'),
            h('td.num', { 'data-label': 'Created' }, ago(v.createdAt)));
        }))));
    },
  };
}

// ---------- API keys ----------

// keysView lists the API keys (never their secrets) and makes, disables,
// enables and deletes them; it needs an All key (docs/keys.md).
function keysView(main) {
  const body = h('section.panel');
  const msg = h('div.form-error#keys-error');
  const name = h('input#key-name', { placeholder: 'name', 'aria-label': 'Key name' });
  const perm = h('select#key-permission', { 'aria-label': 'Permission' },
    ['ALL', 'READ_ONLY', 'RESTRICTED'].map((p) => h('option', { value: p }, p)));
  const grants = h('input#key-endpoints', { placeholder: 'RESTRICTED: ENDPOINT_ID=READ_WRITE, ID2=READ', 'aria-label': 'Endpoint grants' });
  const shown = h('div#key-secret');
  let v;
  const form = h('form.row', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      clear(msg); clear(shown);
      const endpoints = {};
      for (const part of grants.value.split(',').map((x) => x.trim()).filter(Boolean)) {
        const [id, lvl] = part.split('=');
        endpoints[id.trim()] = (lvl || 'READ').trim().toUpperCase();
      }
      try {
        const k = await api('/v1/keys', { method: 'POST', body: { name: name.value.trim(), permission: perm.value, endpoints } });
        clear(shown, h('div.panel', h('div', 'Key ', h('b', k.name), ' created. Its secret, shown only this once:'), h('code.mono#key-secret-value', k.key)));
        name.value = ''; grants.value = '';
        await v.refresh();
      } catch (e) { if (!(e instanceof AuthError)) clear(msg, e.message); }
    },
  }, name, perm, grants, h('button.btn.primary#key-create', { type: 'submit' }, 'Create key'));
  clear(main, h('div.page-head', h('div', h('h1', 'API keys'), h('div.sub', 'All, Read Only, or Restricted to endpoints. Secrets are shown once and stored hashed.'))),
    form, msg, shown, body);
  const act = async (method, id, b) => {
    clear(msg);
    try { await api('/v1/keys/' + encodeURIComponent(id), { method, body: b }); await v.refresh(); } catch (e) { if (!(e instanceof AuthError)) clear(msg, e.message); }
  };
  v = {
    async refresh() {
      let ks;
      try { ks = await api('/v1/keys') || []; } catch (e) {
        if (e.status === 403) { clear(body, h('div.empty#keys-forbidden', e.message)); return; }
        throw e;
      }
      clear(body, h('table.list', h('thead', h('tr', ['Name', 'Prefix', 'Permission', 'Endpoints', 'Enabled', 'Created', 'Last used', ''].map((t) => h('th', t)))),
        h('tbody', ks.map((k) => h('tr', { 'data-key': k.id },
          h('td', { 'data-label': 'Name' }, h('div', k.name), h('div.faint.mono.small', k.id)),
          h('td.mono', { 'data-label': 'Prefix' }, k.prefix + '…'),
          h('td', { 'data-label': 'Permission' }, k.permission),
          h('td.mono.small', { 'data-label': 'Endpoints' }, Object.entries(k.endpoints || {}).map(([id, g]) => id + '=' + g).join(', ') || '—'),
          h('td', { 'data-label': 'Enabled' }, k.enabled ? 'yes' : 'no'),
          h('td.num', { 'data-label': 'Created' }, ago(k.createdAt)),
          h('td.num', { 'data-label': 'Last used' }, k.lastUsed ? ago(k.lastUsed) : 'never'),
          h('td', h('button.btn.small.key-toggle', { onclick: () => act('PATCH', k.id, { enabled: !k.enabled }) }, k.enabled ? 'Disable' : 'Enable'), ' ',
            h('button.btn.small.danger.key-delete', { onclick: () => { if (confirm('Delete key ' + k.name + '?')) act('DELETE', k.id); } }, 'Delete')))))));
    },
  };
  return v;
}

// ---------- start ----------

route();
