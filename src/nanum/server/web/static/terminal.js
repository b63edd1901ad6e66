// The web terminal: waits for the shell job to run, then joins its terminal over the owner's websocket
// (/api/v1/jobs/ID/shell): binary frames are terminal bytes both ways, text frames JSON ({"resize": [ROWS, COLS]}
// out, {"exit": CODE} in, last). Closing the page closes the websocket, which hangs up the shell.
(function () {
  "use strict";
  var box = document.querySelector("[data-terminal]");
  if (!box || typeof Terminal === "undefined") return;
  var jobId = box.getAttribute("data-job");
  var status = document.querySelector("[data-terminal-status]");
  var say = function (text) { status.textContent = text; };
  var ENDED = ["completed", "failed", "cancelled", "timeout", "preempted", "lost"];

  function poll() {
    fetch("/ui/jobs/" + jobId + ".json", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("the server answered " + r.status)); })
      .then(function (job) {
        if (job.state === "running") return open();
        if (job.finished || ENDED.indexOf(job.state) >= 0) {
          return say("shell " + jobId + " is " + job.state + (job.reason ? ": " + job.reason : ""));
        }
        say("waiting for GPUs (" + job.state + (job.reason ? ": " + job.reason : "") + ")");
        setTimeout(poll, 1000);
      })
      .catch(function (err) { say("cannot ask for shell " + jobId + ": " + err.message); setTimeout(poll, 3000); });
  }

  function open() {
    var term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
    var fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(box);
    fit.fit();
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + location.host + "/api/v1/jobs/" + jobId + "/shell");
    ws.binaryType = "arraybuffer";
    var encoder = new TextEncoder();
    var decoder = new TextDecoder();
    var code = null;
    var size = function () {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: [term.rows, term.cols] }));
    };
    ws.onopen = function () { say("connected"); size(); term.focus(); };
    ws.onmessage = function (event) {
      if (typeof event.data === "string") {
        try { code = JSON.parse(event.data).exit; } catch (e) { /* not ours */ }
        return;
      }
      term.write(decoder.decode(new Uint8Array(event.data), { stream: true }));
    };
    ws.onclose = function () {
      say(code === null ? "disconnected: the shell has ended" : "the shell exited with code " + code);
      box.setAttribute("data-exit", code === null ? "" : String(code));
      term.options.disableStdin = true;
    };
    term.onData(function (data) { if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data)); });
    term.onResize(size);
    window.addEventListener("resize", function () { fit.fit(); });
  }

  poll();
})();
