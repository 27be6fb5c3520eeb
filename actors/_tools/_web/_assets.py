"""The inspector's stylesheet and its one script, served from memory.

Plain CSS and plain JavaScript: no build step, nothing fetched from elsewhere,
so the page works offline. The script only polls: every few seconds it asks
the server for the page's ``<main>`` again (the same URL with ``partial=1``),
sending the validator of what it shows (``If-None-Match``: the page's
``live-etag`` meta, then each answer's ETag), and swaps it in when it changed; a
304 says nothing changed, at the cost of reading the journal's change marker. The server escapes everything it renders, and
the Content-Security-Policy header allows no inline script, so user data in the
swapped HTML cannot run.
"""

from __future__ import annotations

__all__ = ["ASSETS"]

_CSS = """\
:root { --fg: #1d2330; --muted: #5c6578; --line: #dde1e8; --bg: #f6f7f9; --card: #fff;
  --accent: #2857c5; --ok: #1d7a46; --warn: #9a6400; --bad: #b3261e; --idle: #6b7280; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1rem; align-items: baseline; padding: .6rem 1.2rem;
  background: #1d2330; color: #fff; }
header a { color: #fff; font-weight: 600; text-decoration: none; }
header .source { color: #b9c2d3; font-family: ui-monospace, monospace; font-size: 12px; }
header .live { margin-left: auto; font-size: 12px; color: #b9c2d3; }
header .live.stale { color: #ffb4a9; }
header label { font-size: 12px; color: #b9c2d3; }
.wrap { padding: 1rem 1.2rem; max-width: 1400px; }
h1 { font-size: 20px; margin: .2rem 0 .6rem; word-break: break-all; }
h2 { font-size: 15px; margin: 1.4rem 0 .4rem; }
a { color: var(--accent); }
form.filters { display: flex; gap: .6rem; flex-wrap: wrap; align-items: end; margin-bottom: .8rem; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.filters input, form.filters select { font: inherit; padding: .25rem .4rem;
  border: 1px solid var(--line); border-radius: 4px; background: #fff; min-width: 10rem; }
form.filters button { font: inherit; padding: .3rem .9rem; border: 0; border-radius: 4px;
  background: var(--accent); color: #fff; cursor: pointer; }
.counts { display: flex; gap: .4rem; flex-wrap: wrap; margin: .4rem 0 .8rem; }
.counts a { text-decoration: none; }
table { border-collapse: collapse; width: 100%; background: var(--card);
  border: 1px solid var(--line); }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; background: #fafbfc; }
td.mono, .mono { font-family: ui-monospace, monospace; font-size: 12.5px; word-break: break-all; }
td.detail { color: var(--muted); max-width: 40rem; }
td.nowrap, td.nowrap.mono { white-space: nowrap; word-break: normal; }
.badge { display: inline-block; padding: 0 .5rem; border-radius: 999px; font-size: 12px;
  border: 1px solid currentColor; white-space: nowrap; }
.badge.running { color: var(--accent); } .badge.suspended { color: var(--idle); }
.badge.completed { color: var(--ok); } .badge.failed, .badge.corrupt { color: var(--bad); }
.badge.cancelled { color: var(--warn); } .badge.compensation_stuck { color: var(--bad); }
.badge.queued { color: var(--idle); border-style: dashed; }
.badge.all { color: var(--fg); }
.badge b { font-weight: 600; }
.pager { margin: .6rem 0; display: flex; gap: 1rem; color: var(--muted); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; margin: 0;
  background: var(--card); border: 1px solid var(--line); padding: .6rem .8rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-all; }
pre { margin: 0; white-space: pre-wrap; word-break: break-all;
  font: 12.5px/1.4 ui-monospace, monospace; }
pre.value { background: var(--card); border: 1px solid var(--line); padding: .5rem .7rem;
  max-height: 24rem; overflow: auto; }
pre.trace { background: #fff6f5; border: 1px solid #f1c6c2; padding: .5rem .7rem;
  max-height: 28rem; overflow: auto; }
.error { color: var(--bad); }
.muted { color: var(--muted); }
ul.tree { list-style: none; padding-left: 1.2rem; margin: .2rem 0; }
ul.tree li { margin: .15rem 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(28rem, 1fr)); gap: 0 1.6rem; }
.problem { background: var(--card); border: 1px solid var(--line); padding: 1rem 1.2rem;
  max-width: 50rem; }
#actions { background: var(--card); border: 1px solid var(--line); padding: .4rem .8rem .6rem;
  margin-bottom: .8rem; }
#actions h2 { margin-top: .2rem; }
form.action { display: inline-flex; gap: .4rem; align-items: end; margin: .2rem 1rem .2rem 0;
  flex-wrap: wrap; }
form.action label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.action input, .confirm input { font: inherit; padding: .2rem .4rem;
  border: 1px solid var(--line); border-radius: 4px; }
form.action button, .confirm button { font: inherit; padding: .25rem .8rem; border-radius: 4px;
  border: 1px solid var(--accent); background: #fff; color: var(--accent); cursor: pointer; }
.confirm { background: var(--card); border: 1px solid var(--line); padding: 1rem 1.2rem;
  max-width: 60rem; }
.confirm button.danger { background: var(--bad); border-color: var(--bad); color: #fff; }
.confirm code { font: 12.5px ui-monospace, monospace; word-break: break-all; }
#outcome.done { color: var(--ok); font-weight: 600; }
#outcome.error { color: var(--bad); font-weight: 600; }
details summary { cursor: pointer; color: var(--muted); font-size: 12px; }
"""

_JS = """\
// Live updates without reloading: poll this page's <main> and swap it in.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var state = document.getElementById("live-state");
  var pause = document.getElementById("pause");
  if (!main || !state) { return; }
  var every = Math.max(200, Number(main.getAttribute("data-poll")) * 1000 || 2000);
  var last = main.innerHTML;
  var meta = document.querySelector('meta[name="live-etag"]');
  var tag = meta ? meta.getAttribute("content") : null;  // what the shown part was rendered from

  function stamp(text, stale) {
    state.textContent = text;
    state.className = stale ? "live stale" : "live";
  }

  function openDetails() {
    var ids = [];
    main.querySelectorAll("details[id]").forEach(function (d) { if (d.open) { ids.push(d.id); } });
    return ids;
  }

  function tick() {
    if (pause && pause.checked) { stamp("paused", false); setTimeout(tick, every); return; }
    if (document.hidden) { setTimeout(tick, every); return; }  // a background tab costs nothing
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    var headers = { "Accept": "text/html" };
    if (tag) { headers["If-None-Match"] = tag; }
    fetch(url.toString(), { headers: headers, cache: "no-store" })
      .then(function (resp) {
        return resp.text().then(function (body) {
          return { ok: resp.ok, status: resp.status, body: body, tag: resp.headers.get("ETag") };
        });
      })
      .then(function (got) {
        if (got.status === 304) { stamp("live, updated " + new Date().toLocaleTimeString(), false); return; }  // still current
        if (!got.ok) { stamp("update failed (HTTP " + got.status + ")", true); return; }
        tag = got.tag;
        if (got.body !== last) {
          var open = openDetails();
          main.innerHTML = got.body;  // escaped by the server; inline script is not allowed
          last = main.innerHTML;
          open.forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = true; } });
        }
        stamp("live, updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function () { stamp("server unreachable; retrying", true); })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
"""

# name -> (media type, body)
ASSETS: dict[str, tuple[str, str]] = {
    "inspector.css": ("text/css; charset=utf-8", _CSS),
    "live.js": ("text/javascript; charset=utf-8", _JS),
}
