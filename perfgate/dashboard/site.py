"""The static site of ``perfgate dashboard``: an overview of every gated series, a page per case and hardware class,
and a page per run, with each page's data beside it as CSV and JSON.

Every page is plain HTML that loads plotly.js, the filters' script and the style from ``assets/`` by a relative path,
so the site works from ``file://`` and from any static host, with no CDN and no server.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from plotly.offline import get_plotlyjs

from perfgate.dashboard import charts
from perfgate.result import Result
from perfgate.trend.analysis import Series, series
from perfgate.trend.database import Point, ResultsDatabase

OVERVIEW_COLUMNS = ("case", "hardware_class", "metric", "unit", "branches", "results", "latest", "latest_verdict",
                    "newest_change", "since_commit")
CASE_COLUMNS = ("result", "recorded_at", "commit", "branch", "verdict", "metric", "value", "metric_verdict", "run")
FILTERS = (("branch", "branches"), ("hardware-class", "hardware_class"), ("metric", "metric"))
"""The overview's filters: URL parameter and the column it matches."""


@dataclass(frozen=True)
class Site:
    """Where the pages go, and how a commit is linked (``--commit-url``, with ``{sha}``)."""

    out: Path
    commit_url: str | None = None
    environments: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Each result's environment, by id (the database's column: a record holds one only under A/B)."""

    def commit_link(self, sha: str | None) -> str | None:
        """The commit's page; none for a commit perfgate could not name ("unknown"), and a dirty tree's commit
        ("SHA-dirty") links to SHA."""
        sha = (sha or "").removesuffix("-dirty")
        if not self.commit_url or not re.fullmatch(r"[0-9a-f]{7,64}", sha):
            return None
        return self.commit_url.replace("{sha}", sha)


def slug(*parts: str) -> str:
    """A file name for a case and hardware class: readable, and safe on any file system."""
    return "--".join(re.sub(r"[^A-Za-z0-9._-]+", "_", part) for part in parts)


def build(url: str, out: Path, commit_url: str | None = None) -> list[Path]:
    """Writes the site of the results database at ``url`` into ``out``; returns the pages written."""
    database = ResultsDatabase(url, create=False)
    try:
        points = database.points()
        records = database.records()
        environments = database.environments()
    finally:
        database.close()
    site = Site(out, commit_url, environments)
    write_assets(out)
    gated = [one for one in series([p for p in points if p.gated])]
    pages = [write_overview(site, gated, database.shown)]
    by_case: dict[tuple[str, str], list[Series]] = {}
    for one in gated:
        by_case.setdefault((one.case, one.hardware_class), []).append(one)
    for (case, hardware_class), found in sorted(by_case.items()):
        planted = [r for r in records.values() if (r.case, r.hardware_class) == (case, hardware_class)]
        pages.append(write_case(site, case, hardware_class, found, detection_power(planted)))
    for point in {p.result_id: p for p in points}.values():
        if point.result_id in records:
            result = records[point.result_id]
            pages.append(write_run(site, point, result, (result.case, result.hardware_class) in by_case))
    return pages


def write_assets(out: Path) -> None:
    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    (assets / charts.PLOTLY_JS).write_text(get_plotlyjs())
    for name in ("dashboard.js", "dashboard.css"):
        with resources.as_file(resources.files("perfgate.dashboard") / "assets" / name) as source:
            shutil.copyfile(source, assets / name)


def page(title: str, body: str, depth: int) -> str:
    """A whole page; ``depth``: how many folders below the site's root it sits."""
    root = "../" * depth
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<link rel="stylesheet" href="{root}assets/dashboard.css">'
            f'<script src="{root}assets/{charts.PLOTLY_JS}"></script>'
            f'<script src="{root}assets/dashboard.js" defer></script></head>\n<body>'
            f'<nav><a href="{root}index.html">perfgate dashboard</a></nav>\n<h1>{html.escape(title)}</h1>\n{body}\n'
            "</body></html>\n")


