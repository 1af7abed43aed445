"""The static site of ``perfgate dashboard``: an overview of every gated series, a page per case and hardware class
(with any two of its commits compared, and the bisections of it), a page per run (with an A/B session's pairs), and a
page of the A/B sessions, with each page's data beside it as CSV and JSON.

Every page is plain HTML that loads plotly.js, the filters' script and the style from ``assets/`` by a relative path,
so the site works from ``file://`` and from any static host, with no CDN and no server.
"""

from __future__ import annotations

import dataclasses
import html
import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from plotly.offline import get_plotlyjs

from perfgate.dashboard import charts, compare
from perfgate.dashboard.markup import Site, commit_html, export, page, slug, table, verdict_html
from perfgate.dashboard.runs import write_ab_sessions, write_run
from perfgate.result import Result
from perfgate.trend.analysis import Series, series
from perfgate.trend.database import Bisection, Point, ResultsDatabase

OVERVIEW_COLUMNS = ("case", "hardware_class", "metric", "unit", "branches", "results", "latest", "latest_verdict",
                    "newest_change", "since_commit")
CASE_COLUMNS = ("result", "recorded_at", "commit", "branch", "verdict", "metric", "value", "metric_verdict", "run")
FILTERS = (("branch", "branches"), ("hardware-class", "hardware_class"), ("metric", "metric"))
"""The overview's filters: URL parameter and the column it matches."""
ALSO_SHOWN = ("samples_per_second", "total_time_secs", "mfu", "cpu_seconds_per_sample")
"""Drawn on a case page beside its gated metrics where its results measured them: the throughput, the total time,
the MFU and the CPU clock, gated or not."""
GPU_BUSY = "gpu_busy_fraction"
"""The least busy GPU's utilisation over the measured windows, from each record's GPU samples."""


def build(url: str, out: Path, commit_url: str | None = None) -> list[Path]:
    """Writes the site of the results database at ``url`` into ``out``; returns the pages written."""
    database = ResultsDatabase(url, create=False)
    try:
        points = database.points()
        records = database.records()
        environments = database.environments()
        bisections = database.bisections()
    finally:
        database.close()
    site = Site(out, commit_url, environments, bisections)
    write_assets(out)
    recorded = {p.result_id: p for p in points}
    paired = {key for key, result in records.items() if result.reference is not None}
    alone = [p for p in [*points, *gpu_busy(recorded, records)] if p.result_id not in paired]
    gated = series([p for p in alone if p.gated])
    pages = [write_overview(site, gated, database.shown),
             write_ab_sessions(site, [(recorded[key], records[key]) for key in sorted(paired) if key in recorded])]
    by_case: dict[tuple[str, str], list[Series]] = {}
    for one in gated:
        by_case.setdefault((one.case, one.hardware_class), []).append(one)
    for one in series([p for p in alone if not p.gated and p.metric in (*ALSO_SHOWN, GPU_BUSY)]):
        found = by_case.get((one.case, one.hardware_class))
        if found is not None and one.metric not in {other.metric for other in found}:
            found.append(one)
    for (case, hardware_class), found in sorted(by_case.items()):
        planted = [r for r in records.values() if (r.case, r.hardware_class) == (case, hardware_class)]
        pages.append(write_case(site, case, hardware_class, found, detection_power(planted)))
    for point in recorded.values():
        if point.result_id in records:
            result = records[point.result_id]
            pages.append(write_run(site, point, result, (result.case, result.hardware_class) in by_case))
    return pages


def gpu_busy(recorded: dict[int, Point], records: dict[int, Result]) -> list[Point]:
    """Each result's GPU busy share as a point of its own series (the database keeps it in the record only)."""
    return [dataclasses.replace(recorded[key], metric=GPU_BUSY, value=float(result.gpu["mean_utilization"]),
                                gated=False, metric_verdict=None)
            for key, result in records.items()
            if key in recorded and result.gpu and result.gpu.get("mean_utilization") is not None]


def write_assets(out: Path) -> None:
    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    (assets / charts.PLOTLY_JS).write_text(get_plotlyjs())
    for name in ("dashboard.js", "dashboard.css"):
        with resources.as_file(resources.files("perfgate.dashboard") / "assets" / name) as source:
            shutil.copyfile(source, assets / name)


