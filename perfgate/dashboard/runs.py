"""The pages of single sessions: a page per run (every metric, the verdict and why, the time accounting, the
environment, and an A/B session's pairs), and the page that lists the A/B sessions."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Sequence

from perfgate.dashboard import charts, compare
from perfgate.dashboard.markup import (Site, commit_html, definitions, export, number, page, slug, table,
                                       verdict_html)
from perfgate.result import Result
from perfgate.trend.database import Point

AB_COLUMNS = ("run", "recorded_at", "case", "hardware_class", "candidate", "reference", "metric", "pairs", "change",
              "ci_low", "ci_high", "verdict")
PAIR_COLUMNS = ("metric", "pair", "reference", "candidate", "ratio")
TIME_KEYS = ("startup_s", "warmup_s", "window_s", "after_window_s", "teardown_s", "total_s")


def slower_html(result: Result) -> str:
    """A FAIL's operators that grew most, from its profiled launches (judge/profile_diff.py)."""
    rows = (result.profile or {}).get("rows") or []
    if not rows:
        return ""
    cells = [[f"<code>{html.escape(row['op'])}</code>", number(row["before_us"] / 1e3), number(row["after_us"] / 1e3),
              number(row["excess_us"] / 1e3), html.escape(row["kind"])] for row in rows]
    return "<h2>What got slower (ms per step)</h2>" + table(("operator", "before", "after", "beyond the step's growth",
                                                             "kind"), rows, cells)


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
             ("A/B reference", reference_html(site, result.reference) if result.reference else ""),
             ("command", f"<code>{html.escape(result.command)}</code>" if result.command else ""),
             ("planted slowdown", f"{result.injected_slowdown:.0%}" if result.injected_slowdown else ""),
             ("stopped by --perf-budget", html.escape(result.budget_stop or "")),
             ("logs were in", f"<code>{html.escape(result.workdir or '')}</code>" if result.workdir else "")]
    message = f"<h2>Why</h2><pre>{html.escape(result.message)}</pre>" if result.message else ""
    message += "".join(f"<h2>{html.escape(warned['category'])}</h2><pre>{html.escape(warned['message'])}</pre>"
                       for warned in result.warnings)
    metric_cells = [[html.escape(str(row.get("metric"))), number(row.get("measured")), number(row.get("baseline")),
                     "-" if row.get("change") is None else f"{row['change']:+.1%}",
                     "-" if row.get("tolerance") is None else f"{row['tolerance']:.1%}",
                     verdict_html(row.get("verdict")), html.escape(str(row.get("reason") or ""))]
                    for row in result.metrics]
    timed = [(run.get("run", i), run) for i, run in enumerate(result.per_run) if run.get("time_s")]
    time_cells = [[str(number_of + 1)] + [number(run["time_s"].get(key)) for key in TIME_KEYS]
                  for number_of, run in timed]
    environment = result.environment or site.environments.get(point.result_id) or {}
    body = (definitions(facts) + message
            + "<h2>Gated metrics</h2>" + table(("metric", "measured", "baseline", "change", "tolerance", "verdict",
                                                 "reason"), result.metrics, metric_cells)
            + slower_html(result)
            + pairs_html(folder / f"{point.result_id}-pairs", compare.ab_pairs(result))
            + ("<h2>Where each launch's time went (s)</h2>" + table(("run", *TIME_KEYS), timed, time_cells)
               if timed else "")
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


def reference_html(site: Site, reference: dict) -> str:
    """The reference side of an A/B session: its revision (and commit), or its interpreter."""
    name = html.escape(str(reference.get("revision") or reference.get("python") or "?"))
    commit = reference.get("commit")
    return f"{name} ({commit_html(site, commit)})" if commit else name


def pairs_html(stem: Path, found: Sequence[compare.Pairs]) -> str:
    """An A/B session's pairs: per metric, each pair's candidate against its reference, drawn with the change and its
    interval."""
    if not found:
        return ""
    rows = [{"metric": one.metric, "pair": i + 1, "reference": ref, "candidate": cand, "ratio": ratio}
            for one in found for i, (ref, cand, ratio) in enumerate(zip(one.reference, one.candidate, one.ratios))]
    parts = []
    for index, one in enumerate(found):
        interval = f" [{one.ci[0]:+.1%}..{one.ci[1]:+.1%}]" if one.ci else ""
        change = "-" if one.change is None else f"{one.change:+.1%}{interval}"
        parts.append(f'<p class="pairs-change">{html.escape(one.metric)}: {change}, {verdict_html(one.verdict)}</p>'
                     + charts.pairs(one, f"pairs-{index}"))
    cells = [[html.escape(row["metric"]), str(row["pair"]), number(row["reference"]), number(row["candidate"]),
              f"{row['ratio']:+.1%}"] for row in rows]
    return ('<h2 id="pairs">The pairs (A/B)</h2><p>Each pair\'s candidate against its reference, launched together '
            '(duet) or one after the other; the change is the pairs\' geometric mean, with the gate\'s interval.</p>'
            + "".join(parts) + table(PAIR_COLUMNS, rows, cells) + export(stem, PAIR_COLUMNS, rows))


def write_ab_sessions(site: Site, sessions: Sequence[tuple[Point, Result]]) -> Path:
    """Every A/B session (``--perf-against``, ``--perf-against-python``, a bisect's verdicts): per gated metric, the
    candidate's change against the reference with its interval, newest first, each linking to its pairs."""
    rows = []
    for point, result in sorted(sessions, key=lambda item: item[0].recorded_at, reverse=True):
        reference = result.reference or {}
        for one in compare.ab_pairs(result):
            rows.append({"run": point.result_id, "recorded_at": f"{point.recorded_at:%Y-%m-%d %H:%M}",
                         "case": result.case, "hardware_class": result.hardware_class,
                         "candidate": result.candidate_commit or point.commit,
                         "reference": reference.get("commit") or reference.get("revision"), "metric": one.metric,
                         "pairs": len(one.ratios), "change": one.change, "ci_low": one.ci[0] if one.ci else None,
                         "ci_high": one.ci[1] if one.ci else None, "verdict": one.verdict})
    cells = [[f'<a href="run/{row["run"]}.html#pairs">{row["run"]}</a>', row["recorded_at"], html.escape(row["case"]),
              html.escape(row["hardware_class"]), commit_html(site, row["candidate"]),
              commit_html(site, row["reference"]), html.escape(row["metric"]), str(row["pairs"]),
              "-" if row["change"] is None else f"{row['change']:+.1%}",
              "-" if row["ci_low"] is None else f"{row['ci_low']:+.1%}..{row['ci_high']:+.1%}",
              verdict_html(row["verdict"])] for row in rows]
    body = ("<p>Each A/B session: the candidate against the reference, pair by pair, as the change of their geometric "
            "mean with its interval. Two commits of a case that no A/B session paired are compared on the case's "
            "page, against the spread of its history.</p>"
            + table(("run", "recorded at", "case", "hardware class", "candidate", "reference", "metric", "pairs",
                     "change", "interval", "verdict"), rows, cells)
            + export(site.out / "ab", AB_COLUMNS, rows))
    path = site.out / "ab.html"
    path.write_text(page("A/B sessions", body, 0))
    return path

