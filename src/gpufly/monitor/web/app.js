// gpufly monitor page: polls /api/snapshot and /api/history from the same server and draws SVG charts.
// No framework, no build step, nothing loaded from elsewhere: the page works on an air-gapped cluster.
"use strict";

const CHARTS = [
  // [metric, title, css class, unit formatter, fixed maximum (or a function of the GPU)]
  ["utilization_gpu_percent", "GPU utilization", "util", (v) => `${v.toFixed(0)} %`, () => 100],
  ["memory_used_bytes", "Memory used", "mem", bytes, (gpu) => gpu.memory_total_bytes],
  ["power_w", "Power", "power", (v) => `${v.toFixed(0)} W`, (gpu) => gpu.power_limit_w],
  ["temperature_c", "Temperature", "temp", (v) => `${v.toFixed(0)} °C`, () => 100],
];

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 300;
const HEIGHT = 70;

function bytes(value) {
  if (value === null || value === undefined) return "N/A";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function number(value, suffix = "") {
  return value === null || value === undefined ? "N/A" : `${Math.round(value)}${suffix}`;
}

// Returns add(label, text): appends "label <b>text</b>" to the container.
function figureAdder(container) {
  return (label, text) => {
    const item = el("span");
    item.append(`${label} `, el("b", {}, text));
    container.append(item);
  };
}

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

// One line chart: the series scaled into a fixed viewBox; the maximum is the card's own (limit, total)
// when known, so a flat 40 % line reads as 40 %, not as a full-height line.
function chart(points, title, cls, format, maximum) {
  const box = el("div", { class: `chart ${cls}`, "data-metric": cls });
  const head = el("div", { class: "title" });
  const last = points.length ? points[points.length - 1][1] : null;
  head.append(el("span", {}, title), el("span", { class: "value" }, last === null ? "N/A" : format(last)));
  box.append(head);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
  svg.setAttribute("preserveAspectRatio", "none");
  for (const y of [HEIGHT / 4, HEIGHT / 2, (3 * HEIGHT) / 4]) {
    const grid = document.createElementNS(SVG, "line");
    grid.setAttribute("class", "grid");
    grid.setAttribute("x1", "0");
    grid.setAttribute("x2", String(WIDTH));
    grid.setAttribute("y1", String(y));
    grid.setAttribute("y2", String(y));
    svg.append(grid);
  }
  if (points.length < 2) {
    const empty = document.createElementNS(SVG, "text");
    empty.setAttribute("class", "empty");
    empty.setAttribute("x", "6");
    empty.setAttribute("y", String(HEIGHT / 2));
    empty.textContent = points.length ? "collecting…" : "N/A on this GPU";
    svg.append(empty);
  } else {
    const t0 = points[0][0];
    const span = Math.max(points[points.length - 1][0] - t0, 1e-9);
    const top = Math.max(maximum || 0, ...points.map((p) => p[1]), 1e-9);
    const d = points
      .map(([t, v], i) => {
        const x = ((t - t0) / span) * WIDTH;
        const y = HEIGHT - (v / top) * (HEIGHT - 2) - 1;
        return `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
      })
      .join(" ");
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("class", "line");
    path.setAttribute("d", d);
    path.setAttribute("data-points", String(points.length));
    svg.append(path);
  }
  box.append(svg);
  return box;
}

function gpuCard(gpu, live, extras) {
  const card = el("div", { class: gpu.lost ? "card gpu lost" : "card gpu", "data-gpu": String(gpu.index) });
  const title = el("h2", {}, `GPU ${gpu.index} · ${gpu.name}`);
  if (gpu.lost) title.append(el("span", { class: "badge lost" }, "lost"));
  const slowdown = extras ? extras.slowdown : null;
  if (!gpu.lost && slowdown && slowdown !== "none") title.append(el("span", { class: "badge slow" }, slowdown));
  const health = extras ? extras.health : null;
  if (health) {
    const badge = { class: `badge health ${health.level.toLowerCase()}`, "data-health": health.level };
    title.append(el("span", badge, health.level));
  }
  card.append(title);
  if (health && health.reasons.length) {
    const reasons = el("ul", { class: "health-reasons" });
    for (const reason of health.reasons) {
      reasons.append(el("li", { "data-reason": reason.code }, reason.detail));
    }
    card.append(reasons);
  }
  if (live && !gpu.lost) {
    const figures = el("div", { class: "figures" });
    const add = figureAdder(figures);
    add("util", number(live.utilization_gpu_percent, " %"));
    add("memory", `${bytes(live.memory_used_bytes)} / ${bytes(live.memory_total_bytes)}`);
    add("power", `${number(live.power_w, " W")} / ${number(live.power_limit_w, " W")}`);
    add("SM clock", `${number(live.sm_clock_mhz, " MHz")} / ${number(live.sm_clock_max_mhz, " MHz")}`);
    add("temp", number(live.temperature_c, " °C"));
    if (extras && extras.energy_since_start_j !== null) {
      add("energy", `${(extras.energy_since_start_j / 3.6e6).toFixed(4)} kWh`);
    }
    card.append(figures);
  }
  const charts = el("div", { class: "charts" });
  for (const [metric, name, cls, format, maximum] of CHARTS) {
    charts.append(chart(gpu.series[metric] || [], name, cls, format, maximum(gpu)));
  }
  card.append(charts);
  return card;
}

function renderProcesses(snapshot, showCmdline) {
  const table = document.getElementById("processes");
  table.classList.toggle("with-cmdline", Boolean(showCmdline));
  const body = table.querySelector("tbody");
  body.replaceChildren();
  const rows = [];
  for (const gpu of snapshot.gpus) for (const p of gpu.processes || []) rows.push(p);
  rows.sort((a, b) => (b.gpu_memory_bytes || 0) - (a.gpu_memory_bytes || 0));
  for (const p of rows) {
    const tr = el("tr", { "data-pid": String(p.pid) });
    const cells = [
      [String(p.gpu_index), ""],
      [String(p.pid), "num"],
      [p.user || "N/A", ""],
      [p.name || "N/A", ""],
      [p.kind || "", ""],
      [bytes(p.gpu_memory_bytes), "num"],
      [p.cpu_percent === null || p.cpu_percent === undefined ? "N/A" : `${p.cpu_percent.toFixed(0)} %`, "num"],
      [bytes(p.rss_bytes), "num"],
      [p.container || "", ""],
      [p.cmdline || "", "cmdline"],
    ];
    for (const [text, cls] of cells) tr.append(el("td", cls ? { class: cls } : {}, text));
    body.append(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    tr.append(el("td", { colspan: "10", class: "muted" }, "no GPU processes"));
    body.append(tr);
  }
}

function renderHost(host, series) {
  const figures = document.getElementById("host-figures");
  figures.replaceChildren();
  const add = figureAdder(figures);
  add("CPU", number(host.cpu_percent, " %"));
  add("RAM", `${bytes(host.memory_used_bytes)} / ${bytes(host.memory_total_bytes)}`);
  add("swap", `${bytes(host.swap_used_bytes)} / ${bytes(host.swap_total_bytes)}`);
  if (host.load_average && host.load_average.length) add("load", host.load_average.map((v) => v.toFixed(2)).join(" "));
  const charts = document.getElementById("host-charts");
  charts.replaceChildren(
    chart(series.cpu_percent || [], "CPU", "cpu", (v) => `${v.toFixed(0)} %`, 100),
    chart(series.memory_used_bytes || [], "RAM used", "mem", bytes, host.memory_total_bytes),
  );
}

function render(view, history) {
  const snapshot = view.snapshot;
  if (!snapshot) return;
  document.getElementById("host-line").textContent =
    `${snapshot.hostname} · driver ${snapshot.driver_version || "N/A"} · ${view.config.source}`;
  const notice = document.getElementById("no-gpu");
  notice.hidden = !view.no_gpu_line;
  notice.textContent = view.no_gpu_line || "";
  const live = new Map(snapshot.gpus.map((g) => [g.index, g]));
  const gpus = document.getElementById("gpus");
  gpus.replaceChildren(...history.gpus.map((g) => gpuCard(g, live.get(g.index), view.gpus[String(g.index)])));
  renderHost(snapshot.host, history.host);
  renderProcesses(snapshot, view.show_cmdline);
  document.body.dataset.gpus = String(history.gpus.length);
  document.body.dataset.ready = "1";
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [view, history] = await Promise.all([
      fetch("api/snapshot", { cache: "no-store" }).then((r) => r.json()),
      fetch("api/history", { cache: "no-store" }).then((r) => r.json()),
    ]);
    render(view, history);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    return view.config ? view.config.interval_s : 1;
  } catch (err) {
    status.textContent = `cannot reach the server (${err})`;
    return 5;
  }
}

async function loop() {
  const interval = await refresh();
  setTimeout(loop, Math.max(1, interval) * 1000);
}

loop();
