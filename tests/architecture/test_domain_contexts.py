"""The domain's contexts layer as pyproject.toml says, with imports under ``if TYPE_CHECKING:`` counted too.

import-linter leaves type-only imports out of every contract (they load nothing); issue 22 asks that no cycle hide
there either, so this test reads the same layer list and checks it on a graph that keeps them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "The domain's contexts layer"


def _layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (found,) = [c for c in contracts if c["name"].startswith(CONTRACT)]
    # "a | b": independent siblings (neither imports the other)
    return [{part.strip() for part in layer.split("|")} for layer in found["layers"]]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", exclude_type_checking_imports=False)


def _context(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["app", "domain"] else None


def _edges(graph: grimp.ImportGraph) -> set[tuple[str, str, str, str]]:
    edges = set()
    for importer in graph.modules:
        source = _context(importer)
        if source is None:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            target = _context(imported)
            if target is not None and target != source:
                edges.add((source, target, importer, imported))
    return edges


def test_every_context_is_placed_and_imports_only_downward(graph: grimp.ImportGraph) -> None:
    layers = _layers()
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    contexts = {_context(m) for m in graph.modules} - {None, "__init__"}
    assert contexts - rank.keys() == set(), "a context missing from the layer list in pyproject.toml"
    upward = sorted(
        f"{importer} -> {imported}"
        for source, target, importer, imported in _edges(graph)
        if rank[target] < rank[source] or (rank[target] == rank[source] and len(layers[rank[source]]) > 1)
    )
    assert upward == []


def test_the_domain_has_no_cycle_even_through_type_only_imports(graph: grimp.ImportGraph) -> None:
    context_edges = {(s, t) for s, t, _, _ in _edges(graph)}
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        seen[node] = 1
        for s, t in sorted(context_edges):
            if s != node:
                continue
            if seen.get(t) == 1:
                return [*path, t]
            if t not in seen and (found := visit(t, [*path, t])):
                return found
        seen[node] = 2
        return None

    assert ("results", "lti") in context_edges  # the graph is read: settle queues LMS scores
    starts = sorted({s for s, _ in context_edges})
    cycles = [c for start in starts if start not in seen and (c := visit(start, [start]))]
    assert cycles == []
