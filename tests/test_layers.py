"""keyspan's packages import downwards only (docs/architecture.md):

    cli → {runtime, state_processor} → {datastream, connectors, rest, table} → {state, checkpoint} → {io, common, metrics}

``state`` and ``checkpoint`` never import each other (the runtime's worker glues them); ``datastream``
may use ``connectors`` (PyFlink's ``pyflink.datastream.connectors`` re-exports them), never the
reverse. The one upward import allowed: ``StreamExecutionEnvironment`` hands the job to the runtime
inside ``execute``. Every import counts, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import keyspan

ROOT = Path(keyspan.__file__).parent

LEVEL = {"io": 0, "common": 0, "metrics": 0, "state": 1, "checkpoint": 1, "datastream": 2, "connectors": 2,
         "rest": 2, "table": 2, "runtime": 3, "state_processor": 3, "cli": 4, "(top)": 5}
SIDEWAYS = {("datastream", "connectors")}  # same level, one direction only
HAND_OFF = {("datastream/stream_execution_environment.py", "runtime")}  # execute() runs the job


def _package(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return parts[0] if len(parts) > 1 else "(top)"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.startswith("keyspan."):
                yield node.lineno, name.split(".")[1]


def package_edges() -> list[tuple[str, str, str]]:
    """(importing package, imported package, where) for every import between keyspan packages."""
    edges = []
    for path in sorted(ROOT.rglob("*.py")):
        source = _package(path)
        for line, target in _imports(path):
            if target != source:
                edges.append((source, target, f"{path.relative_to(ROOT)}:{line}"))
    return edges


def violations(edges) -> list[str]:
    bad = []
    for source, target, where in edges:
        if target not in LEVEL or source not in LEVEL:
            bad.append(f"{where}: package '{source if source not in LEVEL else target}' has no level in the layering")
            continue
        file = where.rsplit(":", 1)[0]
        if (file, target) in HAND_OFF or (source, target) in SIDEWAYS:
            continue
        if LEVEL[target] >= LEVEL[source]:
            bad.append(f"{where}: {source} (level {LEVEL[source]}) imports {target} (level {LEVEL[target]})")
    return bad


def test_every_package_imports_only_the_layers_below_it():
    edges = package_edges()
    assert edges, "no imports found: the walk is broken"
    assert violations(edges) == []


def test_the_check_catches_an_upward_import():
    edges = package_edges() + [("state", "runtime", "state/heap.py:1"), ("checkpoint", "state", "checkpoint/x.py:1"),
                               ("connectors", "datastream", "connectors/x.py:1")]
    found = violations(edges)
    assert any("state (level 1) imports runtime" in v for v in found)
    assert any("checkpoint (level 1) imports state" in v for v in found)
    assert any("connectors (level 2) imports datastream" in v for v in found)


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for source, target, where in package_edges():
        if (where.rsplit(":", 1)[0], target) not in HAND_OFF:
            graph.setdefault(source, set()).add(target)

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, seen + (n,))) for n in graph.get(start, ()))

    cycles = sorted(p for p in graph if reaches(p, p))
    assert cycles == []
