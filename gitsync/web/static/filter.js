// Filter the rows of a table on this page as you type: the server-side search (the form above it)
// works without this; this only narrows what is already on the page. No inline script: the CSP
// allows scripts from this site only.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var tables = document.querySelectorAll("table.filterable");
  Array.prototype.forEach.call(tables, function (table, n) {
    var box = document.createElement("p");
    box.className = "page-filter";
    var label = document.createElement("label");
    var input = document.createElement("input");
    var status = document.createElement("span");
    input.type = "search";
    input.id = "page-filter-" + n;
    label.htmlFor = input.id;
    label.textContent = "Filter this page";
    status.className = "count";
    status.setAttribute("role", "status");
    box.appendChild(label);
    box.appendChild(input);
    box.appendChild(status);
    table.parentNode.insertBefore(box, table);
    var rows = table.tBodies[0] ? table.tBodies[0].rows : [];
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.prototype.forEach.call(rows, function (row) {
        var text = row.textContent.toLowerCase();
        var keep = words.every(function (w) { return text.indexOf(w) !== -1; });
        row.hidden = !keep;
        if (keep) { shown += 1; }
      });
      status.textContent = words.length ? shown + " of " + rows.length + " rows on this page" : "";
    });
  });
});
