// The overview's filters live in the URL (?branch=...&hardware-class=...&metric=...), so a link shows what its
// sender saw; each Plotly point of a case page opens its run page.
"use strict";

function applyFilters() {
  const params = new URLSearchParams(window.location.search);
  const selects = document.querySelectorAll("select[data-filter]");
  selects.forEach((select) => { select.value = params.get(select.dataset.filter) || ""; });
  document.querySelectorAll("tbody tr[data-metric]").forEach((row) => {
    const shown = Array.from(selects).every((select) => {
      const wanted = select.value;
      const values = (row.dataset[camel(select.dataset.filter)] || "").split(" ");
      return !wanted || values.includes(wanted);
    });
    row.hidden = !shown;
  });
}

function camel(name) {
  return name.replace(/-([a-z])/g, (_, letter) => letter.toUpperCase());
}

function onFilterChange(event) {
  const params = new URLSearchParams(window.location.search);
  if (event.target.value) {
    params.set(event.target.dataset.filter, event.target.value);
  } else {
    params.delete(event.target.dataset.filter);
  }
  const query = params.toString();
  window.history.replaceState(null, "", query ? `?${query}` : window.location.pathname);
  applyFilters();
}

function linkPoints() {
  document.querySelectorAll(".js-plotly-plot").forEach((plot) => {
    if (typeof plot.on !== "function") {
      return;
    }
    plot.on("plotly_click", (data) => {
      const target = data.points[0] && data.points[0].customdata;
      if (target && target[0]) {
        window.location.href = target[0];
      }
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("select[data-filter]").forEach((select) => {
    select.addEventListener("change", onFilterChange);
  });
  applyFilters();
  linkPoints();
});
