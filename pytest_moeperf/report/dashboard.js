// pytest-moeperf dashboard: narrows the series by text, zooms every chart to a build range
// (the runs outside it left out, those in it spread over the width; an empty range is all of
// them again), and shows a point's value, interval, build, date, host and run when it is
// pointed at; a click or a tap pins it, with a link to what the point stands for (its run's
// record, or a build's runs compared) until a click elsewhere or Escape. Everything it needs
// is in the page; it asks nothing of the network.
(function () {
  "use strict";
  var text = document.getElementById("text");
  var from = document.getElementById("from");
  var to = document.getElementById("to");
  var tip = document.createElement("div");
  tip.id = "tip";
  tip.hidden = true;
  document.body.appendChild(tip);

  function number(input) {
    var m = /^b?(\d+)$/.exec(input.value.trim());
    return m ? parseInt(m[1], 10) : null;
  }
  function slot(el, name) { return parseInt(el.getAttribute(name || "data-slot"), 10); }

  // One chart at the build range [lo, hi]: which of its slots (runs, or builds in a long
  // series) are kept, and where each kept one now stands.
  function zoom(svg, lo, hi) {
    var width = svg.viewBox.baseVal.width, pad = parseFloat(svg.getAttribute("data-pad"));
    var kept = [], rank = {};
    svg.querySelectorAll("circle.point").forEach(function (p) {
      var n = parseInt(p.getAttribute("data-number"), 10);
      var out = !isNaN(n) && ((lo !== null && n < lo) || (hi !== null && n > hi));
      if (!out) { rank[slot(p)] = kept.length; kept.push(p); }
    });
    function x(s) { return pad + (width - 2 * pad) * (rank[s] + 0.5) / kept.length; }
    function place(el, at) {
      var shown = at !== null && kept.length > 0;
      el.classList.toggle("zoomed-out", !shown);
      return shown;
    }
    svg.querySelectorAll("[data-slot]").forEach(function (el) {
      var s = slot(el);
      if (el.tagName === "a") {  // a record's mark: above the first kept run at or after it
        var next = Object.keys(rank).map(Number).filter(function (k) { return k >= s; });
        var at = next.length ? x(Math.min.apply(null, next)) : width - pad / 2;
        if (place(el, at)) {
          el.firstElementChild.setAttribute("d", "M" + (at - 4) + ",2 L" + (at + 4) + ",2 L" + at + ",9 Z");
        }
        return;
      }
      if (place(el, s in rank ? x(s) : null)) {
        var attrs = el.tagName === "circle" ? ["cx"] : ["x1", "x2"];
        attrs.forEach(function (a) { el.setAttribute(a, x(s)); });
      }
    });
    svg.querySelectorAll("[data-from]").forEach(function (el) {
      var a = slot(el, "data-from"), b = slot(el, "data-to");
      var inside = Object.keys(rank).map(Number).filter(function (k) { return k >= a && k <= b; });
      var changepoint = el.classList.contains("changepoint");
      var shown = changepoint ? (a in rank && b in rank) : inside.length > 0;
      if (!place(el, shown ? 0 : null)) { return; }
      if (changepoint) {
        var mid = (x(a) + x(b)) / 2;
        el.setAttribute("x1", mid); el.setAttribute("x2", mid);
      } else {
        el.setAttribute("x1", x(Math.min.apply(null, inside)) - 3);
        el.setAttribute("x2", x(Math.max.apply(null, inside)) + 3);
      }
    });
    if (kept.length) {
      svg.querySelector("text.first").textContent = kept[0].getAttribute("data-build");
      svg.querySelector("text.last").textContent = kept[kept.length - 1].getAttribute("data-build");
    }
  }

  function apply() {
    var words = text.value.toLowerCase().split(/\s+/).filter(Boolean);
    var lo = number(from), hi = number(to);
    document.querySelectorAll(".series").forEach(function (section) {
      var name = (section.getAttribute("data-name") || "").toLowerCase();
      var shown = words.every(function (w) { return name.indexOf(w) >= 0; });
      section.classList.toggle("hidden", !shown);
    });
    document.querySelectorAll("svg.chart").forEach(function (svg) {
      if (svg.querySelector("circle.point")) { zoom(svg, lo, hi); }
    });
  }

  var pinned = false;
  function pointAt(e) { return e.target.closest ? e.target.closest("[data-tip]") : null; }
  function show(e) {
    if (pinned) { return; }
    var point = pointAt(e);
    if (!point) { tip.hidden = true; return; }
    tip.textContent = point.getAttribute("data-tip");
    var box = point.getBoundingClientRect();
    tip.style.left = Math.round(box.right + 6) + "px";
    tip.style.top = Math.round(box.top - 24) + "px";
    tip.hidden = false;
  }
  function unpin() { pinned = false; tip.classList.remove("pinned"); tip.hidden = true; }
  function pin(e) {
    if (tip.contains(e.target)) { return; }  // the pinned tip's own link: followed
    unpin();
    show(e);
    var point = pointAt(e), opens = point && point.getAttribute("data-record");
    if (!point) { return; }
    if (opens) {
      var link = document.createElement("a");
      link.href = opens;
      link.textContent = /^runs\//.test(opens) ? "open its run's record" : "compare its runs";
      tip.appendChild(document.createTextNode(" \u00b7 "));
      tip.appendChild(link);
    }
    pinned = true;
    tip.classList.add("pinned");
  }

  var relative = document.getElementById("relative");  // the index's view of every host
  if (relative) {
    relative.addEventListener("change", function () {
      document.body.classList.toggle("relative-view", relative.checked);
    });
  }
  [text, from, to].forEach(function (input) { input.addEventListener("input", apply); });
  document.getElementById("filter").addEventListener("submit", function (e) { e.preventDefault(); });
  document.addEventListener("mouseover", show);
  document.addEventListener("click", pin);  // a click, or a tap on a touch screen
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { unpin(); } });
  apply();

  // compare-<host>.html: two runs of a host, every series both hold as a ratio with its 95 % interval (as
  // `moeperf changes --compare` computes it), the gate of their builds, their verdicts.
  var data = document.getElementById("compare-data");
  if (!data) { return; }
  var store = JSON.parse(data.textContent);
  var keys = Object.keys(store.runs).sort(function (p, q) {
    return store.runs[p].date < store.runs[q].date ? -1 : 1;
  });
  var pick = [document.getElementById("run-a"), document.getElementById("run-b")];
  var asked = new URLSearchParams(location.search);
  function find(prefix) {
    var hits = keys.filter(function (k) { return prefix && k.indexOf(prefix) === 0; });
    return hits.length === 1 ? hits[0] : null;
  }
  pick.forEach(function (select, i) {
    keys.forEach(function (k) {
      var r = store.runs[k], option = document.createElement("option");
      option.value = k;
      option.textContent = r.date + " " + r.build + " " + r.host + " " + k.slice(0, 12);
      select.appendChild(option);
    });
    select.value = find(asked.get(i ? "b" : "a")) || keys[Math.max(keys.length - 2 + i, 0)];
    select.addEventListener("change", compare);
  });
  function cell(row, value) {
    var td = document.createElement("td");
    td.textContent = value;
    row.appendChild(td);
    return td;
  }
  function compare() {
    var a = store.runs[pick[0].value], b = store.runs[pick[1].value];
    history.replaceState(null, "", "?a=" + pick[0].value.slice(0, 12) + "&b=" + pick[1].value.slice(0, 12));
    var body = document.querySelector("#compare tbody");
    body.textContent = "";
    var theirs = {};
    b.values.forEach(function (v) { theirs[v[0]] = v; });
    var configurations = {};
    a.values.forEach(function (v) {
      var series = store.series[v[0]], name = series.join(" "), w = theirs[v[0]];
      if (!w) { return; }
      var ratio = w[1] / v[1], se = Math.sqrt(v[2] * v[2] + w[2] * w[2]);
      var low = ratio * Math.exp(-store.z * se), high = ratio * Math.exp(store.z * se);
      var row = document.createElement("tr");
      row.dataset.series = a.host + " " + name;
      row.dataset.ratio = ratio; row.dataset.low = low; row.dataset.high = high;
      cell(row, a.host + " " + name);
      cell(row, v[1].toPrecision(4)); cell(row, w[1].toPrecision(4));
      cell(row, ratio.toFixed(4)); cell(row, "[" + low.toFixed(4) + ", " + high.toFixed(4) + "]");
      body.appendChild(row);
      (configurations[series[0]] = configurations[series[0]] || {})[series[1]] = true;
    });
    // each word as Python's shlex.quote wrote it into the page (store.quoted): a name with a
    // space or a quote is one word to the shell; a list of them is quoted a name at a time
    function q(word) { return store.quoted[word]; }
    var gate = document.getElementById("gate"), numbers = [a.build, b.build].map(function (x) {
      var m = /^b(\d+)$/.exec(x);
      return m ? m[1] : x;
    });
    gate.textContent = a.build === b.build ? "one build (" + a.build + "): nothing to gate"
      : Object.keys(configurations).map(function (p) {
        return "moeperf gate --profile " + q(p) + " --baseline " + q(numbers[0]) +
          " --candidate " + q(numbers[1]) + " -c " + Object.keys(configurations[p]).map(q).join(",");
      }).join("\n");
    decisions(a, b);
  }
  // The decisions of both runs paired as the upgrade check's table pairs them: by test
  // (without its side) and what it judged, the n-th with the n-th; what changed is read off
  // the Python table of standings (store.changed), with its one rule: the same standing and
  // another outcome word is that move ("unchanged -> slower").
  function numbered(run) {
    var seen = {}, out = {};
    (run.decisions || []).forEach(function (d) {
      var key = d[0] + "\u0000" + d[1];
      seen[key] = (seen[key] || 0) + 1;
      out[key + "\u0000" + seen[key]] = d;
    });
    return out;
  }
  function decisions(a, b) {
    var first = numbered(a), second = numbered(b), body = document.querySelector("#decisions tbody");
    body.textContent = "";
    var keys = Object.keys(first).concat(Object.keys(second).filter(function (k) { return !(k in first); }));
    keys.forEach(function (k) {
      var p = first[k], q = second[k], d = p || q, row = document.createElement("tr");
      var word = store.changed[(p ? p[5] : "none") + "|" + (q ? q[5] : "none")];
      if (word === "" && p && q && p[3] !== q[3]) { word = p[3] + " -> " + q[3]; }
      row.dataset.changed = word;
      cell(row, d[0].split("::").pop() + ": " + d[1]);
      cell(row, p ? p[3] + " " + p[4] : "-");
      cell(row, q ? q[3] + " " + q[4] : "-");
      cell(row, word || "-");
      body.appendChild(row);
    });
  }
  compare();
})();
