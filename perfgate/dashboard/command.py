"""``perfgate dashboard --history URL --out DIR [--commit-url TEMPLATE]``: writes the static site."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfgate.dashboard.site import build
from perfgate.trend.command import add_history_option
from perfgate.trend.database import DatabaseError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate dashboard",
        description="Write the results database (--perf-history) as a static site: an overview of every gated series "
        "with filters kept in the URL, a page per case and hardware class with Otava's change points, any two of its "
        "commits compared and the bisections that named a commit, a page per run, and the A/B sessions pair by pair. "
        "It opens from file:// or any static host: plotly.js comes from the plotly package, not a CDN.")
    add_history_option(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the site goes")
    parser.add_argument("--commit-url", metavar="TEMPLATE",
                        help="link each commit, e.g. https://github.com/ORG/REPO/commit/{sha}")
    return parser


def main(argv: list[str]) -> int:
    """Exit 0, or 2 where the database cannot be read."""
    args = build_parser().parse_args(argv)
    if args.commit_url is not None and "{sha}" not in args.commit_url:
        print("perfgate: error: --commit-url needs {sha} where the commit goes, e.g. "
              "https://github.com/ORG/REPO/commit/{sha}", file=sys.stderr)
        return 2
    try:
        pages = build(args.history, args.out, args.commit_url)
    except DatabaseError as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2
    print(f"perfgate: wrote {len(pages)} page(s) into {args.out}; open {args.out / 'index.html'}")
    return 0
