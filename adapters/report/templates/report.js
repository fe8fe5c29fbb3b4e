(function () {
  "use strict";
  var table = document.getElementById("tasks");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var controls = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  var shown = document.getElementById("shown");
  var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);

  function matches(row, wanted) {
    return Object.keys(wanted).every(function (name) {
      var value = wanted[name];
      var have = row.dataset[name] || "";
      return !value || (name === "text" ? have.indexOf(value) >= 0 : have === value);
    });
  }

  function filter() {
    var wanted = {};
    controls.forEach(function (control) {
      wanted[control.dataset.filter] = control.value.trim().toLowerCase();
    });
    var count = 0;
    rows.forEach(function (row) {
      var keep = matches(row, wanted);
      row.hidden = !keep;
      count += keep ? 1 : 0;
    });
    shown.textContent = count + " of " + rows.length;
  }

  function key(row, column, numeric) {
    var cell = row.cells[column];
    var text = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent;
    if (!numeric) { return text.toLowerCase(); }
    var number = parseFloat(text);
    return isNaN(number) ? -Infinity : number;
  }

  function sortBy(header) {
    var column = headers.indexOf(header);
    var numeric = header.dataset.sort === "number";
    var direction = header.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", direction === 1 ? "ascending" : "descending");
    rows.sort(function (a, b) {
      var x = key(a, column, numeric), y = key(b, column, numeric);
      return x < y ? -direction : (x > y ? direction : 0);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  controls.forEach(function (control) {
    control.addEventListener("input", filter);
    control.addEventListener("change", filter);
  });
  document.getElementById("filters").addEventListener("submit", function (event) {
    event.preventDefault();
  });
  headers.forEach(function (header) {
    if (!header.dataset.sort) { return; }
    header.tabIndex = 0;
    header.addEventListener("click", function () { sortBy(header); });
    header.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortBy(header); }
    });
  });
  filter();
}());
