// nanum dashboard: live updates by polling the page's JSON endpoint, a confirm step before cancelling, and the
// Submit page's kind switch.
// No framework and no build step; text goes in through textContent only.
"use strict";
(function () {
  document.querySelectorAll("[data-confirm]").forEach(function (button) {
    button.addEventListener("click", function (event) {
      if (!window.confirm(button.dataset.confirm)) event.preventDefault();
    });
  });

  // The Submit page: the command is a batch job's alone (a notebook runs JupyterLab, a shell a login shell); picking a kind sets "Never
  // preempt" as the command line does (`nanum notebook` is never preempted unless asked, `nanum submit` may be).
  var submitForm = document.querySelector("[data-submit-form]");
  if (submitForm) {
    var isBatch = function () { return submitForm.querySelector('input[name="kind"][value="batch"]').checked; };
    var showKind = function () {
      submitForm.querySelectorAll("[data-batch-only]").forEach(function (el) { el.hidden = !isBatch(); });
    };
    submitForm.querySelectorAll('input[name="kind"]').forEach(function (r) {
      r.addEventListener("change", function () {
        submitForm.querySelector('input[name="no_preempt"]').checked = !isBatch();
        showKind();
      });
    });
    showKind();
  }

  var live = document.querySelector("[data-live]");
  if (!live) return;
  var kind = live.dataset.kind;
  var url = live.dataset.live;
  var logOffset = Number(live.dataset.logOffset || 0);
  var every = kind === "job" ? 2000 : 2500;
  var lastOk = Date.now();

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $$(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }
  function text(el, value) { if (el && el.textContent !== value) el.textContent = value; }
  function cell(tr, value, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    if (value instanceof Node) td.appendChild(value); else td.textContent = value;
    tr.appendChild(td);
    return td;
  }
  function since(seconds) {
    var s = Math.max(0, Math.floor(seconds)), h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
    if (s < 60) return s + "s";
    if (s < 3600) return m + "m " + (s % 60) + "s";
    return h + "h " + m + "m";
  }
  function link(href, label) { var a = document.createElement("a"); a.href = href; a.textContent = label; return a; }

  function stamp(ok) {
    if (ok) lastOk = Date.now();
    var seconds = Math.round((Date.now() - lastOk) / 1000);
    text($("[data-updated]"), ok ? "just now" : "no answer for " + seconds + " s");
    var badge = $(".live");
    if (badge) badge.classList.toggle("stale", !ok);
  }

  function updateCluster(data) {
    Object.keys(data.totals).forEach(function (k) { text($('[data-total="' + k + '"]'), String(data.totals[k])); });
    var known = $$("[data-gpu]").length, count = 0;
    data.nodes.forEach(function (node) {
      var card = $('[data-node="' + node.name + '"]');
      if (card) { card.className = "node " + node.state; text($("[data-node-state]", card), node.state); }
      node.tiles.forEach(function (t) {
        count += 1;
        var el = $('[data-gpu="' + t.key + '"]');
        if (!el) return;
        if (el.className !== t.cls) el.className = t.cls;
        el.title = t.title;
        if (t.href) el.setAttribute("href", t.href); else el.removeAttribute("href");
        text($(".util", el), t.util); text($(".label", el), t.label);
        text($(".who", el), t.who); text($(".mem", el), t.memory);
      });
    });
    if (count !== known) window.location.reload();  // nodes came or went: draw the grid again
  }

  function updateQueue(data) {
    text($('[data-count="pending"]'), String(data.waiting));
    text($('[data-count="running"]'), String(data.running.length));
    var pending = $('[data-rows="pending"]'), running = $('[data-rows="running"]');
    pending.replaceChildren.apply(pending, data.pending.length ? data.pending.map(function (j) {
      var tr = document.createElement("tr");
      cell(tr, String(j.position), "r"); cell(tr, link("/jobs/" + j.id, String(j.ref)), "r");
      cell(tr, j.name); cell(tr, j.user); cell(tr, j.lab); cell(tr, j.gpus, "r");
      cell(tr, j.waiting); cell(tr, j.estimate); cell(tr, j.reason, "reason");
      return tr;
    }).concat(data.waiting > data.pending.length ? [more(data.waiting - data.pending.length)] : [])
      : [empty(9, "Nothing is waiting.")]);
    running.replaceChildren.apply(running, data.running.length ? data.running.map(function (j) {
      var tr = document.createElement("tr");
      cell(tr, link("/jobs/" + j.id, String(j.ref)), "r"); cell(tr, j.name); cell(tr, j.user); cell(tr, j.lab);
      cell(tr, j.gpus + (j.borrowing ? " (borrowed)" : ""), "r"); cell(tr, j.where); cell(tr, j.runtime);
      cell(tr, j.util, "r"); cell(tr, j.util_avg, "r");
      var flag = document.createElement("span"); if (j.idle) { flag.className = "flag"; flag.textContent = j.idle; }
      cell(tr, flag);
      return tr;
    }) : [empty(10, "Nothing is running.")]);
  }

  function empty(span, message) {
    var tr = document.createElement("tr"); tr.className = "none";
    var td = cell(tr, message); td.colSpan = span;
    return tr;
  }

  // The waiting jobs past the first the page lists (as the queue page's template says it).
  function more(count) {
    var tr = empty(9, "and " + count + " more; "), code = document.createElement("code");
    code.textContent = "nanum ps";
    tr.firstChild.append(code, " lists every one");
    return tr;
  }

  function updateJob(data) {
    var badge = $('[data-field="state"]');
    if (badge) { badge.className = "badge " + data.state; text(badge, data.state); }
    text($('[data-field="reason"]'), data.reason);
    text($('[data-field="runtime"]'), data.runtime || "–");
    text($('[data-field="prediction"]'), data.prediction);
    text($('[data-field="ended"]'), data.ended);
    text($('[data-field="util"]'), data.util);
    text($('[data-field="util_avg"]'), data.util_avg);
    var idle = $('[data-field="idle"]');
    if (idle) { idle.hidden = !data.idle; if (data.idle) text(idle, "idle " + since(data.idle.for_s)); }
    var notebook = $("[data-notebook]");
    if (notebook) { notebook.hidden = !data.notebook; if (data.notebook) notebook.setAttribute("href", data.notebook); }
    var cancel = $("[data-cancel]");
    if (cancel && data.finished) cancel.hidden = true;
    var release = $("[data-release]");
    if (release && data.state !== "held") release.hidden = true;
    var events = $("[data-events]");
    if (events && events.children.length !== data.events.length) {
      events.replaceChildren.apply(events, data.events.map(function (e) {
        var li = document.createElement("li"), t = document.createElement("time"), b = document.createElement("b"),
          s = document.createElement("span");
        li.className = "ev " + e.kind; t.textContent = e.time; b.textContent = e.kind; s.textContent = e.message;
        li.append(t, " ", b, " ", s);
        return li;
      }));
    }
    var util = $('[data-series="util"]'), memory = $('[data-series="memory"]');
    if (util) util.setAttribute("points", data.chart.util);
    if (memory) memory.setAttribute("points", data.chart.memory);
    var nodata = $("[data-nodata]");
    if (nodata) nodata.setAttribute("visibility", data.chart.empty ? "visible" : "hidden");
    if (nodata && data.finished) text(nodata, "no readings were taken");
    if (data.finished) text($('[data-field="log-note"]'), "(tail)");
    if (data.waiting) {
      text($('[data-field="allocation"]'), data.waiting.allocation);
      text($('[data-field="started"]'), data.waiting.started);
    } else {
      allocation(data.allocation);
      text($('[data-field="started"]'), data.started);
    }
    var log = $("[data-log]");
    if (log && data.log) {
      var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent = (log.textContent + data.log).slice(-65536);
      if (atEnd) log.scrollTop = log.scrollHeight;
    }
    logOffset = data.log_offset || logOffset;
    if (data.finished) finishedTicks += 1;
  }
  var finishedTicks = 0;

  // Where a job that started while the page was open runs: "gpu-01 GPU 0, 1; gpu-02 GPU 0", nodes linked.
  function allocation(parts) {
    var dd = $('[data-field="allocation"]'), key = JSON.stringify(parts);
    if (!dd || dd.dataset.shown === key) return;
    dd.dataset.shown = key;
    dd.replaceChildren();
    parts.forEach(function (a, i) {
      if (i) dd.append("; ");
      dd.append(link("/nodes#" + a.node, a.node), " GPU " + a.gpus);
    });
    if (!parts.length) dd.textContent = "–";
  }

  var update = { cluster: updateCluster, queue: updateQueue, job: updateJob }[kind];
  function tick() {
    var target = kind === "job" ? url + "?log=" + logOffset : url;
    fetch(target, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) { window.location.href = "/login?next=" + encodeURIComponent(location.pathname); throw 0; }
        if (!response.ok) throw new Error(String(response.status));
        return response.json();
      })
      .then(function (data) { update(data); stamp(true); })
      .catch(function () { stamp(false); })
      .then(function () { if (finishedTicks < 3) window.setTimeout(next, every); });
  }
  // A page in a hidden tab asks nothing of the server; it catches up the moment it is shown again.
  var waiting = false;
  function next() {
    if (!document.hidden) return tick();
    waiting = true;
  }
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && waiting) { waiting = false; tick(); }
  });
  var log = $("[data-log]");
  if (log) log.scrollTop = log.scrollHeight;
  window.setTimeout(next, every);
})();
