"""The ``perfgate-result-schema`` directive: the result record's JSON Schema, generated from ``perfgate.result``, so
the published schema is the one perfgate validates with (and ``perfgate result-schema`` prints)."""

from __future__ import annotations

import json

from docutils import nodes
from docutils.parsers.rst import Directive

from perfgate.result import json_schema


class PerfgateResultSchema(Directive):
    def run(self) -> list[nodes.Node]:
        text = json.dumps(json_schema(), indent=2)
        block = nodes.literal_block(text, text)
        block["language"] = "json"
        return [block]


def setup(app):
    app.add_directive("perfgate-result-schema", PerfgateResultSchema)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