def environment_diff(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """What differs between two results' environments: (name, before, after), by name."""
    return [(name, before.get(name), after.get(name)) for name in sorted(set(before) | set(after))
            if before.get(name) != after.get(name) and name != "executable"]


@dataclass(frozen=True)
class DetectionPower:
    """The planted slowdowns a case's history holds on one hardware class, and the smallest that failed."""

    planted: dict[float, tuple[int, int]]
    """Each planted size: (failed, sessions)."""

    @property
    def smallest_caught(self) -> float | None:
        return min((size for size, (failed, _) in self.planted.items() if failed), default=None)

    def describe(self) -> str:
        if not self.planted:
            return "no planted slowdown in the history (--perf-inject-slowdown): its detection power is unmeasured"
        sizes = ", ".join(f"{size:.0%}: {failed} of {total} failed" for size, (failed, total) in
                          sorted(self.planted.items()))
        smallest = self.smallest_caught
        caught = f"the smallest caught {smallest:.0%}" if smallest is not None else "none caught"
        return f"planted slowdowns: {sizes}; {caught}"


def detection_power(results: Sequence[Result]) -> DetectionPower:
    planted: dict[float, list[int]] = {}
    for result in results:
        if result.injected_slowdown > 0 and result.verdict in ("FAIL", "pass", "stale", "unresolved"):
            tally = planted.setdefault(result.injected_slowdown, [0, 0])
            tally[0] += result.verdict == "FAIL"
            tally[1] += 1
    return DetectionPower({size: (failed, total) for size, (failed, total) in planted.items()})


def newest(one: Series) -> Point:
    return one.points[-1]


def overview_row(one: Series) -> dict[str, Any]:
    change = one.changes[-1] if one.changes else None
    latest = newest(one)
    return {"case": one.case, "hardware_class": one.hardware_class, "metric": one.metric, "unit": one.unit,
            "branches": " ".join(sorted({p.branch for p in one.points if p.branch})), "results": len(one.points),
            "latest": latest.value, "latest_verdict": latest.metric_verdict or latest.verdict,
            "newest_change": change.change if change else None,
            "since_commit": one.points[change.index].commit if change else None}


def write_overview(site: Site, found: Sequence[Series], where: str) -> Path:
    rows = [overview_row(one) for one in found]
    cells, attributes = [], []
    for index, (one, row) in enumerate(zip(found, rows)):
        link = f"case/{slug(one.case, one.hardware_class)}.html"
        change = row["newest_change"]
        changed = "-" if change is None else (
            f'<span class="{"worse" if one.worse(one.changes[-1]) else "better"}">{change:+.1%}</span> since '
            f'{commit_html(site, row["since_commit"])}')
        cells.append([f'<a href="{link}">{html.escape(one.case)}</a>', html.escape(one.hardware_class),
                      html.escape(one.metric), f"{row['latest']:,.4g} {html.escape(one.unit)}",
                      verdict_html(row["latest_verdict"]), changed, charts.sparkline(one, f"spark-{index}")])
        attributes.append(" ".join(f'data-{name}="{html.escape(str(row[column]))}"' for name, column in FILTERS))
    selects = "".join(filter_select(name, sorted({v for row in rows for v in str(row[column]).split() if v}))
                      for name, column in FILTERS)
    body = (f'<p>{len({r["case"] for r in rows})} case(s) on {len({r["hardware_class"] for r in rows})} hardware '
            f'class(es), {len(rows)} gated series, from {html.escape(where)}.</p>'
            f'<form class="filters">{selects}</form>'
            + table(("case", "hardware class", "metric", "latest", "verdict", "newest change", "history"), rows,
                    cells, attributes)
            + export(site.out / "index", OVERVIEW_COLUMNS, rows))
    path = site.out / "index.html"
    path.write_text(page("Results history", body, 0))
    return path


def filter_select(name: str, values: Sequence[str]) -> str:
    options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
    return (f'<label>{name.replace("-", " ")} <select name="{name}" data-filter="{name}">'
            f'<option value="">all</option>{options}</select></label>')


def run_page(result_id: int) -> str:
    return f"../run/{result_id}.html"


def changes_html(site: Site, found: Sequence[Series], bisections: Sequence[Bisection]) -> str:
    """Each change point: the environment diff between the results either side of it, and the bisection that
    explains it (told once, at the first metric whose step it explains)."""
    items, told = [], []
    for one in found:
        for change in one.changes:
            before, after = one.points[change.index - 1], one.points[change.index]
            diff = environment_diff(site.environments.get(before.result_id, {}),
                                    site.environments.get(after.result_id, {}))
            what = ("; ".join(f"{html.escape(name)} {html.escape(str(old))} &rarr; {html.escape(str(new))}"
                              for name, old, new in diff) if diff else "the environment did not change")
            named = [b for b in bisections if explains(b, before.commit, after.commit) and b not in told]
            told.extend(named)
            bisected = "".join(f"; perfgate bisect {bisection_html(site, b)}" for b in named)
            items.append(f"<li>{html.escape(one.metric)} {change.change:+.1%} at "
                         f"{commit_html(site, after.commit)} (after {commit_html(site, before.commit)}): "
                         f"{what}{bisected}</li>")
    return f"<h2>At each change point</h2><ul>{''.join(items)}</ul>" if items else ""


def explains(bisection: Bisection, before: str | None, after: str | None) -> bool:
    """Whether a bisection answers a change point: it named the first result's commit after the step, or it searched
    between the commits either side of it."""
    before, after = (commit.removesuffix("-dirty") if commit else commit for commit in (before, after))
    return bool(after) and (bisection.culprit == after or (bisection.good, bisection.bad) == (before, after))


def bisection_html(site: Site, bisection: Bisection) -> str:
    if bisection.culprit:
        what = f"named {commit_html(site, bisection.culprit)}"
    else:
        what = "could not name one commit: one of " + ", ".join(commit_html(site, sha) for sha in bisection.suspects)
    return (f"between {commit_html(site, bisection.good)} and {commit_html(site, bisection.bad)} {what}"
            f"<details><summary>its verdicts</summary><pre>{html.escape(bisection.answer)}</pre></details>")


def bisections_html(site: Site, mine: Sequence[Bisection]) -> str:
    if not mine:
        return ""
    items = "".join(f'<li class="bisection">{b.recorded_at:%Y-%m-%d %H:%M}: {bisection_html(site, b)}</li>'
                    for b in mine)
    return f"<h2>Bisections</h2><ul>{items}</ul>"


def compare_html(site: Site, found: Sequence[Series]) -> str:
    """Any two commits of the case, compared in the page (dashboard.js) from the data compare.commit_data gives; the
    two commits live in the URL (?a=SHA&b=SHA)."""
    data = compare.commit_data(found)
    if len(data["commits"]) < 2:
        return ""
    first, second = compare.default_pair(found, [commit["sha"] for commit in data["commits"]])
    options = "".join(f'<option value="{html.escape(c["sha"])}">{html.escape(c["sha"][:12])} '
                      f'({html.escape(c["first_seen"])})</option>' for c in data["commits"])
    selects = "".join(f'<label>{label} <select name="{name}" data-compare="{name}" data-default="{html.escape(sha or "")}">'
                      f'{options}</select></label>' for name, label, sha in (("a", "from", first), ("b", "to", second)))
    payload = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (f'<h2 id="compare">Compare two commits</h2><p>The change from one commit to the other, with its '
            f'{compare.CONFIDENCE:.0%} interval: the noise is this case\'s spread between sessions in the history '
            f'(pooled within its segments), so one session of each commit is enough to ask.</p>'
            f'<form class="compare">{selects}</form><table class="compared"><thead><tr><th>metric</th><th>from</th>'
            f'<th>to</th><th>change</th><th>{compare.CONFIDENCE:.0%} interval</th><th>reads</th></tr></thead>'
            f'<tbody></tbody></table><script type="application/json" id="compare-data">{payload}</script>')


def write_case(site: Site, case: str, hardware_class: str, found: Sequence[Series], power: DetectionPower) -> Path:
    mine = [b for b in site.bisections if (b.case, b.hardware_class) == (case, hardware_class)]
    folder = site.out / "case"
    folder.mkdir(exist_ok=True)
    name = slug(case, hardware_class)
    charts_html = "".join(
        charts.history(one, run_page, site.commit_link, f"history-{index}") for index, one in enumerate(found))
    rows = [{"result": i + 1, "recorded_at": f"{p.recorded_at:%Y-%m-%d %H:%M}", "commit": p.commit, "branch": p.branch,
             "verdict": p.verdict, "metric": one.metric, "value": p.value, "metric_verdict": p.metric_verdict,
             "run": run_page(p.result_id)} for one in found for i, p in enumerate(one.points)]
    cells = [[str(row["result"]), row["recorded_at"], commit_html(site, row["commit"]), html.escape(row["branch"] or "-"),
              verdict_html(row["verdict"]), html.escape(row["metric"]), f"{row['value']:,.4g}",
              f'<a href="{row["run"]}">run</a>'] for row in rows]
    body = (f'<p>Each point is one session\'s result against its stored baseline (click it for its run; A/B sessions '
            f'are on <a href="../ab.html">their own page</a>); dashed lines are the change points '
            f'found by Otava (red worse, green better), orange lines the segments\' means.</p>{charts_html}'
            f'{changes_html(site, found, mine)}{compare_html(site, found)}{bisections_html(site, mine)}'
            f'<h2>Detection power</h2><p class="power">{html.escape(power.describe())}</p>'
            + table(("result", "recorded at", "commit", "branch", "verdict", "metric", "value", "run"), rows, cells)
            + export(folder / name, CASE_COLUMNS, rows))
    path = folder / f"{name}.html"
    path.write_text(page(f"{case} on {hardware_class}", body, 1))
    return path
