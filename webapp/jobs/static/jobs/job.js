// The live job page. A "turn ready" notice on the websocket carries the update that shows the
// turn (its server-rendered HTML, the state, totals; the charts follow in a notice of their own);
// when it follows the last turn the page has, it is shown at once, with no fetch. Otherwise (a
// gap, a notice without its update) and after every (re)connect or state change the page asks
// /updates/ for every turn after the last one it has, so a missed notification never loses a
// turn. Turn HTML comes from the server, rendered by Django with autoescaping; everything this
// script writes itself goes through textContent.
(function () {
  "use strict";
  const config = JSON.parse(document.getElementById("job-config").textContent);
  const turnsBox = document.getElementById("turns");
  const timeline = document.getElementById("timeline");
  const $ = (id) => document.getElementById(id);
  let lastIndex = config.last_index;
  let live = config.live;
  let socket = null;
  let retryMs = 500;
  let fetching = null;
  let again = false;
  const TERMINAL = ["succeeded", "failed", "cancelled"];

  // plotly.js (4.8 MB, served locally) loads after the page: turns are readable at once and the
  // charts follow as soon as it has been parsed.
  let latestCharts = config.charts;
  function loadPlotly() {
    const holder = document.getElementById("plotly-src");
    if (!holder || typeof Plotly !== "undefined") { drawCharts(latestCharts); return; }
    const script = document.createElement("script");
    script.src = holder.dataset.src;
    script.onload = () => drawCharts(latestCharts);
    document.head.appendChild(script);
  }

  function drawCharts(charts) {
    if (charts) latestCharts = charts;
    charts = latestCharts;
    if (!charts || typeof Plotly === "undefined") return;
    let drawn = 0;
    const notes = charts.notes || {};
    for (const el of document.querySelectorAll("[data-chart]")) {
      const fig = charts[el.dataset.chart];
      const note = notes[el.dataset.chart];
      if (!fig) {
        if (note) { el.textContent = note; el.classList.add("note"); el.classList.remove("drawn"); }
        continue;
      }
      if (el.classList.contains("note")) { el.classList.remove("note"); el.textContent = ""; }
      // visible before plotly measures it: a hidden cell has no width and plotly falls back to 700 px
      el.classList.add("drawn");
      Plotly.react(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
      drawn += 1;
    }
    if (drawn) $("no-charts").hidden = true;
  }

  function fmtElapsed(s) {
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
  }

  function tickElapsed() {
    $("job-elapsed-wrap").hidden = !live.started_at; // an imported run has no start time here
    if (!live.started_at) return;
    const end = live.finished_at ? Date.parse(live.finished_at) : Date.now();
    $("job-elapsed").textContent = fmtElapsed((end - Date.parse(live.started_at)) / 1000);
  }

  function applyLive(state) {
    live = state;
    const el = $("job-state");
    el.textContent = state.state;
    el.className = "state s-" + state.state;
    $("job-head").dataset.state = state.state;
    $("job-step").textContent = TERMINAL.includes(state.state) ? "" : (state.step || "");
    $("job-reason").textContent = state.reason || "";
    tickElapsed();
  }

  // The turn's tick on the timeline, added or (a turn stored again) replaced.
  function setTick(art) {
    const a = document.createElement("a");
    a.href = "#turn-" + art.dataset.index;
    a.textContent = art.dataset.index;
    a.className = "tick " + [...art.classList].filter((c) => c.startsWith("r-")).join(" ");
    if (art.dataset.error === "1") a.classList.add("err");
    if (art.dataset.improved === "1") a.classList.add("imp");
    const old = timeline.querySelector('a.tick[href="#turn-' + art.dataset.index + '"]');
    if (old) old.replaceWith(a); else timeline.appendChild(a);
  }

  // Shows an update (pushed or fetched): new turns appended, a turn stored again replaced in place.
  async function applyUpdate(data) {
    if (data.html) {
      const tpl = document.createElement("template");
      tpl.innerHTML = data.html; // server-rendered with Django autoescaping
      for (const art of tpl.content.querySelectorAll("article.turn")) {
        setTick(art);
        const old = document.getElementById(art.id);
        if (old) old.replaceWith(art);
      }
      turnsBox.appendChild(tpl.content);
      lastIndex = Math.max(lastIndex, data.last_index);
      $("turn-count").textContent = String(turnsBox.querySelectorAll("article.turn").length);
      document.body.dataset.lastTurn = String(lastIndex);
      if (location.hash) { const t = document.querySelector(location.hash); if (t) t.scrollIntoView(); }
    }
    applyLive(data.live);
    if (data.totals) {
      $("tok-total").textContent = String(data.totals.prompt_tokens + data.totals.completion_tokens);
      $("cost-total").textContent = data.totals.cost_usd.toFixed(4);
    }
    drawCharts(data.charts);
    if (data.live.head_key !== $("job-head").dataset.headKey) await refreshHead();
  }

  async function fetchUpdates() {
    if (fetching) { again = true; return fetching; }
    fetching = (async () => {
      do {
        again = false;
        const params = new URLSearchParams({ since: String(lastIndex) });
        if (config.share) params.set("share", config.share);
        const resp = await fetch(config.updates_url + "?" + params, { credentials: "same-origin" });
        if (!resp.ok) break;
        const data = await resp.json();
        if (data.last_index <= lastIndex) data.html = ""; // nothing newer than what the page has
        await applyUpdate(data);
      } while (again);
    })().finally(() => { fetching = null; });
    return fetching;
  }

  // A pushed turn is shown when the page has every turn before it (or has it already: stored
  // again); with a gap, or while a fetch runs, the database says what is missing.
  function turnReady(note) {
    if (!note.update || fetching || note.turn > lastIndex + 1) { fetchUpdates(); return; }
    applyUpdate(note.update);
    document.body.dataset.pushedTurns = String(Number(document.body.dataset.pushedTurns || 0) + 1);
  }

  // The header, the actions (Cancel while it runs; Download, Retry at the end) and the best card
  // come from the server again whenever the state or the best candidate changed.
  async function refreshHead() {
    const url = config.head_url + (config.share ? "?share=" + encodeURIComponent(config.share) : "");
    const resp = await fetch(url, { credentials: "same-origin" });
    if (!resp.ok) return;
    const tpl = document.createElement("template");
    tpl.innerHTML = await resp.text(); // server-rendered with Django autoescaping
    for (const id of ["job-head", "best-card"]) {
      const fresh = tpl.content.getElementById(id), old = $(id);
      if (fresh && old) {
        const legend = old.querySelector("#legend");
        if (legend && legend.open) { const l = fresh.querySelector("#legend"); if (l) l.open = true; }
        old.replaceWith(fresh);
      }
    }
    $("turn-count").textContent = String(turnsBox.querySelectorAll("article.turn").length);
    applyLive(live);
    document.body.dataset.headKey = $("job-head").dataset.headKey;
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(proto + location.host + config.ws_path);
    socket.onopen = () => {
      retryMs = 500;
      document.body.dataset.ws = "open";
      fetchUpdates(); // whatever happened while we were not connected
    };
    socket.onmessage = (msg) => {
      const note = JSON.parse(msg.data);
      if (note.kind === "turn.ready") turnReady(note);
      else if (note.kind === "job.charts") drawCharts(note.charts);
      else if (note.kind === "job.state") fetchUpdates();
      else if (note.kind === "job.step") { $("job-step").textContent = note.step; }
    };
    socket.onclose = (ev) => {
      document.body.dataset.ws = "closed";
      if (ev.code === 4403) { $("job-step").textContent = "access to this job was withdrawn"; return; }
      if (TERMINAL.includes(live.state)) return;
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    };
  }

  // Older turns arrive folded (header only); their details load when scrolled to, clicked or linked.
  function turnUrl(index) {
    const url = turnsBox.dataset.turnUrl.replace(/\/0\/html$/, "/" + index + "/html");
    return config.share ? url + "?share=" + encodeURIComponent(config.share) : url;
  }

  async function unfold(article) {
    if (!article || article.dataset.stub !== "1" || article.dataset.loading) return;
    article.dataset.loading = "1";
    const resp = await fetch(turnUrl(article.dataset.index), { credentials: "same-origin" });
    if (!resp.ok) { delete article.dataset.loading; return; }
    const tpl = document.createElement("template");
    tpl.innerHTML = await resp.text(); // server-rendered with Django autoescaping
    const full = tpl.content.querySelector("article.turn");
    if (full) article.replaceWith(full);
    return full;
  }

  const observer = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const entry of entries) if (entry.isIntersecting) { observer.unobserve(entry.target); unfold(entry.target); }
  }, { rootMargin: "600px" }) : null;
  for (const stub of turnsBox.querySelectorAll("article[data-stub='1']")) {
    if (observer) observer.observe(stub);
  }
  turnsBox.addEventListener("click", (ev) => {
    if (ev.target.classList.contains("load-turn")) unfold(ev.target.closest("article.turn"));
  });
  // Turn HTML is cached for every viewer, so it cannot hold this viewer's share token: a "compare
  // with the previous turn" link gets it when followed.
  function shareCompareLink(ev) {
    const link = ev.target.closest && ev.target.closest("a.cmp-prev");
    if (!link || !config.share) return;
    const url = new URL(link.href, location.href);
    url.searchParams.set("a_share", config.share);
    url.searchParams.set("b_share", config.share);
    link.href = url.toString();
  }
  turnsBox.addEventListener("click", shareCompareLink);
  turnsBox.addEventListener("auxclick", shareCompareLink);
  async function followHash() {
    const target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.dataset.stub === "1") {
      const full = await unfold(target);
      if (full) full.scrollIntoView();
    }
  }
  window.addEventListener("hashchange", followHash);
  followHash();

  function applyFilters() {
    const errors = $("only-errors").checked, imps = $("only-improvements").checked;
    turnsBox.classList.toggle("only-errors", errors);
    turnsBox.classList.toggle("only-improvements", imps);
  }
  $("only-errors").addEventListener("change", applyFilters);
  $("only-improvements").addEventListener("change", applyFilters);

  if (document.readyState === "complete") loadPlotly();
  else window.addEventListener("load", loadPlotly);
  applyLive(live);
  setInterval(tickElapsed, 1000);
  document.body.dataset.lastTurn = String(lastIndex);
  if (!TERMINAL.includes(live.state)) connect();
})();
