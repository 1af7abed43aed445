// The overview's filters live in the URL (?branch=...&hardware-class=...&metric=...), so a link shows what its
// sender saw; each Plotly point of a case page opens its run page; a case page compares the two commits in its URL
// (?a=SHA&b=SHA) with the noise its data carries (perfgate/dashboard/compare.py says how that is found).
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

function meanOf(values) {
  return values.reduce((sum, value) => sum + value, 0) / values.length;
}

function percent(value) {
  return `${value >= 0 ? "+" : ""}${(100 * value).toFixed(1)}%`;
}

function compareCommits() {
  const source = document.getElementById("compare-data");
  if (!source) {
    return;
  }
  const data = JSON.parse(source.textContent);
  const params = new URLSearchParams(window.location.search);
  const chosen = {};
  let changed = false;
  document.querySelectorAll("select[data-compare]").forEach((select) => {
    const name = select.dataset.compare;
    const asked = params.get(name);
    const found = asked && Array.from(select.options).find((option) => option.value.startsWith(asked));
    select.value = found ? found.value : select.dataset.default;
    if (asked && !found) {
      params.delete(name);
      changed = true;
    }
    chosen[name] = select.value;
  });
  if (changed) {
    const query = params.toString();
    window.history.replaceState(null, "", `${query ? `?${query}` : window.location.pathname}${window.location.hash}`);
  }
  const body = document.querySelector("table.compared tbody");
  body.replaceChildren();
  Object.entries(data.metrics).forEach(([metric, info]) => {
    const from = info.logs[chosen.a] || [];
    const to = info.logs[chosen.b] || [];
    const cells = [metric, `${from.length} session(s)`, `${to.length} session(s)`, "-", "-", ""];
    if (from.length && to.length) {
      const shift = meanOf(to) - meanOf(from);
      cells[3] = percent(Math.exp(shift) - 1);
      if (!info.sigma) {
        cells[5] = "the history shows no noise to judge by";
      } else {
        const half = info.t * info.sigma * Math.sqrt(1 / from.length + 1 / to.length);
        const low = Math.exp(shift - half) - 1;
        const high = Math.exp(shift + half) - 1;
        cells[4] = `${percent(low)}..${percent(high)}`;
        const worse = info.higher_is_better ? high < 0 : low > 0;
        const better = info.higher_is_better ? low > 0 : high < 0;
        cells[5] = worse ? "worse" : better ? "better" : "within the noise";
      }
    } else {
      cells[5] = "not measured at both commits";
    }
    const row = body.insertRow();
    row.dataset.comparedMetric = metric;
    cells.forEach((text, index) => {
      const cell = row.insertCell();
      cell.textContent = text;
      if (index === 5 && (text === "worse" || text === "better")) {
        cell.className = text;
      }
    });
  });
}

function onCompareChange(event) {
  const params = new URLSearchParams(window.location.search);
  params.set(event.target.dataset.compare, event.target.value);
  window.history.replaceState(null, "", `?${params.toString()}${window.location.hash}`);
  compareCommits();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("select[data-filter]").forEach((select) => {
    select.addEventListener("change", onFilterChange);
  });
  applyFilters();
  linkPoints();
  document.querySelectorAll("select[data-compare]").forEach((select) => {
    select.addEventListener("change", onCompareChange);
  });
  compareCommits();
});
