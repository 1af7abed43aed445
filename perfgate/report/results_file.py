"""``--perf-results PATH``: every case's whole result record, as one JSON document, for tools that read verdicts.

The record is each case's ``result.json`` (verdict, gated metrics with their change and interval, runs, the
reference of an A/B case, the message of one that failed to run), gathered for the session, so that a
program driving pytest (``perfgate bisect``) reads every case it ran, crashed ones included, from one place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from perfgate.result import Result

if TYPE_CHECKING:
    from perfgate.config.settings import Settings


class ResultsFile:
    """A ResultSink writing ``path`` (atomically) at the end of the session: ``{"results": [record, ...]}``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, results: Sequence[Result], settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps({"results": [result.to_json() for result in results]}, indent=2) + "\n")
        partial.replace(self.path)
