"""The HTML every page of the dashboard shares: the page around a body, tables, links to commits and verdicts, and
the CSV and JSON beside a page."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from perfgate.dashboard import charts
from perfgate.trend.database import Bisection


@dataclass(frozen=True)
class Site:
    """Where the pages go, and how a commit is linked (``--commit-url``, with ``{sha}``)."""

    out: Path
    commit_url: str | None = None
    environments: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Each result's environment, by id (the database's column: a record holds one only under A/B)."""
    bisections: Sequence[Bisection] = ()

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


def page(title: str, body: str, depth: int) -> str:
    """A whole page; ``depth``: how many folders below the site's root it sits."""
    root = "../" * depth
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<link rel="stylesheet" href="{root}assets/dashboard.css">'
            f'<script src="{root}assets/{charts.PLOTLY_JS}"></script>'
            f'<script src="{root}assets/dashboard.js" defer></script></head>\n<body>'
            f'<nav><a href="{root}index.html">perfgate dashboard</a> · <a href="{root}ab.html">A/B sessions</a></nav>'
            f'\n<h1>{html.escape(title)}</h1>\n{body}\n'
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


def verdict_html(verdict: str | None) -> str:
    return f'<span class="verdict verdict-{html.escape(verdict or "none")}">{html.escape(verdict or "-")}</span>'


def commit_html(site: Site, sha: str | None) -> str:
    if not sha:
        return "-"
    link = site.commit_link(sha)
    short = html.escape(sha[:12])
    return f'<a class="commit" href="{html.escape(link)}">{short}</a>' if link else f"<code>{short}</code>"


def definitions(items: Sequence[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in items if v not in (None, "")) + "</dl>"


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return html.escape(str(value))
