"""The flow-graph drawing stays linear in edges (it was O(nodes x edges): 16,000 edges took 43 s a view):
the layering's comparisons are counted, and large graphs are laid out and drawn correctly."""

from __future__ import annotations

from agents.graph_svg import END, START, _ranks, graph_svg


def _big_graph(n: int, fan: int) -> tuple[list[str], list[tuple[str, str]]]:
    """A chain start -> n0 -> ... -> n{n-1} -> end, each node also skipping ahead ``fan`` nodes, plus loops back."""
    ids = [START, *(f"n{i}" for i in range(n)), END]
    pairs = [(START, "n0"), (f"n{n - 1}", END)]
    for i in range(n):
        pairs += [(f"n{i}", f"n{j}") for j in range(i + 1, min(n, i + 1 + fan))]
        if i % 100 == 99:
            pairs.append((f"n{i}", f"n{i - 50}"))  # a back edge (a loop), ignored for layering
    return ids, pairs


class CountedId(str):
    """A node id that counts how often it is compared for equality (the layering's inner work)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedId.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_layering_compares_ids_a_number_of_times_linear_in_edges() -> None:
    ids, pairs = _big_graph(1_000, 4)
    counted = {i: CountedId(i) for i in ids}
    CountedId.compared = 0
    rank = _ranks([counted[i] for i in ids], [(counted[s], counted[t]) for s, t in pairs])
    assert rank[END] == 1_001
    # The old loop compared every edge's source with every node: ~4,000,000 here.
    assert CountedId.compared <= 2 * len(pairs), CountedId.compared


def test_a_graph_of_20000_edges_is_layered_by_longest_path() -> None:
    ids, pairs = _big_graph(5_000, 4)
    assert len(pairs) > 20_000
    rank = _ranks(ids, pairs)
    assert rank[START] == 0
    assert [rank[f"n{i}"] for i in (0, 1, 2_500, 4_999)] == [1, 2, 2_501, 5_000]
    assert rank[END] == 5_001


def test_the_svg_of_a_large_graph_has_every_node_and_edge() -> None:
    ids, pairs = _big_graph(2000, 8)
    svg = graph_svg([{"id": i} for i in ids], [{"source": s, "target": t} for s, t in pairs])
    assert svg.count('class="flow-edge"') == len(pairs)
    assert svg.count('class="flow-node ') == len(ids)
