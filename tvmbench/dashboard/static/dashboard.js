// tvmbench dashboard: live progress of running sweeps, by polling /api/sweeps (same data as
// `tvmbench results sweeps --json`). Only textContent and attributes are set, never HTML, so sweep
// names stay text. Without JavaScript the pages are complete, just not live.
(function () {
  "use strict";
  // interrupted: the driver is gone (killed); nothing moves until `tvmbench sweep resume`.
  var FINISHED = { complete: 1, incomplete: 1, cancelled: 1, interrupted: 1 };
  var pollMs = parseInt(document.body.getAttribute("data-poll-ms"), 10) || 1000;
  window.tvmbenchUpdates = 0; // how many times the page has applied fresh data (tests read it)

  function setField(scope, field, value) {
    var els = scope.querySelectorAll('[data-field="' + field + '"]');
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      if (field === "bar_ok" || field === "bar_failed") {
        el.style.width = value + "%";
      } else if (field === "status") {
        el.textContent = value;
        el.className = "status status-" + value;
      } else {
        el.textContent = String(value);
      }
    }
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function link(href, text, code) {
    var a = document.createElement("a");
    a.setAttribute("href", href);
    if (code) {
      var c = document.createElement("code");
      c.textContent = text;
      a.appendChild(c);
    } else {
      a.textContent = text;
    }
    return a;
  }

  // A row for a sweep that started after the page loaded, built like the server's.
  function newRow(table, s) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-sweep", s.sweep_id);
    var href = "/sweep/" + encodeURIComponent(s.sweep_id);
    cell(tr).appendChild(link(href, s.sweep_id.slice(0, 12), true));
    cell(tr).appendChild(link(href, s.name));
    cell(tr, s.label);
    var st = document.createElement("span");
    st.setAttribute("data-field", "status");
    cell(tr).appendChild(st);
    var prog = cell(tr, undefined, "nowrap");
    var outer = document.createElement("span");
    outer.className = "progress";
    ["ok", "failed"].forEach(function (kind) {
      var bar = document.createElement("span");
      bar.className = "bar " + kind;
      bar.setAttribute("data-field", "bar_" + kind);
      outer.appendChild(bar);
    });
    prog.appendChild(outer);
    ["final", "/", "jobs", " final · ok ", "ok", " · failed ", "failed", " · pending ", "pending"].forEach(function (part, i) {
      if (i % 2 === 0) {
        var f = document.createElement("span");
        f.setAttribute("data-field", part);
        prog.appendChild(f);
      } else {
        prog.appendChild(document.createTextNode(part));
      }
    });
    cell(tr, s.created_at.slice(0, 19).replace("T", " "), "nowrap");
    cell(tr, s.tvm_version);
    cell(tr, s.source, "path");
    var header = table.querySelector("tr");
    header.parentNode.insertBefore(tr, header.nextSibling);
    return tr;
  }

  function apply(rows) {
    var table = document.querySelector("table[data-live]");
    var running = false;
    rows.forEach(function (s) {
      var scopes = document.querySelectorAll('[data-sweep="' + s.sweep_id + '"]');
      if (!scopes.length && table) scopes = [newRow(table, s)];
      for (var i = 0; i < scopes.length; i++) {
        var scope = scopes[i];
        ["status", "final", "jobs", "ok", "failed", "pending", "tuning_trials", "tuning_budget"].forEach(function (f) {
          if (s[f] !== undefined) setField(scope, f, s[f]);
        });
        setField(scope, "bar_ok", s.jobs ? Math.round((1000 * s.ok) / s.jobs) / 10 : 0);
        setField(scope, "bar_failed", s.jobs ? Math.round((1000 * s.failed) / s.jobs) / 10 : 0);
        var wasLive = scope.getAttribute("data-was-running") === "1";
        if (!(s.status in FINISHED)) {
          running = true;
          scope.setAttribute("data-was-running", "1");
        } else if (wasLive) {
          var note = scope.querySelector(".done-note");
          if (note) note.hidden = false; // the sweep page's tables are from before it finished
        }
      }
    });
    window.tvmbenchUpdates += 1;
    return running;
  }

  // Only the sweeps still running, and those this page shows as running, are asked for: one small
  // query even on a database of many sweeps.
  function watched() {
    var ids = [];
    document.querySelectorAll('[data-sweep][data-was-running="1"]').forEach(function (el) {
      ids.push(el.getAttribute("data-sweep"));
    });
    return ids;
  }

  function poll() {
    fetch("/api/sweeps?watch=" + encodeURIComponent(watched().join(",")), { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (rows) {
        var running = apply(rows);
        // A page of finished sweeps only keeps listening slowly, for sweeps started later.
        setTimeout(poll, running ? pollMs : pollMs * 5);
      })
      .catch(function () { setTimeout(poll, pollMs * 5); });
  }

  if (document.querySelector("[data-sweep]") || document.querySelector("table[data-live]")) {
    document.querySelectorAll("[data-sweep]").forEach(function (el) {
      var st = el.querySelector('[data-field="status"]');
      if (st && !(st.textContent in FINISHED)) el.setAttribute("data-was-running", "1");
    });
    poll();
  }
})();
