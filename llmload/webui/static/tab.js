// llmload's LLM tab: polls GET {base}/llm/stats once a second and draws numbers, tables and canvas charts.
// Plain JS, no build step, no network beyond the Locust web UI it is served from.
(function () {
  "use strict";
  var base = window.llmloadBase || "";
  var standalone = !!window.llmloadStandalone;
  var panel = null;
  var timer = null;
  var seriesCache = [];
  var serverSeries = [];  // the server's scraped gauges: [{t, running, waiting, kv}], the last minutes
  var windowS = 10;
  var lastFacts = null;

  var LAT = [["ttft", "TTFT"], ["itl", "ITL"], ["tpot", "TPOT"], ["tpot_steady", "TPOT excl. 1st ITL"],
             ["e2el", "E2E latency"], ["queue_time", "Queue time"], ["schedule_lag", "Schedule lag"]];
  var PCTS = ["p50", "p90", "p99"];
  // the per-turn table: [key in run.turns rows, header, digits]; cached_fraction is shown as %
  var TURN_COLS = [["label", "turn"], ["requests", "requests", 0], ["completed", "completed", 0],
                   ["ttft_p50_ms", "TTFT p50 (ms)", 1], ["tpot_p50_ms", "TPOT p50 (ms)", 2],
                   ["cached_fraction", "cached %", 1]];
  // the sessions table (run.sessions: a row over all sessions, then one per chain type): [key, header, digits]
  var SESSION_COLS = [["label", "sessions / chain"], ["sessions", "sessions", 0],
                      ["completed_sessions", "completed sessions", 0], ["calls", "calls", 0],
                      ["completed", "completed calls", 0], ["ttft_p50_ms", "TTFT p50 (ms)", 1],
                      ["ttft_p99_ms", "TTFT p99 (ms)", 1], ["cached_fraction", "cached %", 1]];
  // the per-class and per-model table (run.by_class, run.by_model): [key, header, digits]; keys with a dot are
  // a latency's {p50, p99, ...}
  var PART_COLS = [["requests", "requests", 0], ["completed", "completed", 0], ["failed", "failed", 0],
                   ["cancelled", "cancelled", 0], ["requests_per_s", "req/s", 2],
                   ["output_tokens_per_s", "output tok/s", 1], ["ttft_ms.p50", "TTFT p50 (ms)", 1],
                   ["ttft_ms.p99", "TTFT p99 (ms)", 1], ["tpot_ms.p50", "TPOT p50 (ms)", 2],
                   ["e2el_ms.p50", "E2E p50 (ms)", 1], ["e2el_ms.p99", "E2E p99 (ms)", 1],
                   ["input_tokens_per_s", "input tok/s", 1], ["goodput_per_s", "goodput (req/s)", 2]];

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k]; else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }

  function card(id, label) {
    return el("div", {"class": "llm-card"}, [el("div", {"class": "llm-label", text: label}),
                                            el("div", {"class": "llm-big", id: id, "data-value": "", text: "–"})]);
  }

  function build() {
    var p = el("div", {id: "llm-panel"});
    p.appendChild(el("div", {"class": "llm-row"}, [
      card("llm-state", "State"), card("llm-users", "Users"), card("llm-in-flight", "In flight"),
      card("llm-tokens-per-s", "Output tokens/s"), card("llm-requests-per-s", "Requests/s"),
      card("llm-ttft-p50", "TTFT p50 (ms)"), card("llm-tpot-p50", "TPOT p50 (ms)"),
      card("llm-goodput", "Goodput (req/s)"), card("llm-failed", "Failed")]));
    p.appendChild(el("div", {"class": "llm-note", id: "llm-window-note"}));

    var controls = el("div", {"class": "llm-row", style: "margin-top:14px"});
    var rateForm = el("form", {id: "llm-rate-form"}, [
      el("label", {"for": "llm-rate-input", text: "Open-loop rate (req/s)"}),
      el("input", {id: "llm-rate-input", type: "number", min: "0", step: "any"}),
      el("button", {type: "submit", id: "llm-rate-set", text: "Set rate"}),
      el("span", {"class": "llm-msg", id: "llm-rate-msg"})]);
    rateForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      post("/llm/rate", {request_rate: document.getElementById("llm-rate-input").value}, "llm-rate-msg");
    });
    var sloForm = el("form", {id: "llm-slo-form"}, [
      el("span", {text: "SLOs (ms):"}),
      el("label", {"for": "llm-slo-ttft", text: "TTFT"}), el("input", {id: "llm-slo-ttft", type: "number", min: "0", step: "any"}),
      el("label", {"for": "llm-slo-tpot", text: "TPOT"}), el("input", {id: "llm-slo-tpot", type: "number", min: "0", step: "any"}),
      el("label", {"for": "llm-slo-e2el", text: "E2E"}), el("input", {id: "llm-slo-e2el", type: "number", min: "0", step: "any"}),
      el("label", {"for": "llm-slo-more", text: "per class/model"}),
      el("input", {id: "llm-slo-more", type: "text", size: "28", placeholder: "model=NAME:ttft:200 Chat:e2el:900"}),
      el("button", {type: "submit", id: "llm-slo-set", text: "Apply"}),
      el("span", {"class": "llm-msg", id: "llm-slo-msg"})]);
    sloForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      // items: "PART:METRIC:MS ...", as --goodput takes them (PART a user class or model=NAME)
      post("/llm/slo", {ttft: val("llm-slo-ttft"), tpot: val("llm-slo-tpot"), e2el: val("llm-slo-e2el"),
                        items: val("llm-slo-more")}, "llm-slo-msg");
    });
    var win = el("select", {id: "llm-window"}, [5, 10, 30, 60].map(function (s) {
      var o = el("option", {value: String(s), text: "last " + s + " s"}); if (s === windowS) o.selected = true; return o;
    }));
    win.addEventListener("change", function () { windowS = Number(win.value); refresh(); });
    controls.appendChild(rateForm);
    controls.appendChild(sloForm);
    controls.appendChild(el("span", {}, [el("label", {"for": "llm-window", text: "Window "}), win]));
    p.appendChild(controls);
    p.appendChild(el("div", {"class": "llm-note", id: "llm-steer-note"}));

    // GPU telemetry (gpu key of /llm/stats: DCGM pages or NVML, docs/energy.md); hidden without it
    p.appendChild(el("div", {id: "llm-gpu", style: "display:none"}, [
      el("h3", {text: "GPUs (energy)"}),
      el("div", {"class": "llm-row"}, [card("llm-gpu-power", "Power now (W)"), card("llm-gpu-util", "Busy (%)"),
                                       card("llm-gpu-energy", "Energy (J)"), card("llm-gpu-jpt", "J / output token")]),
      el("div", {"class": "llm-note", id: "llm-gpu-note"})]));
    // the server's own /metrics, scraped by the run (server key of /llm/stats); hidden when nothing is scraped
    p.appendChild(el("div", {id: "llm-server", style: "display:none"}, [
      el("h3", {text: "Server (its /metrics)"}),
      el("div", {"class": "llm-banner", id: "llm-server-saturated", style: "display:none"}),
      el("div", {"class": "llm-row"}, [card("llm-server-running", "Running"), card("llm-server-waiting", "Waiting"),
                                       card("llm-server-kv", "KV cache (%)"), card("llm-server-scrapes", "Scrapes"),
                                       card("llm-server-failures", "Scrape failures")]),
      el("div", {"class": "llm-note", id: "llm-server-note"}),
      el("div", {"class": "llm-charts"}, [el("canvas", {id: "llm-chart-server"})])]));

    p.appendChild(el("h3", {text: "Latency (ms)"}));
    var head = el("tr", {}, [el("th", {text: "metric"})]);
    PCTS.forEach(function (q) { head.appendChild(el("th", {text: "window " + q})); });
    PCTS.forEach(function (q) { head.appendChild(el("th", {text: "run " + q})); });
    head.appendChild(el("th", {text: "run mean"})); head.appendChild(el("th", {text: "count"}));
    var body = el("tbody");
    LAT.forEach(function (m) {
      var row = el("tr", {}, [el("td", {text: m[1]})]);
      ["w", "r"].forEach(function (scope) {
        PCTS.forEach(function (q) { row.appendChild(el("td", {id: "llm-" + scope + "-" + m[0] + "-" + q, text: "–"})); });
      });
      row.appendChild(el("td", {id: "llm-r-" + m[0] + "-mean", text: "–"}));
      row.appendChild(el("td", {id: "llm-r-" + m[0] + "-count", text: "–"}));
      body.appendChild(row);
    });
    p.appendChild(el("table", {id: "llm-latency-table"}, [el("thead", {}, [head]), body]));

    p.appendChild(el("h3", {text: "Throughput"}));
    var tput = el("tbody");
    [["requests_per_s", "Requests/s"], ["output_tokens_per_s", "Output tokens/s"], ["goodput_per_s", "Goodput (req/s)"],
     ["completed", "Completed"], ["failed", "Failed"], ["cancelled", "Cancelled"], ["cut_off", "Cut off"],
     ["total_output_tokens", "Output tokens"]
    ].forEach(function (m) {
      tput.appendChild(el("tr", {}, [el("td", {text: m[1]}), el("td", {id: "llm-w-" + m[0], text: "–"}),
                                     el("td", {id: "llm-r-" + m[0], text: "–"})]));
    });
    p.appendChild(el("table", {id: "llm-throughput-table"}, [
      el("thead", {}, [el("tr", {}, [el("th", {text: ""}), el("th", {text: "window"}), el("th", {text: "run"})])]), tput]));

    // multi-turn runs only: one row per turn index (run.turns), hidden otherwise
    var turnHead = el("tr", {}, TURN_COLS.map(function (c) { return el("th", {text: c[1]}); }));
    p.appendChild(el("div", {id: "llm-turns", style: "display:none"}, [
      el("h3", {text: "By turn (run)"}),
      el("table", {id: "llm-turns-table"}, [el("thead", {}, [turnHead]), el("tbody", {id: "llm-turns-body"})])]));

    // conversations and agentic sessions only: the sessions table (run.sessions), hidden otherwise
    var sessionHead = el("tr", {}, SESSION_COLS.map(function (c) { return el("th", {text: c[1]}); }));
    p.appendChild(el("div", {id: "llm-sessions", style: "display:none"}, [
      el("h3", {text: "Sessions (run)"}),
      el("table", {id: "llm-sessions-table"}, [el("thead", {}, [sessionHead]),
                                              el("tbody", {id: "llm-sessions-body"})])]));

    // several user classes or models only: one row each (run.by_class, run.by_model), hidden otherwise
    var partHead = el("tr", {}, [el("th", {text: "by"}), el("th", {text: "name"})].concat(
      PART_COLS.map(function (c) { return el("th", {text: c[1]}); })));
    p.appendChild(el("div", {id: "llm-parts", style: "display:none"}, [
      el("h3", {text: "By user class and model (run)"}),
      el("table", {id: "llm-parts-table"}, [el("thead", {}, [partHead]), el("tbody", {id: "llm-parts-body"})])]));

    p.appendChild(el("h3", {text: "Errors by kind (run)"}));
    p.appendChild(el("table", {id: "llm-errors"}, [el("tbody", {id: "llm-errors-body"})]));

    p.appendChild(el("h3", {text: "Over time (trailing 5 s per point)"}));
    p.appendChild(el("div", {"class": "llm-charts"}, [
      el("canvas", {id: "llm-chart-tokens"}), el("canvas", {id: "llm-chart-ttft"}), el("canvas", {id: "llm-chart-tpot"}),
      el("canvas", {id: "llm-chart-load"})]));

    p.appendChild(el("h3", {text: "Downloads (this test)"}));
    p.appendChild(el("div", {}, [
      el("a", {id: "llm-download-records", href: base + "/llm/records.jsonl", download: "llmload-records.jsonl",
               text: "Request records (JSONL)"}),
      el("a", {id: "llm-download-result", href: base + "/llm/result.json", download: "llmload-result.json",
               text: "Result JSON"}),
      el("a", {href: base + "/llm/stats", target: "_blank", text: "Live stats (JSON)"})]));
    return p;
  }

  function val(id) { return document.getElementById(id).value; }

  function post(path, body, msgId) {
    var msg = document.getElementById(msgId);
    fetch(base + path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
                        credentials: "same-origin"})
      .then(function (r) { return r.json().then(function (d) { return [r.ok, d]; }); })
      .then(function (res) { msg.textContent = res[0] ? "applied" : (res[1].error || "failed"); refresh(); })
      .catch(function (e) { msg.textContent = String(e); });
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    if (digits === 0) return String(Math.round(v));
    if (Math.abs(v) >= 1000) return v.toFixed(0);
    if (Math.abs(v) >= 100) return v.toFixed(1);
    return v.toFixed(digits === undefined ? 2 : digits);
  }

  function put(id, v, digits) {
    var node = document.getElementById(id);
    if (!node) return;
    node.textContent = fmt(v, digits);
    node.setAttribute("data-value", v === null || v === undefined ? "" : String(v));
  }

  function render(d) {
    lastFacts = d;
    var w = d.window, r = d.run;
    put("llm-state", d.state); put("llm-users", d.users, 0); put("llm-in-flight", d.in_flight, 0);
    put("llm-tokens-per-s", w.output_tokens_per_s, 1); put("llm-requests-per-s", w.requests_per_s, 2);
    put("llm-ttft-p50", w.ttft_ms.p50, 1); put("llm-tpot-p50", w.tpot_ms.p50, 2);
    put("llm-goodput", w.goodput_per_s, 2); put("llm-failed", r.failed + r.cut_off, 0);
    document.getElementById("llm-window-note").textContent =
      "Cards and 'window' columns: requests that ended in the last " + fmt(w.span_s, 1) + " s" +
      (d.distributed ? " (" + d.workers + " workers; the last 1.5 s is left for records in transit)" : "") +
      ". 'run': the whole test, " + fmt(r.duration_s, 1) + " s from first send to last end." +
      (r.itl_exact === false ? " Run ITL percentiles from a 1 % histogram." : "");
    LAT.forEach(function (m) {
      PCTS.forEach(function (q) {
        put("llm-w-" + m[0] + "-" + q, w[m[0] + "_ms"][q]);
        put("llm-r-" + m[0] + "-" + q, r[m[0] + "_ms"][q]);
      });
      put("llm-r-" + m[0] + "-mean", r[m[0] + "_ms"].mean);
      put("llm-r-" + m[0] + "-count", r[m[0] + "_ms"].count, 0);
    });
    ["requests_per_s", "output_tokens_per_s", "goodput_per_s"].forEach(function (k) {
      put("llm-w-" + k, w[k]); put("llm-r-" + k, r[k]);
    });
    ["completed", "failed", "cancelled", "cut_off", "total_output_tokens"].forEach(function (k) {
      put("llm-w-" + k, w[k], 0); put("llm-r-" + k, r[k], 0);
    });
    var eb = document.getElementById("llm-errors-body");
    eb.textContent = "";
    var kinds = Object.keys(d.errors || {});
    if (!kinds.length) eb.appendChild(el("tr", {}, [el("td", {text: "none"})]));
    kinds.sort(function (a, b) { return d.errors[b] - d.errors[a]; }).forEach(function (k) {
      eb.appendChild(el("tr", {}, [el("td", {text: k}), el("td", {text: String(d.errors[k])})]));
    });
    renderTurns(r.turns);
    renderSessions(r.sessions);
    renderParts(r);
    renderServer(d.server);
    renderGpu(d.gpu);
    var rateInput = document.getElementById("llm-rate-input");
    if (document.activeElement !== rateInput) rateInput.value = d.request_rate;
    document.getElementById("llm-steer-note").textContent = d.arrival === "open"
      ? "Open loop at " + fmt(d.request_rate) + " req/s for the whole test; a new rate applies within a second."
      : "Closed loop: the load is the number of users; change it with Locust's Edit button (rate applies to --arrival open).";
    ["ttft", "tpot", "e2el"].forEach(function (k) {
      var input = document.getElementById("llm-slo-" + k);
      if (document.activeElement !== input && d.slos_ms) input.value = d.slos_ms[k] === undefined ? "" : d.slos_ms[k];
    });
    var more = document.getElementById("llm-slo-more"), items = sloItems(d.slos_ms || {});
    if (document.activeElement !== more) {
      more.value = items.filter(function (i) { return i[0].indexOf(":") > 0; })
        .map(function (i) { return i[0] + ":" + i[1]; }).join(" ");
    }
    var q = items.map(function (i) { return "slo_" + encodeURIComponent(i[0]) + "=" + i[1]; }).join("&");
    document.getElementById("llm-download-result").setAttribute("href", base + "/llm/result.json" + (q ? "?" + q : ""));
    if (d.series) {
      var last = seriesCache.length ? seriesCache[seriesCache.length - 1].t : -1;
      if (d.series.length && d.series[0].t <= last) seriesCache = d.series.slice();
      else seriesCache = seriesCache.concat(d.series);
      if (seriesCache.length > 3600) seriesCache = seriesCache.slice(-3600);
      if (seriesCache.length && d.elapsed_s < seriesCache[seriesCache.length - 1].t) seriesCache = d.series.slice();
    }
    draw();
  }

  // slos_ms ({"ttft": 500, "Chat": {"e2el": 900}, "model=a": {"ttft": 200}}) as [["ttft", 500], ["Chat:e2el", 900], ...]
  function sloItems(slos) {
    var out = [];
    Object.keys(slos).forEach(function (k) {
      var v = slos[k];
      if (v !== null && typeof v === "object") Object.keys(v).forEach(function (m) { out.push([k + ":" + m, v[m]]); });
      else out.push([k, v]);
    });
    return out;
  }

  function renderParts(r) {
    var box = document.getElementById("llm-parts"), tb = document.getElementById("llm-parts-body");
    var rows = [];
    [["class", r.by_class], ["model", r.by_model]].forEach(function (kind) {
      Object.keys(kind[1] || {}).sort().forEach(function (name) { rows.push([kind[0], name, kind[1][name]]); });
    });
    box.style.display = rows.length ? "" : "none";
    tb.textContent = "";
    rows.forEach(function (row) {
      var tr = el("tr", {"data-by": row[0], "data-name": row[1]}, [el("td", {text: row[0]}),
                                                                   el("td", {text: row[1] || "(none)"})]);
      PART_COLS.forEach(function (c) {
        var path = c[0].split("."), v = row[2][path[0]];
        if (path.length > 1 && v) v = v[path[1]];
        var td = el("td", {"data-key": c[0]});
        td.textContent = fmt(v, c[2]);
        td.setAttribute("data-value", v === null || v === undefined ? "" : String(v));
        tr.appendChild(td);
      });
      tb.appendChild(tr);
    });
  }

  // one row per entry of rows under the table body tbodyId (its box boxId hidden when there are none): cells of
  // cols ([key, header, digits]; the "label" key as text, cached_fraction as %), each cell's id prefix + key
  function renderRows(boxId, tbodyId, rows, cols, rowAttr, rowKey, cellPrefix) {
    var box = document.getElementById(boxId), tb = document.getElementById(tbodyId);
    box.style.display = rows && rows.length ? "" : "none";
    tb.textContent = "";
    (rows || []).forEach(function (row) {
      var attrs = {};
      attrs[rowAttr] = String(row[rowKey]);
      var tr = el("tr", attrs);
      cols.forEach(function (c) {
        var v = row[c[0]];
        if (c[0] === "cached_fraction" && v !== null && v !== undefined) v = v * 100;
        var td = el("td", {id: cellPrefix + row[rowKey] + "-" + c[0]});
        tr.appendChild(td);
        td.textContent = c[0] === "label" ? String(v) : fmt(v, c[2]);
        td.setAttribute("data-value", v === null || v === undefined ? "" : String(v));
      });
      tb.appendChild(tr);
    });
  }

  function renderTurns(turns) {
    renderRows("llm-turns", "llm-turns-body", turns, TURN_COLS, "data-turn", "turn", "llm-turn-");
  }

  function renderSessions(rows) {
    renderRows("llm-sessions", "llm-sessions-body", rows, SESSION_COLS, "data-session-row", "label", "llm-session-");
  }

  function renderGpu(g) {
    document.getElementById("llm-gpu").style.display = g ? "" : "none";
    if (!g) return;
    put("llm-gpu-power", g.power_w, 0); put("llm-gpu-util", g.util_pct, 0); put("llm-gpu-energy", g.energy_j, 0);
    put("llm-gpu-jpt", g.energy_per_output_token_j, 3);
    document.getElementById("llm-gpu-note").textContent = g.gpus + " GPU(s); energy from " +
      (g.energy_source === "counter" ? "their energy counters" : "power over time");
  }

  function renderServer(s) {
    var box = document.getElementById("llm-server");
    box.style.display = s ? "" : "none";
    if (!s) { serverSeries = []; return; }
    var latest = s.latest || {}, kv = latest.kv_cache_usage;
    put("llm-server-running", latest.running, 0); put("llm-server-waiting", latest.waiting, 0);
    put("llm-server-kv", typeof kv === "number" ? kv * 100 : null, 1); put("llm-server-scrapes", s.scrapes, 0);
    var failures = s.failures || {}, kinds = Object.keys(failures);
    put("llm-server-failures", kinds.reduce(function (n, k) { return n + failures[k]; }, 0), 0);
    document.getElementById("llm-server-note").textContent = (s.engine || "unknown engine") + " at " + s.url +
      (s.latest_age_s === null || s.latest_age_s === undefined ? "" : "; latest scrape " + fmt(s.latest_age_s, 1) + " s ago") +
      (kinds.length ? "; failures: " + kinds.map(function (k) { return k + " " + failures[k]; }).join(", ") : "");
    var banner = document.getElementById("llm-server-saturated"), sat = s.saturated;
    banner.style.display = sat ? "" : "none";
    banner.textContent = sat ? "Server saturated since " + fmt(sat.since_s, 0) + " s (" +
      (sat.signal === "waiting" ? "its waiting queue" : "requests in flight") +
      " kept growing while throughput stayed flat): later latencies measure the queue" : "";
    if (s.series) serverSeries = s.series.map(function (p) { return {t: p[0], running: p[1], waiting: p[2], kv: p[3]}; });
  }

  function draw() {
    chart("llm-chart-tokens", "Output tokens/s", [["output_tokens_per_s", "tokens/s", "#4caf50"]]);
    chart("llm-chart-ttft", "TTFT (ms)", [["ttft_p50", "p50", "#2196f3"], ["ttft_p99", "p99", "#ff9800"]]);
    chart("llm-chart-tpot", "TPOT (ms)", [["tpot_p50", "p50", "#2196f3"], ["tpot_p99", "p99", "#ff9800"]]);
    chart("llm-chart-load", "Load", [["users", "users", "#9c27b0"], ["in_flight", "in flight", "#00bcd4"],
                                     ["requests_per_s", "req/s", "#e91e63"]]);
    chart("llm-chart-server", "Server queue", [["running", "running", "#4caf50"], ["waiting", "waiting", "#f44336"]],
          serverSeries);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 4, 6, 8, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  function chart(id, title, lines, points) {
    var c = document.getElementById(id);
    if (!c || !c.offsetWidth) return;
    var ratio = window.devicePixelRatio || 1, W = c.offsetWidth, H = c.offsetHeight;
    c.width = W * ratio; c.height = H * ratio;
    var g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    var ink = getComputedStyle(panel).color || "#888";
    g.clearRect(0, 0, W, H);
    g.font = "12px Roboto, Helvetica, Arial, sans-serif";
    g.fillStyle = ink; g.globalAlpha = 0.9; g.fillText(title, 10, 16);
    var L = 52, R = 12, T = 26, B = 24, pw = W - L - R, ph = H - T - B;
    var pts = points || seriesCache, ymax = 0;
    pts.forEach(function (pt) { lines.forEach(function (ln) { var v = pt[ln[0]]; if (v > ymax) ymax = v; }); });
    ymax = niceMax(ymax * 1.05);
    var t0 = pts.length ? pts[0].t : 0, t1 = pts.length ? pts[pts.length - 1].t : 1;
    if (t1 - t0 < 10) t1 = t0 + 10;
    g.globalAlpha = 0.25; g.strokeStyle = ink; g.lineWidth = 1;
    for (var i = 0; i <= 4; i++) {
      var y = T + ph - ph * i / 4;
      g.beginPath(); g.moveTo(L, y); g.lineTo(L + pw, y); g.stroke();
    }
    g.globalAlpha = 0.75; g.textAlign = "right";
    var step = ymax / 4, digits = Number.isInteger(step) ? 0 : (step >= 0.1 ? 1 : 2);
    for (i = 0; i <= 4; i++) g.fillText(fmt(step * i, digits), L - 6, T + ph - ph * i / 4 + 4);
    g.textAlign = "center";
    for (i = 0; i <= 4; i++) g.fillText(Math.round(t0 + (t1 - t0) * i / 4) + " s", L + pw * i / 4, H - 6);
    g.textAlign = "left"; g.globalAlpha = 1; g.lineWidth = 2;
    var lx = L + pw;
    lines.slice().reverse().forEach(function (ln) {
      var w = g.measureText(ln[1]).width + 26; lx -= w;
      g.fillStyle = ln[2]; g.fillRect(lx, 8, 14, 3); g.fillStyle = ink; g.fillText(ln[1], lx + 18, 14);
    });
    lines.forEach(function (ln) {
      g.strokeStyle = ln[2]; g.beginPath();
      var started = false;
      pts.forEach(function (pt) {
        var v = pt[ln[0]];
        if (v === null || v === undefined) { started = false; return; }
        var x = L + pw * (pt.t - t0) / (t1 - t0), y = T + ph - ph * Math.min(v, ymax) / ymax;
        if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
      });
      g.stroke();
    });
  }

  function refresh() {
    if (!panel || panel.style.display === "none") return;
    var since = seriesCache.length ? seriesCache[seriesCache.length - 1].t : "";
    fetch(base + "/llm/stats?window=" + windowS + "&since=" + since, {credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error("GET /llm/stats: HTTP " + r.status); return r.json(); })
      .then(render)
      .catch(function (e) { var n = document.getElementById("llm-window-note"); if (n) n.textContent = String(e); });
  }

  function llmTabActive() {
    var q = new URLSearchParams(window.location.search).get("tab");
    if (q) return q === "llm";
    var sel = document.querySelector('[role="tab"][aria-selected="true"]');
    return !!sel && sel.textContent.trim() === "LLM";
  }

  function placeInLocust() {
    var tablist = document.querySelector('[role="tablist"]');
    if (!tablist) return false;
    // the tab bar's outermost wrapper inside the page container; our panel goes right after it
    var anchor = tablist;
    while (anchor.parentElement && !anchor.parentElement.classList.contains("MuiContainer-root") &&
           anchor.parentElement !== document.body) anchor = anchor.parentElement;
    if (panel.previousSibling !== anchor) anchor.parentElement.insertBefore(panel, anchor.nextSibling);
    return true;
  }

  function tick() {
    var active = standalone || llmTabActive();
    if (active && !standalone && !placeInLocust()) active = false;
    var shown = panel.style.display !== "none";
    panel.style.display = active ? "" : "none";
    if (active && !shown) { refresh(); draw(); }
  }

  function start() {
    panel = build();
    if (standalone) document.getElementById("llm-root").appendChild(panel);
    else { panel.style.display = "none"; document.body.appendChild(panel); }
    tick();
    setInterval(tick, 250);
    timer = setInterval(refresh, 1000);
    window.addEventListener("resize", draw);
    window.llmloadTab = {refresh: refresh, last: function () { return lastFacts; }, timer: timer};
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
