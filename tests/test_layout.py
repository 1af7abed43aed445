"""The package's layout is its architecture: stages in the order data flows, each importing only from the
stages before it, with no import circle, and a light record writer for the workloads."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "perfgate"
STAGES = ("outcome", "git", "result", "records", "config", "launch", "rank", "measure", "judge", "report", "trend",
          "dashboard", "bisect", "fixture", "plugin", "cli")
"""Lowest first. ``outcome`` (the skip/fail exceptions), ``git`` (asking the checkout), ``result`` (the record the
stages fill) and ``records`` (the workload contract) sit below every stage; ``rank`` (what runs inside the ranks)
answers launch's requests for stacks; ``dashboard`` draws what ``trend`` keeps;
``bisect`` drives whole pytest sessions;
``fixture`` (one case through the stages), ``plugin`` and ``cli`` wire the stages to pytest and to the command line."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str | None:
    """``perfgate.launch.plan`` -> ``launch``; the package itself has none."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def perfgate_imports(path: Path) -> set[str]:
    """Every perfgate module ``path`` imports, at any depth of the file (TYPE_CHECKING blocks included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "perfgate":
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                    (PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py").exists()
                found.add(candidate if is_module else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "perfgate")
    return found


MODULES = {module_name(p): perfgate_imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_belongs_to_a_stage():
    assert {stage(m) for m in MODULES if m != "perfgate"} <= set(STAGES)


@pytest.mark.parametrize("module", [m for m in MODULES if m != "perfgate"])
def test_a_stage_imports_nothing_from_a_later_stage(module):
    own = STAGES.index(stage(module))
    later = sorted(i for i in MODULES[module] if stage(i) and STAGES.index(stage(i)) > own)
    assert not later, f"{module} ({stage(module)}) imports from later stages: {later}"


def test_no_import_circle():
    graph = {m: {i for i in imports if i in MODULES and i != "perfgate"} for m, imports in MODULES.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            pytest.fail("import circle: " + " -> ".join(path[path.index(module):] + (module,)))
        if module in done:
            return
        for imported in graph[module]:
            visit(imported, path + (module,))
        done.add(module)

    for module in graph:
        visit(module, ())


def test_what_a_workload_imports_pulls_in_neither_pytest_nor_torch():
    """A rank under torchrun imports the record writer, the plant, FLOP counting and the statistics; pytest would
    cost every rank its import, and torch must stay the workload's own choice of when."""
    code = ("import sys\n"
            "from perfgate import StepRecorder\n"
            "import perfgate.rank.plant, perfgate.measure.flops, perfgate.measure.stats, perfgate.records.openclip_log\n"
            "print(sorted(m for m in ('pytest', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, check=True)
    assert done.stdout.strip() == "[]"


def test_the_public_api_is_what_the_docs_teach():
    import perfgate

    for name in perfgate.__all__:
        assert getattr(perfgate, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        perfgate.nonsense  # noqa: B018
