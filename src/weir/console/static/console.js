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
    return [data.at].concat(names.map((n) => data[n]));
  }

  async function refresh() {
    const els = document.querySelectorAll("[data-chart]");
    if (!els.length) return;
    try {
      const resp = await fetch(els[0].dataset.chart, { cache: "no-store" });
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

  function sortable(table) {
    table.querySelectorAll("th").forEach((th, col) => {
      th.tabIndex = 0;
      th.title = "sort";
      let asc = true;
      const sort = () => {
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        const key = (r) => {
          const cell = r.cells[col];
          const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
          const n = Number(raw);
          return raw !== "" && !Number.isNaN(n) ? n : raw.toLowerCase();
        };
        rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0) * (asc ? 1 : -1));
        asc = !asc;
        rows.forEach((r) => body.appendChild(r));
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (e) => { if (e.key === "Enter") sort(); });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("table.sortable").forEach(sortable);
    if (document.querySelector("[data-chart]")) {
      refresh();
      setInterval(refresh, 5000);
      window.addEventListener("resize", () => charts.forEach((c) =>
        c.chart.setSize({ width: Math.max(240, c.el.clientWidth), height: 160 })));
    }
  });

  document.addEventListener("htmx:sendError", () => say("server unreachable: try again"));
  document.addEventListener("htmx:responseError", (e) =>
    say("the server answered " + e.detail.xhr.status + ": reload the page"));
  document.addEventListener("htmx:afterRequest", (e) => {
    if (e.detail.successful) say("");
  });
})();
