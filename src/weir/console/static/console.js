// weir console: live charts (uPlot), sortable tables, and a status line for failed requests.
// Loaded from the server's own files only (the pages' Content-Security-Policy allows no
// other script); nothing here builds HTML from data: text goes in through textContent.
"use strict";

(function () {
  const status = () => document.getElementById("status");

  function say(text) {
    const el = status();
    if (el) {
      el.textContent = text;
      el.classList.toggle("bad", text !== "");
    }
  }

  function human(v, unit) {
    if (v == null) return "";
    if (unit !== "bytes") return v >= 100 ? v.toFixed(0) : String(+v.toFixed(2));
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : v.toFixed(0)) + " " + units[i];
  }

  const colors = ["#2563eb", "#db2777", "#16a34a"];
  const charts = [];

  function makeChart(el, data) {
    const names = el.dataset.series.split(",");
    const labels = (el.dataset.labels || el.dataset.series).split(",");
    const unit = el.dataset.unit || "";
    const opts = {
      width: Math.max(240, el.clientWidth),
      height: 160,
      legend: { show: true },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"), // every time shown is UTC
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(unit === "bytes" ? 1024 : 1, max)] } },
      axes: [{}, { size: 70, values: (u, vals) => vals.map((v) => human(v, unit)) }],
      series: [{}].concat(names.map((n, i) => ({
        label: labels[i] || n, stroke: colors[i % colors.length], width: 1.5,
        value: (u, v) => human(v, unit),
      }))),
    };
    const chart = new uPlot(opts, columns(data, names), el);
    charts.push({ el, names, chart });
  }

  function columns(data, names) {
    return [data.at].concat(names.map((n) => data[n] || data.at.map(() => null)));
  }

  async function refresh() {
    const byUrl = new Map();
    document.querySelectorAll("[data-chart]").forEach((el) => {
      const url = el.dataset.chart;
      if (!byUrl.has(url)) byUrl.set(url, []);
      byUrl.get(url).push(el);
    });
    for (const [url, els] of byUrl) {
      try {
        const resp = await fetch(url, { cache: "no-store" });
        if (resp.status === 401) { say("signed out: reload the page to log in"); continue; }
        if (!resp.ok) throw new Error("HTTP " + resp.status);
        const data = await resp.json();
        say("");
        els.forEach((el) => {
          const known = charts.find((c) => c.el === el);
          if (known) known.chart.setData(columns(data, known.names));
          else makeChart(el, data);
        });
      } catch (err) {
        say("server unreachable: the numbers shown are not live");
      }
    }
  }

  // How each table is sorted, by table id: kept when a live refresh replaces the table.
  const sorted = {};

  function sortRows(table, col, asc) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const key = (r) => {
      const cell = r.cells[col];
      const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
      const n = Number(raw);
      return raw !== "" && !Number.isNaN(n) ? n : raw.toLowerCase();
    };
    rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (asc ? 1 : -1));
    rows.forEach((r) => body.appendChild(r));
  }

  function sortable(table) {
    if (table.dataset.sortBound) return;
    table.dataset.sortBound = "1";
    table.querySelectorAll("th").forEach((th, col) => {
      th.tabIndex = 0;
      th.title = "sort";
      const sort = () => {
        const last = sorted[table.id];
        const asc = !(last && last.col === col && last.asc);
        sorted[table.id] = { col, asc };
        sortRows(table, col, asc);
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (e) => { if (e.key === "Enter") sort(); });
    });
    const last = sorted[table.id];
    if (last) sortRows(table, last.col, last.asc);
  }

  function bindTables() {
    document.querySelectorAll("table.sortable").forEach(sortable);
  }

  document.addEventListener("DOMContentLoaded", () => {
    bindTables();
    if (document.querySelector("[data-chart]")) {
      refresh();
      setInterval(refresh, 5000);
      window.addEventListener("resize", () => charts.forEach((c) =>
        c.chart.setSize({ width: Math.max(240, c.el.clientWidth), height: 160 })));
    }
  });

  document.addEventListener("htmx:sendError", () => say("server unreachable: try again"));
  document.addEventListener("htmx:responseError", (e) => {
    const code = e.detail.xhr.status;
    if (code === 404) say("gone: this was deleted meanwhile");
    else if (code === 401) say("signed out: reload the page to log in");
    else if (code === 403) say("not allowed: your grants changed");
    else if (code === 503) say("the server is starting or stopping: numbers are not live");
    else say("the server answered " + code + ": reload the page");
  });
  document.addEventListener("htmx:afterSettle", bindTables);
  document.addEventListener("htmx:afterRequest", (e) => {
    if (e.detail.successful) say("");
  });
})();
