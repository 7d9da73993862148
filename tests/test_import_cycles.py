"""No import circle anywhere in kconvert: not between packages, not inside one (a package's `__init__` counts as a
module), with imports made only for type hints and imports deferred into functions counted too.

The graph is grimp's (the library import-linter builds its contracts on), so the circles found here are over the
same imports `lint-imports` checks. A circle is a strongly connected component of the module graph with more than
one module (Tarjan's algorithm, written out below so the test depends on nothing but the graph)."""
from __future__ import annotations

import grimp


def _import_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("kconvert", include_external_packages=False, exclude_type_checking_imports=False)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other in a circle (strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        # iterative Tarjan: (module, iterator over what it imports)
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    group.append(x)
                    if x == v:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_the_cycle_finder_finds_a_circle_through_a_package_and_ignores_a_chain():
    # a -> a.b -> c -> a is a circle (a package importing its submodule, which reaches back); d -> e is not
    edges = {"a": {"a.b"}, "a.b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set()}
    assert import_cycles(edges) == [["a", "a.b", "c"]]
    assert import_cycles({"x": {"y"}, "y": set()}) == []


def test_kconvert_has_no_import_cycle():
    cycles = import_cycles(_import_graph())
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)