def table(columns: Sequence[str], rows: Sequence[dict[str, Any]], cells: Sequence[Sequence[str]],
          attributes: Sequence[str] = ()) -> str:
    """An HTML table: ``cells`` are HTML already; ``attributes`` each row's extra attributes."""
    head = "".join(f"<th>{html.escape(column.replace('_', ' '))}</th>" for column in columns)
    body = "".join(f"<tr {attributes[i] if attributes else ''}>{''.join(f'<td>{cell}</td>' for cell in row)}</tr>"
                   for i, row in enumerate(cells))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def export(stem: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """Writes ``rows`` beside the page as CSV and JSON; returns the links to them."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    stem.with_name(f"{stem.name}.csv").write_text(text.getvalue())
    stem.with_name(f"{stem.name}.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    return (f'<p class="export">Export: <a href="{stem.name}.csv">CSV</a> · '
            f'<a href="{stem.name}.json">JSON</a></p>')


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


def verdict_html(verdict: str | None) -> str:
    return f'<span class="verdict verdict-{html.escape(verdict or "none")}">{html.escape(verdict or "-")}</span>'


def commit_html(site: Site, sha: str | None) -> str:
    if not sha:
        return "-"
    link = site.commit_link(sha)
    short = html.escape(sha[:12])
    return f'<a class="commit" href="{html.escape(link)}">{short}</a>' if link else f"<code>{short}</code>"


def run_page(result_id: int) -> str:
    return f"../run/{result_id}.html"


def changes_html(site: Site, found: Sequence[Series]) -> str:
    """Each change point: the environment diff between the results either side of it."""
    items = []
    for one in found:
        for change in one.changes:
            before, after = one.points[change.index - 1], one.points[change.index]
            diff = environment_diff(site.environments.get(before.result_id, {}),
                                    site.environments.get(after.result_id, {}))
            what = ("; ".join(f"{html.escape(name)} {html.escape(str(old))} &rarr; {html.escape(str(new))}"
                              for name, old, new in diff) if diff else "the environment did not change")
            items.append(f"<li>{html.escape(one.metric)} {change.change:+.1%} at "
                         f"{commit_html(site, after.commit)} (after {commit_html(site, before.commit)}): {what}</li>")
    return f"<h2>At each change point</h2><ul>{''.join(items)}</ul>" if items else ""


def write_case(site: Site, case: str, hardware_class: str, found: Sequence[Series], power: DetectionPower) -> Path:
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
    body = (f'<p>Each point is one session\'s result (click it for its run); dashed lines are the change points '
            f'found by Otava (red worse, green better), orange lines the segments\' means.</p>{charts_html}'
            f'{changes_html(site, found)}<h2>Detection power</h2><p class="power">{html.escape(power.describe())}</p>'
            + table(("result", "recorded at", "commit", "branch", "verdict", "metric", "value", "run"), rows, cells)
            + export(folder / name, CASE_COLUMNS, rows))
    path = folder / f"{name}.html"
    path.write_text(page(f"{case} on {hardware_class}", body, 1))
    return path


def definitions(items: Sequence[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in items if v not in (None, "")) + "</dl>"


def write_run(site: Site, point: Point, result: Result, has_case_page: bool) -> Path:
    """``has_case_page``: whether the case has a page on this class (it has none without a gated result)."""
    folder = site.out / "run"
    folder.mkdir(exist_ok=True)
    case_page = f"../case/{slug(result.case, result.hardware_class)}.html"
    case = (f'<a href="{case_page}">{html.escape(result.case)}</a>' if has_case_page else html.escape(result.case))
    facts = [("case", case),
             ("hardware class", html.escape(result.hardware_class)), ("verdict", verdict_html(result.verdict)),
             ("recorded at", f"{point.recorded_at:%Y-%m-%d %H:%M:%S %Z}"), ("commit", commit_html(site, point.commit)),
             ("branch", html.escape(point.branch or "")), ("test", f"<code>{html.escape(result.test)}</code>"),
             ("world size", str(result.world_size)),
             ("planted slowdown", f"{result.injected_slowdown:.0%}" if result.injected_slowdown else ""),
             ("logs were in", f"<code>{html.escape(result.workdir or '')}</code>" if result.workdir else "")]
    message = f"<h2>Why</h2><pre>{html.escape(result.message)}</pre>" if result.message else ""
    metric_cells = [[html.escape(str(row.get("metric"))), number(row.get("measured")), number(row.get("baseline")),
                     "-" if row.get("change") is None else f"{row['change']:+.1%}",
                     "-" if row.get("tolerance") is None else f"{row['tolerance']:.1%}",
                     verdict_html(row.get("verdict")), html.escape(str(row.get("reason") or ""))]
                    for row in result.metrics]
    time_cells = [[str(run.get("run", i) + 1)] + [number((run.get("time_s") or {}).get(key)) for key in TIME_KEYS]
                  for i, run in enumerate(result.per_run)]
    environment = result.environment or site.environments.get(point.result_id) or {}
    body = (definitions(facts) + message
            + "<h2>Gated metrics</h2>" + table(("metric", "measured", "baseline", "change", "tolerance", "verdict",
                                                 "reason"), result.metrics, metric_cells)
            + "<h2>Where each launch's time went (s)</h2>" + table(("run", *TIME_KEYS), result.per_run, time_cells)
            + "<h2>Every metric (medians over the runs)</h2>"
            + definitions([(k, number(v)) for k, v in sorted(result.measured.items())])
            + ("<h2>Environment</h2>" + definitions([(k, html.escape(str(v))) for k, v in sorted(environment.items())])
               if environment else "")
            + (f"<h2>GPUs</h2><pre>{html.escape(json.dumps(result.gpu, indent=2))}</pre>" if result.gpu else "")
            + (f"<h2>Planted slowdown check</h2><pre>{html.escape(json.dumps(result.plant, indent=2))}</pre>"
               if result.plant else ""))
    (folder / f"{point.result_id}.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    body += f'<p class="export">Export: <a href="{point.result_id}.json">the whole record (JSON)</a></p>'
    path = folder / f"{point.result_id}.html"
    path.write_text(page(f"{result.case} on {result.hardware_class}: run {point.result_id}", body, 1))
    return path


TIME_KEYS = ("startup_s", "warmup_s", "window_s", "after_window_s", "teardown_s", "total_s")


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return html.escape(str(value))

