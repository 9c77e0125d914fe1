// pytest-moeperf dashboard: draws every chart from the data the page holds (the one place
// their geometry is: the scale, its ticks, where each point stands), narrows the series by
// text, zooms every chart to a build range (the runs outside it left out, those in it spread
// over the width; an empty range is all of them again), and shows a point's value, interval,
// build, date, host and run when it is pointed at; a click or a tap pins it, with a link to
// what the point stands for (its run's record, or a build's runs compared) until a click
// elsewhere or Escape. Everything it needs is in the page; it asks nothing of the network.
(function () {
  "use strict";
  var text = document.getElementById("text");
  var from = document.getElementById("from");
  var to = document.getElementById("to");
  var tip = document.createElement("div");
  tip.id = "tip";
  tip.hidden = true;
  document.body.appendChild(tip);

  // ---- the charts: each <script class=chart-data> (report/charts.py) drawn as SVG in its place
  var SVG = "http://www.w3.org/2000/svg";
  var PAD = 36;
  var HEADROOM = 0.05;  // the share of the frame left free beyond the highest and lowest value
  var LOG_RANGE = 10;  // a span whose top is 10x its bottom or more is drawn on a log scale

  // At most `most` round values (1, 2 or 5 times a power of ten apart) within [bottom, top].
  function niceTicks(bottom, top, most) {
    most = most || 5;
    var span = top - bottom;
    if (!(span > 0) || !isFinite(span)) { return isFinite(bottom) ? [bottom] : []; }
    var raw = span / Math.max(most - 1, 1), power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; })
      .filter(function (v) { return v >= raw; })[0];
    var first = Math.ceil(bottom / step) * step, out = [];
    for (var k = 0; k <= Math.floor((top - first) / step + 1e-9); k++) {
      out.push(+(first + k * step).toFixed(12));
    }
    return out;
  }
  // 1, 2 and 5 times a power of ten within [bottom, top] (both above 0), or only the powers
  // of ten where those would be more than `most`: a log scale's gridlines.
  function logTicks(bottom, top, most) {
    most = most || 7;
    var low = Math.floor(Math.log10(bottom)), high = Math.ceil(Math.log10(top)), ticks = [];
    [[1, 2, 5], [1]].some(function (mantissas) {
      ticks = [];
      for (var e = low; e <= high; e++) {
        mantissas.forEach(function (m) {
          var v = +(m + "e" + e);
          if (bottom <= v && v <= top) { ticks.push(v); }
        });
      }
      return ticks.length <= most;
    });
    return ticks;
  }
  // A chart's y-scale over its span: where a value stands, from 0 at the frame's bottom to 1
  // at its top, the span HEADROOM inside it.
  function scaleOf(span) {
    var bottom = span[0], top = span[1], log = bottom > 0 && top >= LOG_RANGE * bottom;
    return {
      log: log,
      ticks: function () { return log ? logTicks(bottom, top) : niceTicks(bottom, top); },
      share: function (v) {
        var raw = log ? Math.log(v / bottom) / Math.log(top / bottom)
          : (v - bottom) / ((top - bottom) || top || 1);
        return HEADROOM + (1 - 2 * HEADROOM) * raw;
      }
    };
  }
  // A number as Python's format(v, ".6g") writes it: a scale's labels.
  function g6(v) {
    if (v === 0) { return "0"; }
    var e = Math.floor(Math.log10(Math.abs(+v.toPrecision(6))));
    if (e < -4 || e >= 6) {
      var m = v.toExponential(5).split("e"), n = parseInt(m[1], 10);
      return String(+m[0]) + "e" + (n < 0 ? "-" : "+") + (Math.abs(n) < 10 ? "0" : "") + Math.abs(n);
    }
    return String(+v.toPrecision(6));
  }
  function element(tag, attrs, parent, title) {
    var el = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (title !== undefined) {
      var t = document.createElementNS(SVG, "title");
      t.textContent = title;
      el.appendChild(t);
    }
    if (parent) { parent.appendChild(el); }
    return el;
  }
  function round1(v) { return Math.round(v * 10) / 10; }

  // The frame: gridlines at the scale's ticks with their labels and the unit above them, and
  // the first and last label along the bottom. Returns the svg and its y(value).
  function frame(chart, scale) {
    var w = chart.width, h = chart.height;
    var svg = element("svg", {
      "class": "chart" + (scale.log ? " log" : ""), width: w, height: h,
      viewBox: "0 0 " + w + " " + h, role: "img"
    });
    function y(v) { return round1(h - PAD / 2 - (h - PAD) * scale.share(v)); }
    var said = scale.log ? chart.unit + ", log scale" : chart.unit;
    if (said) { element("text", {x: 2, y: 9, "class": "axis unit"}, svg).textContent = said; }
    scale.ticks().forEach(function (v) {
      element("line", {"class": "grid", x1: PAD, x2: w - 4, y1: y(v), y2: y(v)}, svg);
      var label = element("text", {x: PAD - 3, y: round1(y(v) + 3), "class": "axis", "text-anchor": "end"}, svg);
      label.textContent = g6(v);
    });
    element("text", {x: PAD, y: h - 2, "class": "axis first"}, svg);
    element("text", {x: w - PAD, y: h - 2, "class": "axis last", "text-anchor": "end"}, svg);
    return {svg: svg, y: y};
  }
  function label(svg, first, last) {
    svg.querySelector("text.first").textContent = first;
    svg.querySelector("text.last").textContent = last;
  }

  // A series chart with its points in the build range [lo, hi] (null: open) laid out over the
  // width, the others drawn but left out (class zoomed-out).
  function drawSeries(chart, lo, hi) {
    var f = frame(chart, scaleOf(chart.span)), svg = f.svg, y = f.y, w = chart.width, h = chart.height;
    var kept = [], rank = {};
    chart.points.forEach(function (p, i) {
      var n = p.number;
      if (n === null || !((lo !== null && n < lo) || (hi !== null && n > hi))) {
        rank[i] = kept.length;
        kept.push(i);
      }
    });
    function x(i) { return round1(PAD + (w - 2 * PAD) * (rank[i] + 0.5) / kept.length); }
    function out(el, shown) { if (!shown) { el.setAttribute("class", el.getAttribute("class") + " zoomed-out"); } }
    function inside(a, b) { return kept.filter(function (i) { return i >= a && i <= b; }); }
    chart.points.forEach(function (p, i) {
      var shown = i in rank, at = shown ? x(i) : 0, slot = {"data-slot": i, "data-number": p.number === null ? "" : p.number};
      if (i === 0 || chart.points[i - 1].build !== p.build) {  // a tick where a build begins
        out(element("line", Object.assign({"class": "tick", x1: at, x2: at, y1: h - 16, y2: h - 11}, slot), svg), shown);
      }
      out(element("line", Object.assign({"class": "interval", x1: at, x2: at, y1: y(p.low), y2: y(p.high)}, slot), svg), shown);
      var attrs = Object.assign({"class": "point", cx: at, cy: y(p.median), r: 2.5, "data-build": p.build, "data-tip": p.tip}, slot);
      if (p.record !== undefined) { attrs["data-record"] = p.record; }
      out(element("circle", attrs, svg, p.tip), shown);
    });
    chart.changes.forEach(function (c) {
      var shown = c.from in rank && c.to in rank, at = shown ? round1((x(c.from) + x(c.to)) / 2) : 0;
      out(element("line", {
        "class": "changepoint" + (c.host ? " host" : ""), "data-from": c.from, "data-to": c.to,
        x1: at, x2: at, y1: 4, y2: h - PAD / 2
      }, svg, c.title), shown);
    });
    chart.steps.forEach(function (st) {
      var within = inside(st.from, st.to), shown = within.length > 0;
      out(element("line", {
        "class": st.kind, "data-from": st.from, "data-to": st.to,
        x1: shown ? round1(x(within[0]) - 3) : 0, x2: shown ? round1(x(within[within.length - 1]) + 3) : 0,
        y1: y(st.value), y2: y(st.value)
      }, svg, st.title), shown);
    });
    chart.marks.forEach(function (m) {  // a record's mark: above the first kept run at or after it
      var next = kept.filter(function (i) { return i >= m.slot; });
      var at = next.length ? x(next[0]) : w - PAD / 2;
      var link = element("a", {"class": "record", href: m.link, "data-slot": m.slot}, svg);
      element("path", {d: "M" + (at - 4) + ",2 L" + (at + 4) + ",2 L" + at + ",9 Z"}, link, m.kind);
      out(link, kept.length > 0);
    });
    if (kept.length) { label(svg, chart.points[kept[0]].build, chart.points[kept[kept.length - 1]].build); }
    return svg;
  }
  // A claim's chart: each verdict's ratio and interval, its bound a dashed line.
  function drawClaim(chart) {
    var f = frame(chart, scaleOf(chart.span)), svg = f.svg, y = f.y, w = chart.width, n = chart.verdicts.length;
    function x(i) { return round1(PAD + (w - 2 * PAD) * (i + 0.5) / n); }
    var b = y(chart.bound.value);
    element("line", {"class": "bound", x1: PAD, x2: w - PAD, y1: b, y2: b}, svg, chart.bound.title);
    chart.verdicts.forEach(function (v, i) {
      element("line", {"class": "interval", x1: x(i), x2: x(i), y1: y(v.low), y2: y(v.high)}, svg);
      element("circle", {"class": "verdict " + v.outcome, cx: x(i), cy: y(v.ratio), r: 3}, svg, v.title);
    });
    label(svg, chart.first, chart.last);
    return svg;
  }
  var charts = [];
  document.querySelectorAll("script.chart-data").forEach(function (holder) {
    charts.push({holder: holder, chart: JSON.parse(holder.textContent), svg: null});
  });
  function draw(lo, hi) {
    charts.forEach(function (c) {
      var svg = c.chart.kind === "claim" ? drawClaim(c.chart) : drawSeries(c.chart, lo, hi);
      if (c.svg) { c.svg.replaceWith(svg); } else { c.holder.parentNode.insertBefore(svg, c.holder); }
      c.svg = svg;
    });
  }
  window.moeperfCharts = {niceTicks: niceTicks, logTicks: logTicks, g6: g6};

  // ---- the filter, the build range and the tip
  function number(input) {
    var m = /^b?(\d+)$/.exec(input.value.trim());
    return m ? parseInt(m[1], 10) : null;
  }

  function apply() {
    var words = text.value.toLowerCase().split(/\s+/).filter(Boolean);
    var lo = number(from), hi = number(to);
    document.querySelectorAll(".series").forEach(function (section) {
      var name = (section.getAttribute("data-name") || "").toLowerCase();
      var shown = words.every(function (w) { return name.indexOf(w) >= 0; });
      section.classList.toggle("hidden", !shown);
    });
    draw(lo, hi);
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
