"""ECMP on generic topologies (``Topology.from_arrays`` / ``from_networkx``) against the rule
written out in Python: hop-count shortest paths over links of positive capacity, and at each
node the live next links in link-id order, of which the flow takes number
``ecmp_hash(seed, key, node) % count``. Stars, trees and leaf-spines built by hand (whose
hosts the router keeps out of its distance search) and graphs of no such shape must route
exactly as the rule says, through ``Topology.route`` and ``route_many`` alike."""

from collections import deque

import numpy as np
import pytest

nx = pytest.importorskip("networkx")

import fabricsim as fs  # noqa: E402
from fabricsim.exceptions import RoutingError  # noqa: E402

M64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ecmp_hash(seed, key, node):
    return splitmix64(splitmix64(seed ^ splitmix64(key)) ^ node)


def reference_route(src, dst, cap, a, b, key, seed):
    """The links from ``a`` to ``b`` by the rule, or None where no live path exists."""
    src, dst = [int(u) for u in src], [int(v) for v in dst]
    n = max(src + dst + [a, b]) + 1
    into = [[] for _ in range(n)]
    out = [[] for _ in range(n)]
    for l, (u, v) in enumerate(zip(src, dst)):
        if cap[l] > 0:
            into[v].append(l)
            out[u].append(l)
    dist = [None] * n
    dist[b] = 0
    queue = deque([b])
    while queue:
        v = queue.popleft()
        for l in into[v]:
            u = src[l]
            if dist[u] is None:
                dist[u] = dist[v] + 1
                queue.append(u)
    if dist[a] is None:
        return None
    path, node = [], a
    while node != b:
        candidates = [l for l in out[node] if dist[dst[l]] == dist[node] - 1]
        l = candidates[ecmp_hash(seed, key, node) % len(candidates)]
        path.append(l)
        node = dst[l]
    return path


def both_ways(pairs, rng):
    """Links each way for every (u, v) pair, in a random order of link ids."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    links = np.concatenate([pairs, pairs[:, ::-1]])
    links = links[rng.permutation(len(links))]
    return links[:, 0], links[:, 1]


def star(rng):
    hosts = int(rng.integers(2, 40))
    # Some hosts with two ports to the switch (node 0).
    pairs = [(h, 0) for h in range(1, hosts + 1)] + [(h, 0) for h in range(1, hosts + 1, 5)]
    return both_ways(pairs, rng)


def tree(rng):
    switches, hosts = int(rng.integers(1, 8)), int(rng.integers(2, 40))
    pairs = [(s, int(rng.integers(0, s))) for s in range(1, switches)]
    pairs += [(switches + h, int(rng.integers(0, switches))) for h in range(hosts)]
    return both_ways(pairs, rng)


def leaf_spine(rng):
    leaves, per_leaf, spines = (int(x) for x in rng.integers(1, 6, 3))
    n_hosts = leaves * per_leaf
    pairs = [(h, n_hosts + h // per_leaf) for h in range(n_hosts)]
    pairs += [(n_hosts + l, n_hosts + leaves + s) for l in range(leaves) for s in range(spines)]
    return both_ways(pairs, rng)


def tangle(rng):
    """A random graph with hosts on it, some on two switches, some with a one-way link."""
    g = nx.gnp_random_graph(int(rng.integers(3, 12)), 0.3, seed=int(rng.integers(1 << 31)))
    core = g.number_of_nodes()
    pairs = list(g.edges)
    one_way = []
    for h in range(core, core + int(rng.integers(0, 12))):
        s, t = (int(x) for x in rng.integers(0, core, 2))
        kind = rng.integers(0, 4)
        if kind == 0:
            pairs += [(h, s), (h, t)]
        elif kind == 1:
            one_way.append((h, s) if rng.integers(0, 2) else (s, h))
        else:
            pairs.append((h, s))
    src, dst = both_ways(pairs, rng) if pairs else (np.zeros(0, np.int64),) * 2
    if one_way:
        extra = np.asarray(one_way, dtype=np.int64)
        src, dst = np.concatenate([src, extra[:, 0]]), np.concatenate([dst, extra[:, 1]])
    return src, dst


def check_against_reference(src, dst, rng, down):
    n = int(max(src.max(), dst.max())) + 1
    # A random numbering of the nodes, so no shape rests on hosts coming first.
    label = rng.permutation(n)
    src, dst = label[src], label[dst]
    cap = np.where(rng.random(len(src)) < down, 0.0, 1e9)
    topo = fs.Topology.from_arrays(src, dst, cap, n_nodes=n)
    a, b = rng.integers(0, n, (2, 400))
    a, b = a[a != b], b[a != b]
    seed = int(rng.integers(0, 1 << 40))
    want = [reference_route(src, dst, cap, int(x), int(y), i, seed) for i, (x, y) in enumerate(zip(a, b))]
    for i, (x, y) in enumerate(zip(a[:60], b[:60])):
        if want[i] is None:
            with pytest.raises(RoutingError):
                topo.route(int(x), int(y), key=i, seed=seed)
        else:
            assert topo.route(int(x), int(y), key=i, seed=seed) == want[i]
    ok = np.array([w is not None for w in want], dtype=bool)
    offsets, links, coefficients = topo._core.route_many(a[ok], b[ok], seed)
    got = [links[offsets[i] : offsets[i + 1]].tolist() for i in range(ok.sum())]
    # route_many keys flow i by its position in the call.
    again = [reference_route(src, dst, cap, int(x), int(y), i, seed) for i, (x, y) in enumerate(zip(a[ok], b[ok]))]
    assert got == again
    assert np.all(coefficients == 1.0)
    return ok.sum()


@pytest.mark.parametrize("shape", [star, tree, leaf_spine, tangle])
def test_generic_routes_follow_the_ecmp_rule(shape):
    rng = np.random.default_rng(23)
    routed = 0
    for _ in range(12):
        src, dst = shape(rng)
        if len(src) == 0:
            continue
        for down in (0.0, 0.15):
            routed += check_against_reference(src, dst, rng, down)
    assert routed > 1000


def test_from_networkx_leaf_spine_routes_follow_the_ecmp_rule():
    g = nx.Graph()
    for leaf in range(4):
        for spine in range(3):
            g.add_edge(f"leaf{leaf}", f"spine{spine}", capacity_Bps=50e9)
        for h in range(5):
            g.add_edge(f"host{leaf}.{h}", f"leaf{leaf}", capacity_Bps=50e9)
    topo = fs.Topology.from_networkx(g)
    links = topo.links
    src = links["src"].to_numpy()
    dst = links["dst"].to_numpy()
    cap = links["capacity_Bps"].to_numpy()
    hosts = [n for n in g.nodes if n.startswith("host")]
    for key, (x, y) in enumerate((x, y) for x in hosts for y in hosts if x != y):
        i, j = topo.node_id(x), topo.node_id(y)
        route = topo.route(x, y, key=key, seed=9)
        assert route == reference_route(src, dst, cap, i, j, key, 9)
        assert len(route) == (2 if x.split(".")[0] == y.split(".")[0] else 4)
