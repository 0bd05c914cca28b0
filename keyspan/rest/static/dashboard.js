// keyspan dashboard: plain JS, no libraries (the package works air-gapped).
const keyspan = (() => {
  const fmt = n => n === null || n === undefined ? "-" : Number(n).toLocaleString(undefined, {maximumFractionDigits: 1});
  const bytes = n => { if (n === null || n === undefined) return "-"; const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
    while (n >= 1024 && i < 3) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; };
  const ms = n => n === null || n === undefined ? "-" : (n < 10000 ? fmt(n) + " ms" : (n / 1000).toFixed(1) + " s");
  const when = t => t ? new Date(t * 1000).toLocaleString() : "-";
  const age = s => s === null || s === undefined ? "-" : s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : (s / 3600).toFixed(1) + " h";
  const esc = s => String(s === null || s === undefined ? "" : s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const $ = id => document.getElementById(id);

  function token() {
    const m = location.hash.match(/token=([^&]+)/);
    if (m) sessionStorage.setItem("keyspan-token", decodeURIComponent(m[1]));
    return sessionStorage.getItem("keyspan-token");
  }
  async function call(method, path, body) {
    let t = token();
    for (let tries = 0; tries < 2; tries++) {
      const r = await fetch(path, {method, headers: Object.assign({"content-type": "application/json"},
        t ? {authorization: "Bearer " + t} : {}), body: body ? JSON.stringify(body) : undefined});
      if (r.status === 401 && tries === 0) {
        t = prompt("API token of this job (in <workdir>/api-token):");
        if (!t) throw new Error("no token"); sessionStorage.setItem("keyspan-token", t); continue;
      }
      const data = await r.json();
      if (!r.ok) throw new Error(data.detail || r.statusText);
      return data;
    }
  }

  function plot(svg, points, color) {
    const w = svg.clientWidth || 400, h = svg.clientHeight || 160, pad = 28;
    if (!points.length) { svg.innerHTML = `<text x="10" y="20" fill="#999">no data yet</text>`; return; }
    const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y1 = Math.max(...ys, 1e-9);
    const X = x => pad + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (w - pad - 6);
    const Y = y => h - 18 - (y / y1) * (h - 30);
    const line = points.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
    svg.innerHTML = `<line x1="${pad}" y1="${h - 18}" x2="${w - 6}" y2="${h - 18}" stroke="#ccc"/>` +
      `<text x="2" y="14" font-size="10" fill="#777">${fmt(y1)}</text><text x="2" y="${h - 20}" font-size="10" fill="#777">0</text>` +
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${line}"/>` +
      points.map(p => `<circle cx="${X(p[0]).toFixed(1)}" cy="${Y(p[1]).toFixed(1)}" r="2" fill="${color}"/>`).join("");
  }

  async function jobsPage() {
    const jobs = await call("GET", "/ui/api/jobs");
    $("jobs").querySelector("tbody").innerHTML = jobs.map(j => `<tr><td><a href="/ui/job/${encodeURIComponent(j.id)}${location.hash}">${esc(j.name)}</a></td>` +
      `<td><span class="status ${esc(j.status)}">${esc(j.status)}</span></td><td>${fmt(j.parallelism)}</td><td>${fmt(j.last_checkpoint)}</td>` +
      `<td>${age(j.age_s)}</td><td>${esc(j.api_url || "-")}</td></tr>`).join("");
    setTimeout(jobsPage, 2000);
  }

  function savepointTree(savepoints) {
    const byParent = {}; const paths = new Set(savepoints.map(s => s.path));
    savepoints.forEach(s => { const p = paths.has(s.parent) ? s.parent : ""; (byParent[p] = byParent[p] || []).push(s); });
    const render = p => (byParent[p] || []).map(s => `<li class="savepoint">${esc(s.path)} <small>(epoch ${s.epoch}, ` +
      `parallelism ${s.parallelism}, ${esc(s.trigger)}, ${when(s.created_at)})</small><ul>${render(s.path)}</ul></li>`).join("");
    return render("") || "<li>no savepoints yet</li>";
  }

  function jobId() { return decodeURIComponent(location.pathname.split("/").pop()); }

  async function refreshJob() {
    const id = jobId(), j = await call("GET", "/ui/api/jobs/" + encodeURIComponent(id));
    $("title").textContent = j.name; $("status").textContent = j.status; $("status").className = "status " + j.status;
    const live = j.live || {};
    const lags = Object.values(live.watermark_lag_ms || {});
    $("rate").textContent = fmt(live.records_per_second); $("records").textContent = fmt(live.records);
    $("epochs").textContent = fmt(live.epochs); $("epoch-ms").textContent = ms(live.last_epoch_ms);
    $("lag").textContent = lags.length ? ms(Math.max(...lags)) : "-";
    const cps = j.checkpoints.filter(c => c.duration_ms !== null);
    const last = j.checkpoints[j.checkpoints.length - 1];
    $("last-cp").textContent = last ? `${last.epoch} (${bytes(last.bytes_written)})` : "-";
    $("failed").textContent = fmt(j.failed_checkpoints.length);
    const ops = live.operators || [];
    const state = live.state_size || {};
    $("operators").querySelector("tbody").innerHTML = ops.map(o => `<tr class="operator"><td>${esc(o.name)}</td><td>${esc(o.uids.join(", "))}</td>` +
      `<td>${o.parallelism}</td><td class="records-in">${fmt(o.records_in)}</td><td>${fmt(o.records_out)}</td><td>${fmt(o.records_per_second)}</td>` +
      `<td>${bytes(o.uids.reduce((a, u) => a + (state[u] || 0), 0))}</td></tr>`).join("") ||
      j.operators.map(o => `<tr class="operator"><td>${esc(o.name)}</td><td>${esc(o.uid)}</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>`).join("");
    const hist = live.history || [];
    plot($("plot-rate"), hist.map(p => [p.t, p.rate]), "#2e6bd8");
    plot($("plot-lag"), hist.map(p => [p.t, Math.max(0, ...Object.values(p.lag_ms || {})) / 1000]), "#d8782e");
    plot($("plot-cp-duration"), cps.map(c => [c.epoch, c.duration_ms]), "#2a9d4b");
    plot($("plot-cp-size"), j.checkpoints.map(c => [c.epoch, c.bytes_written]), "#8e44ad");
    $("checkpoints").querySelector("tbody").innerHTML = j.checkpoints.slice(-50).reverse().map(c => `<tr class="checkpoint">` +
      `<td>${c.epoch}</td><td>${when(c.committed_at)}</td><td>${ms(c.duration_ms)}</td><td>${bytes(c.bytes_written)}</td>` +
      `<td>${bytes(c.full_size)}</td><td>${fmt(c.records)}</td><td>${c.parallelism}</td><td>${c.discarded ? "discarded" : "yes"}</td></tr>`).join("");
    $("failures").querySelector("tbody").innerHTML = j.failed_checkpoints.map(f => `<tr class="fail"><td>${f.epoch}</td>` +
      `<td>${when(f.failed_at)}</td><td>${esc(f.cause)}</td></tr>`).join("") || "<tr><td colspan=3>none</td></tr>";
    $("savepoints").innerHTML = savepointTree(j.savepoints);
    autoscalerPanel(live.autoscaler);
  }

  function autoscalerPanel(a) {
    $("autoscaler-section").hidden = !a;
    if (!a) return;
    const last = a.last;
    $("autoscaler-summary").textContent = `parallelism ${a.current} (bounds ${a.min}..${a.max}), desired ${a.desired}` +
      (a.scaling ? "" : " (advisory: scaling disabled)") + (last ? ` - last decision: ${last.action}: ${last.reason}` : "");
    const curve = a.curve || [];
    plot($("plot-backlog"), curve.filter(p => p.backlog !== null).map(p => [p.t, p.backlog]), "#c0392b");
    plot($("plot-parallelism"), curve.map(p => [p.t, p.parallelism]), "#2e6bd8");
    $("autoscaler-decisions").querySelector("tbody").innerHTML = a.decisions.slice().reverse().map(d =>
      `<tr class="decision"><td>${when(d.at)}</td><td>${esc(d.action)} ${d.from} &rarr; ${d.to}${d.applied ? "" : " (advisory)"}</td>` +
      `<td>${esc(d.reason)}</td><td>${esc(Object.entries(d.inputs).map(([k, v]) => `${k} ${typeof v === "number" ? fmt(v) : v}`).join(", "))}</td></tr>`
    ).join("") || "<tr><td colspan=4>no rescale yet</td></tr>";
  }

  async function trigger(kind) {
    const id = encodeURIComponent(jobId()), msg = $("message");
    try {
      if (kind === "rescale") {  // live in the running driver; a restart only where no driver answers
        const p = parseInt($("rescale-p").value, 10);
        msg.textContent = `rescaling live to parallelism ${p}…`;
        let r;
        try {
          r = await call("POST", `/jobs/${id}/rescale`, {parallelism: p, reason: "dashboard", timeout_s: 25});
        } catch (e) {
          if (!/not running|no running job|Not Found/.test(e.message)) throw e;
          r = await call("POST", `/jobs/${id}/rescaling`, {parallelism: p});
          msg.textContent = `no running driver answered: restarting at parallelism ${p} (log: ${r.log})`; return;
        }
        msg.textContent = r.done ? `rescaled live from ${r.from} to ${r.to}: epoch ${r.epoch} ran at ${r.to}, ` +
          `${Math.round(r.pause_ms)} ms after the request` : `rescale to ${p} requested; it applies at the next epoch`;
        refreshJob(); return;
      }
      const body = kind === "stop" ? {targetDirectory: null, drain: false} : {"cancel-job": false};
      const r = await call("POST", `/jobs/${id}/${kind === "stop" ? "stop" : "savepoints"}`, body);
      msg.textContent = kind === "stop" ? "stopping with a savepoint…" : "savepoint in progress…";
      for (let i = 0; i < 600; i++) {
        const s = await call("GET", `/jobs/${id}/savepoints/${r["request-id"]}`);
        if (s.status.id === "COMPLETED") {
          msg.textContent = s.operation["failure-cause"] ? "savepoint failed: " + s.operation["failure-cause"]
            : "savepoint written: " + s.operation.location;
          refreshJob(); return;
        }
        await new Promise(ok => setTimeout(ok, 500));
      }
    } catch (e) { msg.textContent = "failed: " + e.message; }
  }

  function jobPage() {
    token();
    $("btn-savepoint").onclick = () => trigger("savepoint");
    $("btn-stop").onclick = () => trigger("stop");
    $("btn-rescale").onclick = () => trigger("rescale");
    const loop = () => refreshJob().catch(e => { $("message").textContent = e.message; }).finally(() => setTimeout(loop, 1000));
    loop();
  }
  return {jobsPage, jobPage};
})();
