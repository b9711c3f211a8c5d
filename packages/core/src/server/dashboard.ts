/**
 * The live dashboard served at `/`: one self-contained page (no external scripts, styles or fonts) that polls
 * `/v1/stats` and draws tier occupancy, lookup hit rate and bytes moved per second over time as inline SVG.
 * Each chart is an `<svg class="chart">` whose `data-samples` attribute counts the samples drawn; every series is
 * a `<polyline class="series" data-series=NAME>` (the dashboard test in headless Chromium checks both).
 */
export const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tiersync</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5rem; color: #1d2330; background: #fafbfc; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
  #status { color: #666; margin-bottom: 1rem; }
  .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 1rem; }
  .card { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: .8rem 1rem; }
  .card h2 { font-size: 1rem; margin: 0 0 .5rem; }
  svg.chart { width: 100%; height: 180px; background: #fcfcfd; }
  .legend span { margin-right: 1rem; white-space: nowrap; }
  .legend i { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: -1px; }
  table { border-collapse: collapse; width: 100%; }
  td, th { text-align: right; padding: .2rem .5rem; border-bottom: 1px solid #eef0f2; }
  td:first-child, th:first-child { text-align: left; }
</style>
</head>
<body>
<h1>tiersync</h1>
<div id="status">connecting...</div>
<div class="grid">
  <div class="card"><h2>Tier occupancy (% of capacity)</h2>
    <svg id="occupancy" class="chart" viewBox="0 0 400 160" preserveAspectRatio="none" data-samples="0"></svg>
    <div class="legend" id="occupancy-legend"></div></div>
  <div class="card"><h2>Lookup hit rate (% of pages)</h2>
    <svg id="hitrate" class="chart" viewBox="0 0 400 160" preserveAspectRatio="none" data-samples="0"></svg></div>
  <div class="card"><h2>Throughput (bytes moved per second)</h2>
    <svg id="throughput" class="chart" viewBox="0 0 400 160" preserveAspectRatio="none" data-samples="0"></svg>
    <div class="legend" id="throughput-scale"></div></div>
  <div class="card"><h2>Tiers</h2><table id="tiers"><thead><tr><th>tier</th><th>pages</th><th>used</th><th>hits</th><th>misses</th></tr></thead><tbody></tbody></table></div>
</div>
<script>
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var W = 400, H = 160, KEEP = 120;
  var COLORS = ['#2f6fde', '#e0812f', '#2fa36b', '#b8427c', '#7a5cd6', '#8a8f2a', '#d63b3b', '#3bb0c9'];
  var interval = Number(new URLSearchParams(location.search).get('interval')) || 1000;
  var samples = [];
  var prev = null;

  function fmtBytes(n) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(Math.round(n))) + ' ' + u[i];
  }

  function el(name, attrs) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  /** Redraws one chart: series is { name: [values or null per sample] }, max the top of the y axis. */
  function draw(id, series, max) {
    var svg = document.getElementById(id);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    for (var g = 0; g <= 4; g++) {
      var y = H - (g / 4) * H;
      svg.appendChild(el('line', { x1: 0, x2: W, y1: y, y2: y, stroke: '#e6e9ed', 'stroke-width': 1 }));
    }
    var names = Object.keys(series);
    names.forEach(function (name, i) {
      var vals = series[name];
      var pts = [];
      vals.forEach(function (v, j) {
        if (v === null || !isFinite(v)) return;
        var x = vals.length > 1 ? (j / (KEEP - 1)) * W : 0;
        var y = H - Math.max(0, Math.min(1, v / (max || 1))) * (H - 4) - 2;
        pts.push(x.toFixed(1) + ',' + y.toFixed(1));
      });
      svg.appendChild(el('polyline', { 'class': 'series', 'data-series': name, points: pts.join(' '), fill: 'none', stroke: COLORS[i % COLORS.length], 'stroke-width': 2 }));
    });
    svg.setAttribute('data-samples', String(samples.length));
  }

  function legend(id, names) {
    var box = document.getElementById(id);
    box.innerHTML = '';
    names.forEach(function (name, i) {
      var s = document.createElement('span');
      var sw = document.createElement('i');
      sw.style.background = COLORS[i % COLORS.length];
      s.appendChild(sw);
      s.appendChild(document.createTextNode(name));
      box.appendChild(s);
    });
  }

  function render(stats) {
    var now = Date.now();
    var moved = 0;
    stats.tiers.forEach(function (t) { moved += t.bytesRead + t.bytesWritten; });
    var sample = { occupancy: {}, hitRate: null, bps: null };
    stats.tiers.forEach(function (t) {
      var cap = t.capacityBytes > 0 ? t.capacityBytes : 0;
      sample.occupancy[t.name] = cap ? (100 * t.usedBytes) / cap : (t.capacityPages ? (100 * t.usedPages) / t.capacityPages : 0);
    });
    var l = stats.lookups;
    if (prev) {
      var dReq = l.pagesRequested - prev.lookups.pagesRequested;
      sample.hitRate = dReq > 0 ? (100 * (l.pagesHit - prev.lookups.pagesHit)) / dReq : (samples.length ? samples[samples.length - 1].hitRate : null);
      sample.bps = Math.max(0, (moved - prev.moved) / Math.max(0.001, (now - prev.at) / 1000));
    } else {
      sample.hitRate = l.pagesRequested > 0 ? (100 * l.pagesHit) / l.pagesRequested : 0;
      sample.bps = 0;
    }
    prev = { lookups: l, moved: moved, at: now };
    samples.push(sample);
    if (samples.length > KEEP) samples.shift();

    var names = stats.tiers.map(function (t) { return t.name; });
    var occ = {};
    names.forEach(function (n) { occ[n] = samples.map(function (s) { return n in s.occupancy ? s.occupancy[n] : null; }); });
    draw('occupancy', occ, 100);
    legend('occupancy-legend', names);
    draw('hitrate', { 'hit rate': samples.map(function (s) { return s.hitRate; }) }, 100);
    var peak = Math.max.apply(null, samples.map(function (s) { return s.bps || 0; }).concat([1]));
    draw('throughput', { 'bytes/s': samples.map(function (s) { return s.bps; }) }, peak);
    document.getElementById('throughput-scale').textContent = 'top of chart: ' + fmtBytes(peak) + '/s';

    var body = document.querySelector('#tiers tbody');
    body.innerHTML = '';
    stats.tiers.forEach(function (t) {
      var tr = document.createElement('tr');
      [t.name, t.usedPages + ' / ' + t.capacityPages, fmtBytes(t.usedBytes), t.hits, t.misses].forEach(function (v) {
        var td = document.createElement('td');
        td.textContent = String(v);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    document.getElementById('status').textContent = 'node ' + stats.node + ' · model ' + stats.model + ' · up ' + Math.round(stats.uptimeSeconds) + ' s · ' +
      l.requests + ' lookups · updated ' + new Date(now).toLocaleTimeString();
  }

  function poll() {
    fetch('/v1/stats', { cache: 'no-store' })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
      .then(render)
      .catch(function (e) { document.getElementById('status').textContent = 'cannot reach the daemon: ' + e.message; })
      .then(function () { setTimeout(poll, interval); });
  }
  poll();
})();
</script>
</body>
</html>
`;
