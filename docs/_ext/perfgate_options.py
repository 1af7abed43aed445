"""The ``perfgate-options`` directive: the options reference, generated from perfgate's own option declarations
(``perfgate.config.settings.OPTIONS``), so the page cannot drift from ``pytest --help``."""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive

from perfgate.config.settings import OPTIONS, Option


def _value(option: Option) -> str:
    if option.parse is None:
        return "flag"
    return option.metavar or "VALUE"


def _default(option: Option) -> str:
    if option.parse is None:
        return "off"
    if option.default in (None, ()):
        return "-"
    return str(option.default)


class PerfgateOptions(Directive):
    """A table of every option: flag and value, ini key, default, and its help text."""

    def run(self) -> list[nodes.Node]:
        header = ("option", "ini key", "default", "meaning")
        rows = [(f"{option.flag} {_value(option)}" if option.parse else option.flag, option.ini, _default(option),
                 option.help) for option in OPTIONS]
        table = nodes.table(classes=["perfgate-options"])
        group = nodes.tgroup(cols=len(header))
        table += group
        for width in (22, 22, 8, 48):
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        group += head
        group += body
        head += self._row(header, literal=())
        for row in rows:
            body += self._row(row, literal=(0, 1))
        return [table]

    @staticmethod
    def _row(cells: tuple[str, ...], literal: tuple[int, ...]) -> nodes.row:
        row = nodes.row()
        for index, text in enumerate(cells):
            entry = nodes.entry()
            entry += nodes.paragraph("", "", nodes.literal(text, text) if index in literal else nodes.Text(text))
            row += entry
        return row


def setup(app):
    app.add_directive("perfgate-options", PerfgateOptions)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
