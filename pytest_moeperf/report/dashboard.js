// pytest-moeperf dashboard: narrows the series by text and the points by build range.
// Everything it needs is in the page; it asks nothing of the network.
(function () {
  "use strict";
  var text = document.getElementById("text");
  var from = document.getElementById("from");
  var to = document.getElementById("to");
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
    document.querySelectorAll(".point").forEach(function (point) {
      var n = parseInt(point.getAttribute("data-number"), 10);
      var out = !isNaN(n) && ((lo !== null && n < lo) || (hi !== null && n > hi));
      point.classList.toggle("out", out);
    });
  }
  [text, from, to].forEach(function (input) { input.addEventListener("input", apply); });
  document.getElementById("filter").addEventListener("submit", function (e) { e.preventDefault(); });
  apply();
})();
