// hetflow ui: the dashboard page. Plain JS, no build step. The contract with the server and the
// browser tests is ui-contract (routes #/runs, #/runs/ID, #/nodes, #/plans, #/tasks and the DOM hooks below).
// Every string from the API goes in with textContent or setAttribute, never innerHTML.
"use strict";
(function () {
  const TOKEN_KEY = "hetflow.token";
  const GROUP_MIN = 9; // a fan-out with more items than ~8 is drawn as one group node
  const DAGRE_MAX = 300; // above this many (collapsed) nodes dagre takes > 0.5 s: use the layered layout
  const SVGNS = "http://www.w3.org/2000/svg";
  const STATES = ["pending", "waiting", "launching", "running", "succeeded", "failed", "skipped", "stopped"];
  const DONE = new Set(["succeeded", "failed", "skipped", "stopped"]);

  // ---- token: index.html keeps ?token= from the address in sessionStorage; it goes in a header on
  // every fetch and as ?token= on EventSource URLs (which cannot set headers)
  const token = () => sessionStorage.getItem(TOKEN_KEY);

  async function api(path, opts) {
    const o = Object.assign({}, opts || {});
    o.headers = Object.assign({}, o.headers || {});
    const t = token();
    if (t) o.headers.Authorization = "Bearer " + t;
    let resp;
    try {
      resp = await fetch(path, o);
    } catch (e) {
      throw new Error(path + ": the server did not answer (" + e.message + ")");
    }
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.error) msg = resp.status + ": " + body.error;
      } catch (e) { /* not JSON */ }
      throw new Error(msg);
    }
    return resp;
  }
  const getJSON = async (path) => (await api(path)).json();
  const getText = async (path) => (await api(path)).text();
  function streamURL(path) {
    const t = token();
    if (!t) return path;
    return path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(t);
  }
  const enc = encodeURIComponent;

  // ---- small DOM helpers
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) setAttr(e, k, v);
    for (const k of kids) add(e, k);
    return e;
  }
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) setAttr(e, k, v);
    for (const k of kids) add(e, k);
    return e;
  }
  function setAttr(e, k, v) {
    if (v === null || v === undefined || v === false) return;
    if (k === "text") e.textContent = String(v);
    else if (k === "onclick") e.addEventListener("click", v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  function add(e, k) {
    if (k === null || k === undefined || k === false) return;
    if (Array.isArray(k)) k.forEach((x) => add(e, x));
    else e.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  const $ = (sel, root) => (root || document).querySelector(sel);
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

  // ---- formatting
  function fmtTime(t) {
    if (t === null || t === undefined) return "-";
    const d = new Date(t * 1000);
    const p = (n) => String(n).padStart(2, "0");
    const today = new Date();
    const time = p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
    if (d.toDateString() === today.toDateString()) return time;
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + time;
  }
  function fmtDur(s) {
    if (s === null || s === undefined) return "-";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
    return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }
  function fmtCost(c) {
    if (c === null || c === undefined) return "-";
    return c < 0.01 ? "$" + c.toPrecision(2) : "$" + c.toFixed(2);
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "-";
    const gib = b / 2 ** 30;
    return gib >= 1 ? gib.toFixed(1) + " GiB" : (b / 2 ** 20).toFixed(0) + " MiB";
  }
  const fmtGpus = (g) => (g && g.length ? g.join(",") : "-");
  const dash = (v) => (v === null || v === undefined || v === "" ? "-" : String(v));

  // ---- errors and view lifecycle
  function showError(msg) {
    const e = $("#error");
    e.textContent = msg;
    e.hidden = false;
  }
  function clearError() {
    const e = $("#error");
    e.textContent = "";
    e.hidden = true;
  }
  let view = null; // {cleanups: [fn]}
  function newView(name) {
    if (view) view.cleanups.forEach((f) => { try { f(); } catch (e) { /* ignore */ } });
    view = { name: name, cleanups: [], alive: true };
    view.cleanups.push(function () { this.alive = false; }.bind(view));
    document.body.dataset.view = name;
    delete document.body.dataset.ready;
    clearError();
    for (const a of document.querySelectorAll("header nav a")) {
      a.classList.toggle("active", a.getAttribute("href") === "#/" + (name === "run" ? "runs" : name));
    }
    return view;
  }
  function rendered(v) {
    if (!v.alive) return;
    document.body.dataset.ready = "1";
    if (!v.marked) { v.marked = true; performance.mark("hetflow:rendered"); } // once per view, not per refresh
  }
  function every(v, ms, fn) {
    const h = setInterval(fn, ms);
    v.cleanups.push(() => clearInterval(h));
  }
  function stream(v, url) {
    const es = new EventSource(streamURL(url));
    v.cleanups.push(() => es.close());
    return es;
  }
  // at most one call per `ms`; calls in between are folded into one trailing call
  function throttle(v, ms, fn) {
    let last = 0, timer = null;
    const run = () => { timer = null; last = Date.now(); if (v.alive) fn(); };
    v.cleanups.push(() => timer && clearTimeout(timer));
    return () => {
      if (timer) return;
      const wait = Math.max(0, last + ms - Date.now());
      timer = setTimeout(run, wait);
    };
  }
  let config = null;
  async function getConfig() {
    if (!config) {
      config = await getJSON("api/config");
      $("#version").textContent = "hetflow " + config.version + " · " + config.home;
    }
    return config;
  }

  // =========================================================== runs list
  const runsState = { state: "", name: "", offset: 0, limit: 50 };
  function viewRuns(main) {
    const v = newView("runs");
    const stateSel = el("select", { id: "filter-state" },
      ["", "running", "pending", "succeeded", "failed", "stopped"].map((s) =>
        el("option", { value: s, text: s || "any state" })));
    stateSel.value = runsState.state;
    const nameIn = el("input", { id: "filter-name", type: "search", placeholder: "name contains…", value: runsState.name });
    const prev = el("button", { id: "page-prev", type: "button", text: "‹ newer" });
    const next = el("button", { id: "page-next", type: "button", text: "older ›" });
    const info = el("span", { id: "page-info", class: "muted" });
    const tbody = el("tbody");
    const table = el("table", { id: "runs-table" },
      el("thead", null, el("tr", null, ["id", "name", "state", "progress", "started", "duration", "cost", "user", "message"]
        .map((h) => el("th", { text: h, class: ["duration", "cost"].includes(h) ? "num" : null })))),
      tbody);
    clear(main);
    main.append(el("h2", { text: "Runs" }),
      el("div", { class: "toolbar" }, stateSel, nameIn, prev, next, info), table);

    let seq = 0;
    async function load() {
      const my = ++seq;
      const q = "api/runs?limit=" + runsState.limit + "&offset=" + runsState.offset +
        (runsState.state ? "&state=" + enc(runsState.state) : "") + (runsState.name ? "&name=" + enc(runsState.name) : "");
      let data;
      try {
        data = await getJSON(q);
      } catch (e) {
        if (v.alive) { showError("runs: " + e.message); rendered(v); }
        return;
      }
      if (!v.alive || my !== seq) return;
      clearError();
      // the same runs in the same order: update their cells in place (no stale rows for a reader);
      // else draw the rows again
      const ids = data.runs.map((r) => r.id).join("\u0000");
      const frag = document.createDocumentFragment();
      if (ids === tbody.dataset.ids && data.runs.length) {
        const trs = tbody.querySelectorAll("tr[data-run-id]");
        data.runs.forEach((r, i) => fillRunRow(trs[i], r));
      } else {
        for (const r of data.runs) {
          const tr = el("tr", { class: "clickable", "data-run-id": r.id,
            onclick: () => { location.hash = "#/runs/" + enc(r.id); } },
            el("td", { class: "id" }, el("a", { href: "#/runs/" + enc(r.id), text: r.id })),
            el("td", { class: "name" }), el("td", { class: "state" }), el("td", { class: "progress" }),
            el("td", { class: "started" }), el("td", { class: "duration num" }), el("td", { class: "cost num" }),
            el("td", { class: "user" }), el("td", { class: "message muted" }));
          fillRunRow(tr, r);
          frag.appendChild(tr);
        }
        if (!data.runs.length) frag.appendChild(el("tr", { class: "empty" }, el("td", { colspan: 9, class: "muted", text: "no runs" })));
        clear(tbody);
        tbody.appendChild(frag);
        tbody.dataset.ids = ids;
      }
      const first = data.total ? data.offset + 1 : 0;
      info.textContent = first + "–" + (data.offset + data.runs.length) + " of " + data.total;
      prev.disabled = data.offset <= 0;
      next.disabled = data.offset + data.runs.length >= data.total;
      rendered(v);
    }
    stateSel.addEventListener("change", () => { runsState.state = stateSel.value; runsState.offset = 0; load(); });
    let nameTimer = null;
    nameIn.addEventListener("input", () => {
      clearTimeout(nameTimer);
      nameTimer = setTimeout(() => { runsState.name = nameIn.value; runsState.offset = 0; load(); }, 250);
    });
    prev.addEventListener("click", () => { runsState.offset = Math.max(0, runsState.offset - runsState.limit); load(); });
    next.addEventListener("click", () => { runsState.offset += runsState.limit; load(); });
    every(v, 2000, load);
    load();
  }

  function fillRunRow(tr, r) {
    const c = tr.children;
    const pct = Math.round((r.progress || 0) * 100);
    tr.dataset.state = r.state;
    c[1].textContent = r.name;
    c[1].title = r.workflow || "";
    c[2].textContent = r.state;
    clear(c[3]);
    c[3].title = pct + "%";
    c[3].append(el("span", { class: "bar" }, el("span", { style: "width:" + pct + "%" })), r.steps_done + "/" + r.steps_total);
    c[4].textContent = fmtTime(r.started || r.created);
    c[5].textContent = fmtDur(r.duration);
    c[6].textContent = fmtCost(r.cost);
    c[7].textContent = dash(r.user);
    c[8].textContent = dash(r.message);
  }

  // =========================================================== run view
  function groupState(counts) {
    const n = Object.values(counts).reduce((a, b) => a + b, 0);
    if (counts.running || counts.launching) return "running";
    const done = (counts.succeeded || 0) + (counts.failed || 0) + (counts.skipped || 0) + (counts.stopped || 0);
    if (done > 0 && done < n && !counts.failed) return "running";
    if (counts.failed) return "failed";
    for (const s of STATES) if (counts[s] === n) return s;
    if (counts.stopped) return "stopped";
    return done === n ? "succeeded" : "pending";
  }
  const SHORT = { succeeded: "✓", running: "▶", failed: "✗", pending: "·", waiting: "…", launching: "↑", skipped: "⤼", stopped: "■" };
  function countsText(counts) {
    return STATES.filter((s) => counts[s]).map((s) => counts[s] + SHORT[s]).join(" ");
  }

  // Collapse fan-outs with more than ~8 items into one vertex each; returns the graph to lay out.
  function collapse(graph) {
    const byGroup = new Map();
    for (const n of graph.nodes) if (n.group) (byGroup.get(n.group) || byGroup.set(n.group, []).get(n.group)).push(n.id);
    const vertexOf = new Map(); // step -> vertex key
    const vertices = [];
    for (const n of graph.nodes) {
      const members = n.group ? byGroup.get(n.group) : null;
      if (members && members.length >= GROUP_MIN) {
        const key = "group\u0000" + n.group;
        if (!vertexOf.has(key)) { vertexOf.set(key, key); vertices.push({ key: key, group: n.group, members: members }); }
        vertexOf.set(n.id, key);
      } else {
        vertexOf.set(n.id, n.id);
        vertices.push({ key: n.id, step: n.id, gang: n.gang });
      }
    }
    const seen = new Set();
    const edges = [];
    for (const [a, b] of graph.edges) {
      const u = vertexOf.get(a), w = vertexOf.get(b);
      if (u === undefined || w === undefined || u === w) continue;
      const k = u + "\u0001" + w;
      if (seen.has(k)) continue;
      seen.add(k);
      edges.push([u, w]);
    }
    return { vertices: vertices, edges: edges };
  }
  const NODE_W = 150, NODE_H = 34;
  function layoutDagre(g) {
    const d = new dagre.graphlib.Graph();
    d.setGraph({ rankdir: "LR", nodesep: 12, ranksep: 40, marginx: 8, marginy: 8 });
    d.setDefaultEdgeLabel(() => ({}));
    for (const v of g.vertices) d.setNode(v.key, { width: NODE_W, height: NODE_H });
    for (const [u, w] of g.edges) d.setEdge(u, w);
    dagre.layout(d);
    const pos = new Map();
    for (const v of g.vertices) { const n = d.node(v.key); pos.set(v.key, { x: n.x, y: n.y }); }
    const paths = g.edges.map(([u, w]) => d.edge(u, w).points);
    return { pos: pos, paths: paths, width: d.graph().width, height: d.graph().height };
  }
  // Longest-path layers, ordered within a layer by their predecessors' mean position: linear time,
  // for graphs too big for dagre's crossing minimisation.
  function layoutLayered(g) {
    const preds = new Map(), succs = new Map(), indeg = new Map();
    for (const v of g.vertices) { preds.set(v.key, []); succs.set(v.key, []); indeg.set(v.key, 0); }
    for (const [u, w] of g.edges) { succs.get(u).push(w); preds.get(w).push(u); indeg.set(w, indeg.get(w) + 1); }
    const layer = new Map();
    const queue = g.vertices.filter((v) => indeg.get(v.key) === 0).map((v) => v.key);
    for (const k of queue) layer.set(k, 0);
    for (let i = 0; i < queue.length; i++) {
      const u = queue[i];
      for (const w of succs.get(u)) {
        layer.set(w, Math.max(layer.get(w) || 0, layer.get(u) + 1));
        indeg.set(w, indeg.get(w) - 1);
        if (indeg.get(w) === 0) queue.push(w);
      }
    }
    for (const v of g.vertices) if (!layer.has(v.key)) layer.set(v.key, 0); // a cycle: should not happen
    const layers = [];
    for (const v of g.vertices) (layers[layer.get(v.key)] = layers[layer.get(v.key)] || []).push(v.key);
    const order = new Map();
    const pos = new Map();
    const colW = NODE_W + 50, rowH = NODE_H + 10;
    let maxRows = 0;
    layers.forEach((keys, li) => {
      if (li > 0) {
        const bary = new Map(keys.map((k) => {
          const p = preds.get(k);
          return [k, p.length ? p.reduce((a, u) => a + order.get(u), 0) / p.length : 0];
        }));
        keys.sort((a, b) => bary.get(a) - bary.get(b));
      }
      keys.forEach((k, i) => { order.set(k, i); pos.set(k, { x: 8 + li * colW + NODE_W / 2, y: 8 + i * rowH + NODE_H / 2 }); });
      maxRows = Math.max(maxRows, keys.length);
    });
    const paths = g.edges.map(([u, w]) => {
      const a = pos.get(u), b = pos.get(w);
      return [{ x: a.x + NODE_W / 2, y: a.y }, { x: b.x - NODE_W / 2, y: b.y }];
    });
    return { pos: pos, paths: paths, width: 16 + layers.length * colW, height: 16 + maxRows * rowH };
  }
  function trunc(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function viewRun(main, runId) {
    const v = newView("run");
    const steps = new Map(); // name -> step object (from /api/runs/ID), kept current by events
    const rows = new Map(); // name -> tr
    const dagNodes = new Map(); // step name -> g (its own node) ; group key -> g
    const groupOf = new Map(); // step -> vertex (group) for collapsed steps
    let run = null;
    let selected = null;
    let logES = null;

    const refetch = throttle(v, 1000, () => load(false));
    const refreshGantt = throttle(v, 1000, () => loadGantt());

    async function load(first) {
      try {
        run = await getJSON("api/runs/" + enc(runId));
      } catch (e) {
        if (!v.alive) return;
        showError("run " + runId + ": " + e.message);
        if (first) { clear(main); main.append(el("div", { id: "run-view", "data-run-id": runId })); rendered(v); }
        return;
      }
      if (!v.alive) return;
      for (const s of run.steps) steps.set(s.step, s);
      if (first) {
        build();
        rendered(v);
        startEvents(run.cursor);
        loadGantt();
      } else {
        updateSummary();
        for (const s of run.steps) updateStep(s.step);
        if (selected) renderDetails(selected);
      }
    }

    function build() {
      const cfg = config || {};
      clear(main);
      const root = el("div", { id: "run-view", "data-run-id": run.id });
      const actions = el("div", { class: "toolbar", id: "run-actions" });
      if (cfg.actions) {
        actions.append(
          el("button", { id: "action-stop", type: "button", class: "danger", text: "Stop",
            onclick: () => act("api/runs/" + enc(run.id) + "/stop", "stop run " + run.id + "?") }),
          el("button", { id: "action-resume", type: "button", text: "Resume",
            onclick: () => act("api/runs/" + enc(run.id) + "/resume", null) }),
          el("span", { id: "action-message" }));
      }
      root.append(
        el("h2", null, "Run ", el("code", { text: run.id }), " · ", el("span", { text: run.name }), " ",
          el("span", { id: "run-state", class: "state", "data-state": run.state, text: run.state })),
        el("dl", { id: "run-summary", class: "summary" }),
        actions);
      // DAG
      const g = collapse(run.graph || { nodes: run.steps.map((s) => ({ id: s.step, group: null, gang: null })), edges: [] });
      let lay, how;
      const t0 = performance.now();
      if (g.vertices.length <= DAGRE_MAX && window.dagre) { lay = layoutDagre(g); how = "dagre"; }
      else { lay = layoutLayered(g); how = "layered"; }
      const dagMs = performance.now() - t0;
      const dag = drawDag(g, lay);
      const legend = el("div", { class: "legend" }, STATES.map((s) =>
        el("span", null, el("i", { style: "background:var(--" + s + ")" }), s)));
      const note = el("div", { id: "dag-note", class: "muted" },
        g.vertices.length + " nodes, " + g.edges.length + " edges" +
        (g.vertices.length < run.steps.length ? " (fan-outs of more than " + (GROUP_MIN - 1) + " items grouped)" : "") +
        (how === "layered" ? "; large graph: simple layered layout (longest path), not dagre" : "; layout by dagre") +
        " in " + Math.round(dagMs) + " ms" + (run.graph && run.graph.note ? " — " + run.graph.note : ""));
      root.append(paramsTable(run.params), el("h3", { text: "Graph" }), legend, el("div", { id: "dag-wrap" }, dag), note);
      // steps + panel
      const tbody = el("tbody");
      const frag = document.createDocumentFragment();
      for (const s of run.steps) {
        const tr = stepRow(s);
        rows.set(s.step, tr);
        frag.appendChild(tr);
      }
      tbody.appendChild(frag);
      const table = el("table", { id: "steps-table" },
        el("thead", null, el("tr", null, ["step", "state", "node", "gpus", "variant", "image", "exit", "retries", "started", "duration", ""]
          .map((h) => el("th", { text: h })))), tbody);
      const panel = el("div", { id: "step-panel", hidden: true });
      root.append(el("div", { class: "panel-grid" },
        el("div", null, el("h3", { text: "Steps" }), el("div", { class: "scroll" }, table)),
        el("div", null, el("h3", { text: "Step" }), el("p", { id: "step-hint", class: "muted", text: "click a step (a row or a graph node) for its details and log" }), panel)));
      root.append(el("h3", { text: "Gantt: plan against actual" }), el("div", { id: "gantt" }, el("p", { class: "muted", text: "loading…" })));
      main.append(root);
      updateSummary();
      tbody.addEventListener("click", (ev) => {
        if (ev.target.closest("button")) return;
        const tr = ev.target.closest("tr[data-step]");
        if (tr) openStep(tr.dataset.step);
      });
    }

    function paramsTable(params) {
      // the run's effective params and where each was written (show's "params" table)
      const names = Object.keys(params || {});
      if (!names.length) return el("div", { id: "run-params" });
      const fmt = (v) => (typeof v === "string" ? v : JSON.stringify(v));
      return el("div", { id: "run-params" }, el("h3", { text: "Params" }),
        el("table", { id: "params-table" },
          el("thead", null, el("tr", null, ["param", "value", "from"].map((h) => el("th", { text: h })))),
          el("tbody", null, names.map((n) => el("tr", { "data-param": n },
            el("td", { text: n }), el("td", { text: fmt(params[n].value) }), el("td", { text: params[n].from }))))));
    }

    function updateSummary() {
      const st = $("#run-state");
      if (!st) return;
      st.textContent = run.state;
      st.dataset.state = run.state;
      const done = run.steps_done, total = run.steps_total;
      const dl = $("#run-summary");
      clear(dl);
      const item = (k, val) => [el("dt", { text: k }), el("dd", { text: val })];
      const counts = {};
      for (const s of steps.values()) counts[s.state] = (counts[s.state] || 0) + 1;
      add(dl, [
        item("state", run.state), item("progress", done + "/" + total + " (" + Math.round(100 * done / Math.max(1, total)) + "%)"),
        item("steps", countsText(counts) || "-"),
        item("started", fmtTime(run.started || run.created)), item("duration", fmtDur(run.duration)),
        item("cost (planned)", fmtCost(run.cost)), item("backend", dash(run.backend)), item("user", run.user_name ? run.user_name + " (" + run.user + ")" : dash(run.user)),
        item("workflow", dash(run.workflow)), item("message", dash(run.message)),
      ]);
    }

    function stepRow(s) {
      const tr = el("tr", { class: "clickable", "data-step": s.step, "data-state": s.state });
      // a fan-out item's values beside its name (train.3 [lr=0.01,bs=32])
      const name = el("td", { class: "step", text: s.step });
      if (s.item_label) name.appendChild(el("span", { class: "item", text: " " + s.item_label }));
      tr.append(name, el("td", { class: "state" }), el("td", { class: "node" }),
        el("td", { class: "gpus" }), el("td", { class: "variant" }), el("td", { class: "image" }), el("td", { class: "exit num" }),
        el("td", { class: "retries num" }), el("td", { class: "started" }), el("td", { class: "duration num" }), el("td", { class: "act" }));
      fillRow(tr, s);
      return tr;
    }
    function fillRow(tr, s) {
      const c = tr.children;
      tr.dataset.state = s.state;
      // handed to a cluster engine that has not started it (Slurm PENDING): queued, with the engine's reason
      tr.dataset.queued = s.queued ? "1" : "";
      c[1].textContent = s.queued ? "queued" : s.state;
      c[1].title = s.queued ? s.reason || "" : "";
      c[2].textContent = dash(s.node);
      c[3].textContent = fmtGpus(s.gpus);
      c[4].textContent = dash(s.variant);
      c[5].textContent = dash(s.image);
      c[5].title = s.image || "";
      c[6].textContent = dash(s.exit_code);
      c[7].textContent = String(s.retries !== undefined ? s.retries : Math.max(0, (s.attempts || 0) - 1));
      c[8].textContent = fmtTime(s.started);
      c[9].textContent = s.started ? fmtDur((s.ended || Date.now() / 1000) - s.started) : "-";
      const act = c[10];
      const want = config && config.actions && s.state === "failed";
      const btn = act.firstChild;
      if (want && !btn) {
        act.appendChild(el("button", { type: "button", class: "action-retry", "data-step": s.step, text: "retry",
          onclick: () => act_retry(s.step) }));
      } else if (!want && btn) clear(act);
    }
    function act_retry(step) { act("api/runs/" + enc(run.id) + "/steps/" + enc(step) + "/retry", null); }

    function drawDag(g, lay) {
      const root = svg("svg", { id: "dag", width: Math.ceil(lay.width), height: Math.ceil(lay.height),
        viewBox: "0 0 " + Math.ceil(lay.width) + " " + Math.ceil(lay.height) });
      let d = "";
      for (const pts of lay.paths) {
        if (!pts || !pts.length) continue;
        d += "M" + pts[0].x.toFixed(1) + " " + pts[0].y.toFixed(1);
        for (let i = 1; i < pts.length; i++) d += "L" + pts[i].x.toFixed(1) + " " + pts[i].y.toFixed(1);
      }
      root.appendChild(svg("defs", null, svg("marker", { id: "arrow", viewBox: "0 0 6 6", refX: 6, refY: 3, markerWidth: 6, markerHeight: 6, orient: "auto" },
        svg("path", { d: "M0 0L6 3L0 6z", fill: "#9ca3af" }))));
      root.appendChild(svg("path", { class: "edges", d: d }));
      const frag = document.createDocumentFragment();
      for (const vx of g.vertices) {
        const p = lay.pos.get(vx.key);
        const x = p.x - NODE_W / 2, y = p.y - NODE_H / 2;
        let gEl;
        if (vx.group) {
          const counts = {};
          for (const m of vx.members) { const s = steps.get(m); const st = s ? s.state : "pending"; counts[st] = (counts[st] || 0) + 1; }
          gEl = svg("g", { class: "dag-node group", "data-group": vx.group, "data-count": vx.members.length,
            "data-state": groupState(counts), transform: "translate(" + x.toFixed(1) + "," + y.toFixed(1) + ")" },
            svg("title", { text: vx.group + ": " + vx.members.length + " fan-out items" }),
            svg("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 4 }),
            svg("rect", { class: "box", x: 3, y: 3, width: NODE_W - 6, height: NODE_H - 6, rx: 3, "fill-opacity": 0.35 }),
            svg("text", { x: 8, y: 14, text: trunc(vx.group, 15) + " ×" + vx.members.length }),
            svg("text", { class: "sub counts", x: 8, y: 27, text: countsText(counts) }));
          gEl._counts = counts;
          for (const m of vx.members) groupOf.set(m, gEl);
          dagNodes.set(vx.key, gEl);
        } else {
          const s = steps.get(vx.step);
          gEl = svg("g", { class: "dag-node" + (vx.gang ? " gang" : ""), "data-step": vx.step, "data-state": s ? s.state : "pending",
            transform: "translate(" + x.toFixed(1) + "," + y.toFixed(1) + ")" },
            svg("title", { text: vx.step + (vx.gang ? " (gang of " + vx.gang + " replicas)" : "") }),
            svg("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 4 }),
            svg("text", { x: 8, y: vx.gang ? 14 : 21, text: trunc(vx.step, 21) }),
            vx.gang ? svg("text", { class: "sub", x: 8, y: 27, text: "gang ×" + vx.gang }) : null);
          dagNodes.set(vx.step, gEl);
        }
        frag.appendChild(gEl);
      }
      root.appendChild(frag);
      root.addEventListener("click", (ev) => {
        const gEl = ev.target.closest("g.dag-node");
        if (!gEl) return;
        if (gEl.dataset.step) openStep(gEl.dataset.step);
        else if (gEl.dataset.group) {
          // a group: open its first member that is not done (else the first), and show it in the table
          const vx = g.vertices.find((q) => q.group === gEl.dataset.group);
          const pick = vx.members.find((m) => steps.get(m) && !DONE.has(steps.get(m).state)) ||
            vx.members.find((m) => steps.get(m) && steps.get(m).state === "failed") || vx.members[0];
          openStep(pick);
        }
      });
      return root;
    }

    // one step's state changed (from an event or a re-fetch): table row, DAG node or group, summary
    function updateStep(name) {
      const s = steps.get(name);
      if (!s) return;
      const tr = rows.get(name);
      if (tr) fillRow(tr, s);
      const own = dagNodes.get(name);
      if (own) own.dataset.state = s.state;
      const grp = groupOf.get(name);
      if (grp) {
        const counts = {};
        for (const m of grp._members || (grp._members = [...groupOf.entries()].filter(([, gg]) => gg === grp).map(([k]) => k))) {
          const ms = steps.get(m); const st = ms ? ms.state : "pending"; counts[st] = (counts[st] || 0) + 1;
        }
        grp.dataset.state = groupState(counts);
        grp.querySelector("text.counts").textContent = countsText(counts);
      }
    }

    // The server ends the stream once the run is over; after an action (resume, retry) the run may
    // start again, so the page reopens it from the last event it saw until it sees the run leave the
    // state it had when the action was taken (watchFrom), backing off to one try in 5 s, for at most
    // WATCH_MS.  A fixed 20 s window was too short on a loaded machine: a resumed executor took longer
    // to start, the page stopped watching and showed "stopped" while the run went on to succeed
    // (test_stop_and_resume_from_the_page, issue 24).
    const WATCH_MS = 600000;
    let lastId = 0, es = null, watchUntil = 0, watchFrom = null, reopenMs = 1000;
    function startEvents(cursor) {
      if (es) es.close();
      lastId = Math.max(lastId, cursor || 0);
      es = stream(v, "api/runs/" + enc(runId) + "/events?after=" + lastId);
      const onData = (ev) => {
        let e;
        try { e = JSON.parse(ev.data); } catch (x) { return; }
        if (typeof e.id === "number") lastId = Math.max(lastId, e.id);
        if (e.type === "StepStateChanged" && e.step && steps.has(e.step)) {
          const s = steps.get(e.step);
          s.state = e.state;
          if (DONE.has(e.state) && !s.ended) s.ended = e.time;
          if (e.state !== "running") s.queued = false;
          if (e.state === "running" && !s.started && !s.queued) s.started = e.time;
          updateStep(e.step);
          if (selected === e.step) renderDetails(e.step);
          run.steps_done = [...steps.values()].filter((q) => q.state === "succeeded" || q.state === "skipped").length;
          updateSummary();
        } else if (e.type === "RunStateChanged") {
          run.state = e.state;
          if (e.state !== watchFrom) watchFrom = null; // the action took: the stream now runs to the end
          updateSummary();
          refetch();
        } else if (e.type === "Note" && e.step && steps.has(e.step)) {
          refetch(); // a step's news (a queued job's reason, its start): the run's record says what it is now
        } else if (e.type === "AttemptStarted" || e.type === "AttemptFinished") {
          refetch();
          if (e.type === "AttemptFinished") refreshGantt();
          if (e.type === "AttemptStarted" && selected === e.step) openLog(e.step);
        }
      };
      for (const t of ["step", "run", "attempt", "note", "message"]) es.addEventListener(t, onData);
      const mine = es;
      es.addEventListener("end", (ev) => {
        mine.close();
        try { const d = JSON.parse(ev.data); if (d.state) run.state = d.state; } catch (x) { /* keep */ }
        if (run.state !== watchFrom) watchFrom = null;
        if (watchFrom !== null && Date.now() < watchUntil) {
          setTimeout(() => { if (v.alive && es === mine) startEvents(lastId); }, reopenMs);
          reopenMs = Math.min(5000, reopenMs * 1.5);
        }
        updateSummary();
        refetch();
        refreshGantt();
      });
      es.onerror = () => {
        if (mine.readyState === EventSource.CLOSED && v.alive && es === mine) showError("run " + runId + ": the event stream closed; reload to reconnect");
      };
    }

    function openStep(name) {
      if (!steps.has(name)) return;
      selected = name;
      for (const tr of document.querySelectorAll("#steps-table tr.selected")) tr.classList.remove("selected");
      for (const n of document.querySelectorAll("g.dag-node.selected")) n.classList.remove("selected");
      const tr = rows.get(name);
      if (tr) {
        tr.classList.add("selected");
        // scroll only the table's own box (scrollIntoView would scroll the page too)
        const box = tr.closest(".scroll");
        if (box && (tr.offsetTop < box.scrollTop || tr.offsetTop > box.scrollTop + box.clientHeight - tr.offsetHeight)) {
          box.scrollTop = tr.offsetTop - box.clientHeight / 3;
        }
      }
      const dn = dagNodes.get(name) || groupOf.get(name);
      if (dn) dn.classList.add("selected");
      const panel = $("#step-panel");
      panel.hidden = false;
      const hint = $("#step-hint");
      if (hint) hint.hidden = true;
      panel.dataset.step = name;
      clear(panel);
      const s = steps.get(name);
      const ranks = el("select", { id: "log-rank" });
      for (let r = 0; r < Math.max(1, s.replicas || 1); r++) ranks.appendChild(el("option", { value: r, text: "rank " + r }));
      ranks.hidden = (s.replicas || 1) <= 1;
      ranks.addEventListener("change", () => openLog(name));
      panel.append(el("h3", null, el("code", { text: name })), el("dl", { id: "step-details" }),
        el("div", { class: "toolbar" }, el("strong", { text: "log" }), ranks, el("span", { id: "log-status", class: "muted" })),
        el("pre", { id: "log" }));
      renderDetails(name);
      openLog(name);
    }
    function renderDetails(name) {
      const dl = $("#step-details");
      const s = steps.get(name);
      if (!dl || !s || $("#step-panel").dataset.step !== name) return;
      clear(dl);
      const item = (k, val) => [el("dt", { text: k }), el("dd", { text: dash(val) })];
      const hist = s.attempt_history || [];
      add(dl, [item("state", s.state), item("variant", s.variant), item("node", s.node), item("GPUs", fmtGpus(s.gpus)),
        item("image", s.image), item("exit code", s.exit_code), item("attempts", s.attempts), item("retries", s.retries),
        item("replicas", s.replicas), item("started", fmtTime(s.started)), item("ended", fmtTime(s.ended)), item("reason", s.reason)]);
      if (s.env && Object.keys(s.env).length) add(dl, item("env", Object.entries(s.env).map(([k, val]) => k + "=" + val).join("  ")));
      for (const a of hist) {
        add(dl, item("attempt " + a.attempt, a.state + " on " + dash(a.node) + (a.gpus && a.gpus.length ? " GPUs " + a.gpus.join(",") : "") +
          ", exit " + dash(a.exit_code) + ", submitted " + fmtTime(a.started) +
          (a.run_started ? ", ran " + fmtTime(a.run_started) + " for " + fmtDur((a.run_ended || Date.now() / 1000) - a.run_started) : "") +
          (a.peak_memory ? ", peak " + fmtBytes(a.peak_memory) : "") + (a.cpu_seconds ? ", CPU " + fmtDur(a.cpu_seconds) : "") +
          (a.message ? " — " + a.message : "")));
      }
      const outs = (run.outputs || []).filter((o) => o.step === name);
      for (const o of outs) add(dl, item("output", o.name + " (" + o.size + " B, sha256 " + String(o.sha256).slice(0, 12) + ")"));
      if (config && config.actions && s.state === "failed") {
        add(dl, [el("dt"), el("dd", null, el("button", { type: "button", class: "action-retry", "data-step": name, text: "retry this step",
          onclick: () => act_retry(name) }))]);
      }
    }

    async function openLog(name) {
      if (logES) { logES.close(); logES = null; }
      const pre = $("#log");
      if (!pre) return;
      const rankSel = $("#log-rank");
      const rank = rankSel ? rankSel.value || 0 : 0;
      const status = $("#log-status");
      clear(pre);
      pre.partialLine = null;
      let data;
      try {
        data = await getJSON("api/runs/" + enc(runId) + "/steps/" + enc(name) + "/log?rank=" + enc(rank));
      } catch (e) {
        if (selected === name) { status.textContent = ""; pre.textContent = "(no log: " + e.message + ")"; }
        return;
      }
      if (!v.alive || selected !== name) return;
      appendLines(pre, data.lines);
      status.textContent = "attempt " + data.attempt + (data.done ? "" : " · streaming");
      if (!data.done) {
        // the stream goes on from the byte offset /log answered (a reconnect resumes from the
        // last event id the server gave), so no line arrives twice
        logES = stream(v, "api/runs/" + enc(runId) + "/steps/" + enc(name) + "/log/stream?attempt=" + enc(data.attempt) +
          "&rank=" + enc(rank) + "&offset=" + enc(data.offset));
        const es = logES;
        es.addEventListener("line", (ev) => {
          try { appendLines(pre, [JSON.parse(ev.data)]); } catch (x) { /* skip */ }
        });
        es.addEventListener("end", () => { es.close(); if (selected === name) status.textContent = "attempt " + data.attempt; });
      }
    }
    function appendLines(pre, lines) {
      if (!lines || !lines.length) return;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      // a line not finished yet (no newline so far) comes again, longer or finished: replace it
      if (pre.partialLine) { pre.partialLine.remove(); pre.partialLine = null; }
      const frag = document.createDocumentFragment();
      for (const l of lines) {
        const text = l.text.endsWith("\n") ? l.text : l.text + "\n";
        const cls = [l.stream === "stderr" ? "stderr" : "", l.partial ? "partial" : ""].filter(Boolean).join(" ");
        const node = cls ? el("span", { class: cls, text: text, title: l.partial ? "not finished: no newline yet" : null }) : document.createTextNode(text);
        if (l.partial) pre.partialLine = node;
        frag.appendChild(node);
      }
      pre.appendChild(frag);
      while (pre.childNodes.length > 5000) pre.removeChild(pre.firstChild);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }

    async function loadGantt() {
      const box = $("#gantt");
      if (!box) return;
      try {
        const text = await getText("api/runs/" + enc(runId) + "/gantt.svg");
        if (!v.alive) return;
        const node = safeSvg(text);
        clear(box);
        box.appendChild(node || el("p", { class: "muted", text: "no Gantt chart" }));
      } catch (e) {
        if (v.alive) { clear(box); box.appendChild(el("p", { class: "muted", text: "no Gantt chart: " + e.message })); }
      }
    }

    // One action at a time: 'hetflow stop' marks the run stopped before it has stopped its
    // containers and recorded their steps, so a Resume clicked in that window (the page already
    // shows "stopped") was undone by the stop's last writes and the resumed run failed at once
    // (test_stop_and_resume_from_the_page, issue 24).  The buttons stay off until the answer.
    let acting = null;
    async function act(path, confirmText) {
      if (acting) { showError("action: '" + acting + "' is still running; wait for its answer"); return; }
      if (confirmText && !window.confirm(confirmText)) return;
      const msg = $("#action-message") || $("#step-details");
      const before = run.state;
      acting = path.split("/").pop();
      const buttons = [...document.querySelectorAll("#run-actions button")];
      for (const b of buttons) b.disabled = true;
      try {
        const r = await (await api(path, { method: "POST" })).json();
        const m = el("div", { class: "message", text: r.message || "ok" });
        const box = $("#run-actions");
        const old = $("#run-actions .message");
        if (old) old.remove();
        (box || msg).appendChild(m);
        watchFrom = run.state === before ? before : null; // changed already: the reopened stream runs to the end
        watchUntil = Date.now() + WATCH_MS;
        reopenMs = 1000;
        startEvents(lastId);
        refetch();
      } catch (e) {
        showError("action: " + e.message);
      } finally {
        acting = null;
        for (const b of buttons) b.disabled = false;
      }
    }

    getConfig().catch(() => null).then(() => load(true));
  }

  // parse an SVG document as XML, drop scripts, foreign objects, event handlers and javascript: links
  function safeSvg(text) {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const root = doc.documentElement;
    if (!root || root.nodeName !== "svg" || doc.getElementsByTagName("parsererror").length) return null;
    for (const bad of root.querySelectorAll("script, foreignObject, iframe, object, embed")) bad.remove();
    for (const e of [root, ...root.querySelectorAll("*")]) {
      for (const a of [...e.attributes]) {
        const n = a.name.toLowerCase();
        if (n.startsWith("on")) e.removeAttribute(a.name);
        else if ((n === "href" || n === "xlink:href") && !a.value.trim().startsWith("#")) e.removeAttribute(a.name);
      }
    }
    return document.importNode(root, true);
  }

  // =========================================================== nodes
  function viewNodes(main) {
    const v = newView("nodes");
    let seq = 0;
    const box = el("div", { id: "nodes-view" }, el("p", { class: "muted", text: "loading…" }));
    const clusterBox = el("div", { id: "clusters-view" });
    clear(main);
    main.append(el("h2", { text: "Nodes" }), box, clusterBox);
    async function load() {
      const my = ++seq;
      let nodes, clusters;
      try { [nodes, clusters] = await Promise.all([getJSON("api/nodes"), getJSON("api/clusters")]); } catch (e) {
        if (v.alive) { showError("nodes: " + e.message); rendered(v); }
        return;
      }
      if (!v.alive || my !== seq) return;
      clearError();
      const cshape = JSON.stringify(clusters);
      if (cshape !== clusterBox.dataset.shape) {
        clear(clusterBox);
        clusterBox.dataset.shape = cshape;
        if (clusters.length) {
          clusterBox.append(el("h2", { text: "Cluster nodes of live runs" }),
            el("p", { class: "muted", text: "The node classes each running Slurm or Ray run was planned on, and " +
              "the attempts running on them now (their GPUs as the engine gave them)." }));
          for (const c of clusters) clusterBox.appendChild(clusterSection(c));
        }
      }
      // the same nodes and GPUs as shown: update the holders in place (elements stay, so a test or
      // a reader holding one is not left with a stale one); else draw them again
      const shape = JSON.stringify(nodes.map((n) => [n.name, (n.gpus || []).map((g) => g.index)]));
      if (shape === box.dataset.shape) {
        for (const n of nodes) {
          const sec = [...box.querySelectorAll("section.node")].find((x) => x.dataset.node === n.name);
          for (const g of n.gpus || []) {
            const td = sec && sec.querySelector('tr.gpu[data-gpu-index="' + Number(g.index) + '"] td.holder');
            if (td && td.textContent !== holderText(g)) td.textContent = holderText(g);
          }
        }
      } else {
        const frag = document.createDocumentFragment();
        for (const n of nodes) frag.appendChild(nodeSection(n));
        if (!nodes.length) frag.appendChild(el("p", { class: "muted", text: "no nodes" }));
        clear(box);
        box.appendChild(frag);
        box.dataset.shape = shape;
      }
      rendered(v);
    }
    every(v, 2000, load);
    load();
  }
  // who holds a GPU now: "RUNID/step" per holder, with its MIG device or its time-slicing / MPS
  // share (a whole-GPU lease has share 0 and shows none); "-" when free
  function holderText(g) {
    const holders = g.holders || [];
    if (!holders.length) return "-";
    return holders.map((h) => h.run_id + "/" + h.step +
      (h.mig !== null && h.mig !== undefined && h.mig !== "" ? " (MIG " + h.mig + ")" : "") +
      (typeof h.share === "number" && h.share > 0 && h.share < 1 ? " (" + h.share + ")" : "")).join(", ");
  }
  function clusterSection(c) {
    const sec = el("section", { class: "cluster", "data-run-id": c.run_id });
    sec.append(el("h3", null, el("a", { href: "#/runs/" + c.run_id, text: c.run_id }), " ",
      el("span", { class: "muted", text: c.name + " · " + c.backend + " · " + c.state })));
    sec.append(el("table", { class: "classes" }, el("thead", null, el("tr", null,
      ["class", "nodes", "cores", "memory", "GPUs", "GPU model", "GPU memory", "CC / arch", "sharing", "$/h"]
        .map((h) => el("th", { text: h })))),
    el("tbody", null, c.classes.map((k) => el("tr", { class: "node-class", "data-class": k.name },
      el("td", { text: k.name }), el("td", { class: "num", text: k.count }), el("td", { class: "num", text: k.cores }),
      el("td", { class: "num", text: fmtBytes(k.memory) }), el("td", { class: "num", text: k.gpus }),
      el("td", { text: dash(k.gpu_model) }), el("td", { class: "num", text: k.gpus && k.gpu_memory ? fmtBytes(k.gpu_memory) : "-" }),
      el("td", { text: dash(k.gpu_cc || k.gpu_arch) }), el("td", { text: dash(k.gpu_sharing) }),
      el("td", { class: "num", text: k.price_per_hour ? k.price_per_hour.toFixed(2) : "-" }))))));
    const busy = c.busy || [];
    sec.append(el("table", { class: "busy" }, el("thead", null, el("tr", null,
      ["node", "GPUs", "step", "attempt"].map((h) => el("th", { text: h })))),
    el("tbody", null, busy.length ? busy.map((b) => el("tr", { class: "busy", "data-node": b.node },
      el("td", { text: b.node }), el("td", { class: "gpus", text: b.gpus.length ? b.gpus.join(",") : "-" }),
      el("td", { class: "holder", text: b.run_id + "/" + b.step }), el("td", { class: "num", text: b.attempt })))
      : [el("tr", null, el("td", { colspan: 4, class: "muted", text: "nothing running on them now" }))])));
    return sec;
  }
  function nodeSection(n) {
    const cpu = n.cpu || {};
    const sec = el("section", { class: "node", "data-node": n.name });
    const sharing = n.gpu_sharing && n.gpu_sharing.mode && n.gpu_sharing.mode !== "exclusive"
      ? n.gpu_sharing.mode + " ×" + n.gpu_sharing.replicas : "exclusive";
    sec.append(el("h3", null, el("code", { text: n.name }), " ", el("span", { class: "muted",
      text: [n.os, n.kernel, n.container_engine].filter(Boolean).join(" · ") })),
    el("dl", { class: "summary" },
      el("dt", { text: "CPU" }), el("dd", { text: [cpu.model, cpu.vendor].filter(Boolean).join(", ") || "-" }),
      el("dt", { text: "cores" }), el("dd", { text: dash(cpu.cores) }),
      el("dt", { text: "arch" }), el("dd", { text: [cpu.architecture, cpu.microarchitecture].filter(Boolean).join(" / ") || "-" }),
      el("dt", { text: "memory" }), el("dd", { text: fmtBytes(n.memory_bytes) }),
      el("dt", { text: "GPUs" }), el("dd", { text: String((n.gpus || []).length) + (n.gpu_source ? " (" + n.gpu_source + ")" : "") }),
      el("dt", { text: "GPU sharing" }), el("dd", { text: sharing })));
    const gpus = n.gpus || [];
    if (gpus.length) {
      const tbody = el("tbody");
      for (const g of gpus) {
        const mig = (g.mig || []).map((m) => m.index + ":" + m.profile).join(", ");
        tbody.appendChild(el("tr", { class: "gpu", "data-gpu-index": g.index },
          el("td", { class: "index num", text: g.index }),
          el("td", { class: "model", text: dash(g.model) + (g.fake ? " (fake)" : "") }),
          el("td", { class: "memory num", text: fmtBytes(g.memory_bytes) }),
          el("td", { class: "cc", text: dash(g.compute_capability || g.architecture) }),
          el("td", { class: "vendor", text: dash(g.vendor) }),
          el("td", { class: "mig", text: g.mig_enabled ? mig || "enabled" : "-" }),
          el("td", { class: "numa", text: dash(g.numa_node) }),
          el("td", { class: "holder", text: holderText(g) })));
      }
      sec.append(el("table", { class: "gpus" }, el("thead", null, el("tr", null,
        ["#", "model", "memory", "CC / arch", "vendor", "MIG devices", "NUMA", "holder"].map((h) => el("th", { text: h })))), tbody));
    }
    const links = n.gpu_links || [];
    if (links.length) {
      sec.append(el("h3", { text: "Topology" }), el("table", { class: "topology" },
        el("thead", null, el("tr", null, ["GPU", "GPU", "link", "NVLinks"].map((h) => el("th", { text: h })))),
        el("tbody", null, links.map((l) => el("tr", null, el("td", { text: l.a }), el("td", { text: l.b }),
          el("td", { text: dash(l.kind) }), el("td", { text: dash(l.nvlinks) }))))));
    }
    if (n.probe_notes && n.probe_notes.length) sec.append(el("p", { class: "muted", text: n.probe_notes.join("; ") }));
    return sec;
  }

  // =========================================================== plans
  const planSel = { workflow: "", cluster: "", catalog: "", objective: "makespan" };
  let chartLoading = null;
  function loadChart() {
    if (window.Chart) return Promise.resolve();
    if (!chartLoading) {
      chartLoading = new Promise((resolve, reject) => {
        const s = document.createElement("script");
        s.src = window.hetflowAsset ? window.hetflowAsset("static/vendor/chart.umd.min.js") : "static/vendor/chart.umd.min.js";
        s.onload = () => resolve();
        s.onerror = () => reject(new Error("could not load static/vendor/chart.umd.min.js"));
        document.head.appendChild(s);
      });
    }
    return chartLoading;
  }
  function viewPlans(main) {
    const v = newView("plans");
    const sel = (id, items, current, any) => {
      const s = el("select", { id: id }, any ? el("option", { value: "", text: any }) : null,
        items.map((p) => el("option", { value: p, text: p })));
      if (items.includes(current)) s.value = current;
      else if (items.length && !any) s.value = items[0];
      return s;
    };
    const box = el("div", { id: "plans-view" }, el("p", { class: "muted", text: "loading…" }));
    clear(main);
    main.append(el("h2", { text: "Plans" }), box);
    let chart = null;
    v.cleanups.push(() => chart && chart.destroy());
    getJSON("api/files").then((files) => {
      if (!v.alive) return;
      const wf = sel("plan-workflow", files.workflows || [], planSel.workflow);
      const cl = sel("plan-cluster", files.clusters || [], planSel.cluster);
      const ca = sel("plan-catalog", files.catalogs || [], planSel.catalog);
      const ob = sel("plan-objective", ["makespan", "cost"], planSel.objective);
      const go = el("button", { id: "plan-go", type: "button", text: "Plan" });
      const pgo = el("button", { id: "pareto-go", type: "button", text: "Pareto front" });
      const out = el("div", { id: "plan-out" });
      const pout = el("div", { id: "pareto-out" });
      clear(box);
      box.append(
        el("div", { class: "toolbar" }, el("label", null, "workflow ", wf), el("label", null, "cluster ", cl),
          el("label", null, "objective ", ob), go),
        out,
        el("h3", { text: "Virtual cluster: Pareto front of makespan and cost" }),
        el("div", { class: "toolbar" }, el("label", null, "catalog ", ca), pgo),
        pout);
      const remember = () => { planSel.workflow = wf.value; planSel.cluster = cl.value; planSel.catalog = ca.value; planSel.objective = ob.value; };
      go.addEventListener("click", async () => {
        remember();
        if (!wf.value || !cl.value) { showError("plans: pick a workflow and a cluster (YAML files with kind: Workflow / Cluster under the server's --root)"); return; }
        clearError();
        clear(out);
        out.append(el("p", { class: "muted", text: "planning…" }));
        try {
          const p = await getJSON("api/plan?workflow=" + enc(wf.value) + (cl.value ? "&cluster=" + enc(cl.value) : "") + "&objective=" + enc(ob.value));
          if (!v.alive) return;
          renderPlan(out, p);
          rendered(v);
        } catch (e) { clear(out); showError("plan: " + e.message); rendered(v); }
      });
      pgo.addEventListener("click", async () => {
        remember();
        if (!wf.value || !ca.value) { showError("pareto: pick a workflow and a catalog (kind: Catalog)"); return; }
        clearError();
        clear(pout);
        pout.append(el("p", { class: "muted", text: "searching clusters…" }));
        try {
          const [p] = await Promise.all([getJSON("api/pareto?workflow=" + enc(wf.value) + "&catalog=" + enc(ca.value)), loadChart()]);
          if (!v.alive) return;
          if (chart) { chart.destroy(); chart = null; }
          chart = renderPareto(pout, p);
          rendered(v);
        } catch (e) { clear(pout); showError("pareto: " + e.message); rendered(v); }
      });
      rendered(v);
    }).catch((e) => { if (v.alive) { clear(box); showError("files: " + e.message); rendered(v); } });
  }
  function renderPlan(out, p) {
    clear(out);
    out.append(el("p", null, el("strong", { text: p.algorithm }), " · objective " + p.objective + " · makespan " + fmtDur(p.makespan) +
      " · cost " + fmtCost(p.cost) + (p.optimal ? " · optimal" : "")));
    if (p.notes && p.notes.length) out.append(el("ul", { class: "muted" }, p.notes.map((n) => el("li", { text: n }))));
    const tbody = el("tbody");
    const frag = document.createDocumentFragment();
    for (const s of p.steps) {
      const gpus = s.gpus && s.gpus.length ? s.gpus.join(",") + (s.gpu_share ? " (" + s.gpu_share + ")" : "") + (s.mig_device ? " " + s.mig_device : "") : "-";
      frag.appendChild(el("tr", { "data-step": s.step, class: "plan-step" },
        el("td", { class: "step", text: s.step }), el("td", { class: "variant", text: dash(s.variant) }),
        el("td", { class: "node", text: dash(s.node) }), el("td", { class: "node-class", text: dash(s.node_class) }),
        el("td", { class: "gpus", text: gpus }), el("td", { class: "num", text: fmtDur(s.start) }), el("td", { class: "num", text: fmtDur(s.finish) })));
      for (const x of s.explain || []) {
        frag.appendChild(el("tr", { class: "explain", "data-step": s.step },
          el("td"), el("td", { text: dash(x.variant) }), el("td"), el("td", { text: dash(x.node_class) }),
          el("td", { class: "verdict-" + x.verdict, text: x.verdict }), el("td", { colspan: 2, text: x.reason })));
      }
    }
    tbody.appendChild(frag);
    out.append(el("table", { id: "plan-table" }, el("thead", null, el("tr", null,
      ["step", "variant", "node", "class", "GPUs", "start", "finish"].map((h) => el("th", { text: h })))), tbody));
    if (p.gantt_svg) {
      const g = safeSvg(p.gantt_svg);
      if (g) out.append(el("h3", { text: "Planned Gantt" }), el("div", { id: "plan-gantt", class: "scroll" }, g));
    }
  }
  function countsLabel(c) { return Object.entries(c || {}).map(([k, n]) => n + "× " + k).join(" + ") || "(none)"; }
  function renderPareto(out, p) {
    clear(out);
    const pts = p.points || [];
    const chosen = pts.find((q) => q.chosen);
    out.append(el("p", null, "chosen: ", el("strong", { text: chosen ? countsLabel(chosen.counts) : "-" }),
      chosen ? " · makespan " + fmtDur(chosen.makespan) + " · cost " + fmtCost(chosen.cost) : "", p.rule ? " — " + p.rule : ""));
    const canvas = el("canvas", { id: "pareto-chart" });
    const detail = el("div", { id: "pareto-point" }, el("p", { class: "muted", text: "click a point to see its cluster and plan" }));
    out.append(el("div", { class: "pareto-wrap" }, canvas), detail);
    const xy = (q) => ({ x: q.makespan, y: q.cost, q: q });
    const frontier = pts.filter((q) => q.frontier).sort((a, b) => a.makespan - b.makespan);
    const data = {
      datasets: [
        { label: "chosen", data: pts.filter((q) => q.chosen).map(xy), backgroundColor: "#dc2626", borderColor: "#991b1b", pointRadius: 8, pointHoverRadius: 10, order: 0 },
        { label: "frontier", data: frontier.map(xy), showLine: true, borderColor: "#2563eb", backgroundColor: "#2563eb", pointRadius: 5, order: 1 },
        { label: "evaluated clusters", data: pts.filter((q) => !q.frontier && !q.chosen).map(xy), backgroundColor: "#9ca3af", pointRadius: 3, order: 2 },
      ],
    };
    const chart = new Chart(canvas, {
      type: "scatter",
      data: data,
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "makespan (s)" } }, y: { title: { display: true, text: "cost ($)" } } },
        plugins: { tooltip: { callbacks: { label: (ctx) => countsLabel(ctx.raw.q.counts) + ": " + fmtDur(ctx.raw.x) + ", " + fmtCost(ctx.raw.y) } } },
        onClick: (ev, elements) => {
          if (!elements.length) return;
          const e0 = elements[0];
          showPoint(detail, data.datasets[e0.datasetIndex].data[e0.index].q);
        },
      },
    });
    canvas._chart = chart; // tests may reach the chart through the canvas
    return chart;
  }
  function showPoint(box, q) {
    clear(box);
    box.dataset.index = q.index;
    box.append(el("p", null, el("strong", { class: "counts", text: countsLabel(q.counts) }),
      " · makespan " + fmtDur(q.makespan) + " · cost " + fmtCost(q.cost) + (q.rate !== undefined ? " · $" + q.rate + "/h" : "") +
      (q.frontier ? " · on the frontier" : "") + (q.chosen ? " · chosen" : "")));
    const tbody = el("tbody", null, (q.plan || []).map((s) => el("tr", { "data-step": s.step },
      el("td", { text: s.step }), el("td", { text: dash(s.variant) }), el("td", { text: dash(s.node) }),
      el("td", { text: fmtGpus(s.gpus) }), el("td", { class: "num", text: fmtDur(s.start) }), el("td", { class: "num", text: fmtDur(s.finish) }))));
    box.append(el("table", { class: "pareto-plan" }, el("thead", null, el("tr", null,
      ["step", "variant", "node", "GPUs", "start", "finish"].map((h) => el("th", { text: h })))), tbody));
  }

  // =========================================================== TES tasks
  // what `hetflow tes serve` keeps in the same store: each task beside the run it became
  const tasksState = { state: "", offset: 0, limit: 50 };
  function viewTasks(main) {
    const v = newView("tasks");
    const stateSel = el("select", { id: "tasks-filter-state" },
      ["", "QUEUED", "INITIALIZING", "RUNNING", "COMPLETE", "EXECUTOR_ERROR", "SYSTEM_ERROR", "CANCELING", "CANCELED"]
        .map((s) => el("option", { value: s, text: s || "any state" })));
    stateSel.value = tasksState.state;
    const prev = el("button", { id: "tasks-prev", type: "button", text: "‹ newer" });
    const next = el("button", { id: "tasks-next", type: "button", text: "older ›" });
    const info = el("span", { id: "tasks-info", class: "muted" });
    const tbody = el("tbody");
    const table = el("table", { id: "tasks-table" },
      el("thead", null, el("tr", null, ["task", "name", "owner", "state", "attempt", "created", "run", "node", "GPUs"]
        .map((h) => el("th", { text: h })))),
      tbody);
    clear(main);
    main.append(el("h2", { text: "TES tasks" }), el("div", { class: "toolbar" }, stateSel, prev, next, info), table);
    let seq = 0;
    async function load() {
      const my = ++seq;
      const q = "api/tes/tasks?limit=" + tasksState.limit + "&offset=" + tasksState.offset +
        (tasksState.state ? "&state=" + enc(tasksState.state) : "");
      let data;
      try {
        data = await getJSON(q);
      } catch (e) {
        if (v.alive) { showError("TES tasks: " + e.message); rendered(v); }
        return;
      }
      if (!v.alive || my !== seq) return;
      clearError();
      const frag = document.createDocumentFragment();
      for (const t of data.tasks) {
        const run = t.run_id ? el("a", { href: "#/runs/" + enc(t.run_id), text: t.run_id }) : el("span", { text: "-" });
        const gpus = t.gpus && t.gpus.length ? fmtGpus(t.gpus) : (t.gpus_asked ? t.gpus_asked + " asked" : "-");
        frag.appendChild(el("tr", { "data-task-id": t.id, "data-state": t.state },
          el("td", { class: "id", text: t.id }), el("td", { text: dash(t.name) }), el("td", { class: "owner", text: t.owner }),
          el("td", { class: "state", text: t.state }), el("td", { text: String(t.attempt) }),
          el("td", { text: fmtTime(t.created) }), el("td", { class: "run" }, run),
          el("td", { class: "node", text: dash(t.node) }), el("td", { class: "gpus", text: gpus })));
      }
      if (!data.tasks.length) frag.appendChild(el("tr", { class: "empty" }, el("td", { colspan: 9, class: "muted", text: "no TES tasks" })));
      clear(tbody);
      tbody.appendChild(frag);
      const first = data.total ? data.offset + 1 : 0;
      info.textContent = first + "–" + (data.offset + data.tasks.length) + " of " + data.total;
      prev.disabled = data.offset <= 0;
      next.disabled = data.offset + data.tasks.length >= data.total;
      rendered(v);
    }
    stateSel.addEventListener("change", () => { tasksState.state = stateSel.value; tasksState.offset = 0; load(); });
    prev.addEventListener("click", () => { tasksState.offset = Math.max(0, tasksState.offset - tasksState.limit); load(); });
    next.addEventListener("click", () => { tasksState.offset += tasksState.limit; load(); });
    every(v, 2000, load);
    load();
  }

  // =========================================================== router
  function route() {
    const main = $("#main");
    const h = location.hash || "#/runs";
    const m = h.match(/^#\/runs\/(.+)$/);
    try {
      if (m) viewRun(main, decodeURIComponent(m[1]));
      else if (h === "#/nodes") viewNodes(main);
      else if (h === "#/plans") viewPlans(main);
      else if (h === "#/tasks") viewTasks(main);
      else viewRuns(main);
    } catch (e) {
      showError("page: " + e.message);
    }
  }
  window.addEventListener("hashchange", route);
  window.addEventListener("error", (ev) => showError("page error: " + ev.message));
  window.addEventListener("unhandledrejection", (ev) => showError("page error: " + (ev.reason && ev.reason.message || ev.reason)));
  getConfig().catch((e) => showError("config: " + e.message));
  route();
})();
