"""Collectives: whole jobs, from an empty scenario to the collectives table.

The peer is ASTRA-sim's analytical backend, which on this machine takes 47 s and 5.6 GB
(congestion-unaware; 84 s congestion-aware) for a 1 GiB all-reduce on 4,096 NPUs behind one
switch, and 3.8 to 6.2 minutes and 14 to 15 GB for an all-to-all on 4,096 NPUs. Each timed call
here builds a fresh Scenario, adds the collective (routing every flow) and runs it to
completion, so the figures compare with ASTRA-sim's wall time for the same job. Topologies
are built in ``setup`` (their cost is measured by bench_fabrics).
"""

import numpy as np

import fabricsim as fs

GiB = 1 << 30


def one_switch(n_npus, link_Bps=50e9, latency_s=0.5e-6):
    """ASTRA-sim's "Switch" topology: every NPU on one switch (node ``n_npus``) by a
    ``link_Bps`` link each way."""
    src = np.concatenate([np.arange(n_npus), np.full(n_npus, n_npus)])
    dst = np.concatenate([np.full(n_npus, n_npus), np.arange(n_npus)])
    n_links = 2 * n_npus
    return fs.Topology.from_arrays(
        src, dst, np.full(n_links, link_Bps), np.full(n_links, latency_s), n_nodes=n_npus + 1
    )


def run_collective(topology, op, ranks, size_bytes, algorithm, **scenario):
    sc = fs.Scenario(topology, **scenario)
    sc.add_collective(op, ranks, size_bytes, algorithm=algorithm)
    return sc.run().collectives


class OneSwitch4096Npus:
    """1 GiB on 4,096 NPUs behind one 50 GB/s-per-port switch: a ring all-reduce (one coupled
    flow of 4,096 edges) and a direct all-to-all (16,773,120 flows of 256 KiB)."""

    timeout = 600
    number = 1
    repeat = (1, 3, 200.0)
    warmup_time = 0

    def setup(self):
        self.topology = one_switch(4096)
        self.ranks = np.arange(4096)

    def time_all_reduce_ring_1GiB(self):
        run_collective(self.topology, "all_reduce", self.ranks, GiB, "ring")

    def peakmem_all_reduce_ring_1GiB(self):
        run_collective(self.topology, "all_reduce", self.ranks, GiB, "ring")

    def time_all_to_all_1GiB(self):
        run_collective(self.topology, "all_to_all", self.ranks, GiB, "direct")

    def peakmem_all_to_all_1GiB(self):
        run_collective(self.topology, "all_to_all", self.ranks, GiB, "direct")


class OneSwitch65536Npus:
    """1 GiB ring all-reduce on 65,536 NPUs behind one switch (a ``Topology.from_arrays``
    graph, routed by the generic router): the whole job, routing its 65,536 edges included
    (16 s when the router searched every NPU from each destination)."""

    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self):
        self.topology = one_switch(65536)
        self.ranks = np.arange(65536)

    def time_all_reduce_ring_1GiB(self):
        run_collective(self.topology, "all_reduce", self.ranks, GiB, "ring")

    def peakmem_all_reduce_ring_1GiB(self):
        run_collective(self.topology, "all_reduce", self.ranks, GiB, "ring")


class RouteHandBuiltLeafSpine:
    """ECMP routes for 200,000 random host pairs on a leaf-spine built by hand with
    ``Topology.from_arrays`` (512 leaves of 128 hosts, 64 spines: 66,112 nodes), added with one
    ``add_flows`` call (60 s for the routes alone when every destination host had its
    own search of the whole graph)."""

    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self):
        leaves, hosts, spines = 512, 128, 64
        n_hosts = leaves * hosts
        host = np.arange(n_hosts)
        leaf = n_hosts + np.repeat(np.arange(leaves), spines)
        spine = n_hosts + leaves + np.tile(np.arange(spines), leaves)
        a = np.concatenate([host, leaf])
        b = np.concatenate([n_hosts + host // hosts, spine])
        self.topology = fs.Topology.from_arrays(
            np.concatenate([a, b]), np.concatenate([b, a]), 50e9, 0.5e-6
        )
        rng = np.random.default_rng(0)
        src, dst = rng.integers(0, n_hosts, (2, 200_000))
        keep = src != dst
        self.src, self.dst = src[keep], dst[keep]

    def time_add_flows_ecmp(self):
        fs.Scenario(self.topology).add_flows(self.src, self.dst, GiB)


class AllToAll512GpusAcrossRacks:
    """1 GiB all-to-all among 512 H100s in 64 HGX servers on a rail-optimised Quantum-2 fat-tree
    (261,632 flows, 448 of every GPU's 511 peers in other servers)."""

    params = (["adaptive", "ecmp"],)
    param_names = ["routing"]
    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self, routing):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="quantum-2")
        self.ranks = np.arange(512)

    def time_all_to_all(self, routing):
        run_collective(self.fabric, "all_to_all", self.ranks, GiB, "direct", routing=routing)

    def peakmem_all_to_all(self, routing):
        run_collective(self.fabric, "all_to_all", self.ranks, GiB, "direct", routing=routing)


class HierarchicalAllReduceMillionGpus:
    """1 GiB hierarchical all-reduce over 1,048,608 GB300s (14,564 NVL72 racks) on a 3-tier
    Quantum-X800 Clos with ECMP: ring reduce-scatter in every rack, a ring all-reduce of
    1/72 of the data on each of the 72 rails (14,564 edges each, every edge routed), ring
    all-gather in every rack. Flow fidelity; the 8 s fabric build is in ``setup``."""

    timeout = 900
    number = 1
    repeat = (1, 2, 300.0)
    warmup_time = 0

    def setup(self):
        self.fabric = fs.cluster(domain="gb300-nvl72", n_domains=14_564, scale_out="quantum-x800", tiers=3)

    def time_all_reduce(self):
        run_collective(self.fabric, "all_reduce", self.fabric.gpus, GiB, "hierarchical", routing="ecmp")

    def peakmem_all_reduce(self):
        run_collective(self.fabric, "all_reduce", self.fabric.gpus, GiB, "hierarchical", routing="ecmp")


class AnalyticalEstimate:
    """One ``fs.estimate`` call (alpha-beta, no simulation) for a 128-GPU job on 16 HGX H100
    servers with SHARP, as a sweep over sizes would make it; "auto" times every construction
    NCCL enables there (ring and tree on three protocols, NVLSTree, NVLS+SHARP) to choose."""

    params = (["auto", "ring", "tree", "hierarchical", "nvls_tree", "nvls_sharp", "halving_doubling"],)
    param_names = ["algorithm"]

    def setup(self, algorithm):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=16, scale_out="quantum-2", sharp=True)
        self.ranks = np.arange(128)
        self.size = 0
        fs.estimate(self.fabric, "all_reduce", GiB, self.ranks, algorithm=algorithm)

    def time_estimate(self, algorithm):
        # A new size every call, so nothing size-dependent is reused between calls.
        self.size += 1
        fs.estimate(self.fabric, "all_reduce", GiB + self.size, self.ranks, algorithm=algorithm)


def moe_dispatch_sizes(n_ranks, seed=0, sigma=0.6, bytes_per_rank=64 * 2**20):
    """An all-to-all-v as a mixture-of-experts dispatch: log-normal sizes (sigma 0.6), every
    rank sending 64 MiB in all."""
    rng = np.random.default_rng(seed)
    m = rng.lognormal(0.0, sigma, (n_ranks, n_ranks))
    np.fill_diagonal(m, 0.0)
    return m / m.sum(axis=1, keepdims=True) * bytes_per_rank


class MoeAllToAllV:
    """All-to-all-v of a MoE dispatch over HGX H100 nodes on Quantum-2 (log-normal sizes), as
    NCCL schedules it (``algorithm="auto"``: its point-to-point schedule, PXN's rail-aligned
    flows, channels in waves past 16 nodes), exact and in the fast mode. At 512 ranks the
    fast mode (1e-2) keeps every finish within 1% of the exact engine's on this construction
    (docs/performance.md; ``tests/python/test_alltoall.py`` holds it at 128 ranks)."""

    params = ([128, 512, 1024], [0.0, 1e-2])
    param_names = ["n_ranks", "tolerance"]
    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self, n_ranks, tolerance):
        if tolerance == 0.0 and n_ranks > 512:
            raise NotImplementedError("the exact engine: 512 ranks at most here")
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=n_ranks // 8, scale_out="quantum-2")
        self.sizes = moe_dispatch_sizes(n_ranks)
        self.ranks = np.arange(n_ranks)

    def _run(self, tolerance):
        sc = fs.Scenario(self.fabric)
        sc.add_collective("all_to_all", self.ranks, sizes=self.sizes)
        return sc.run(tolerance=tolerance)

    def time_run(self, n_ranks, tolerance):
        self._run(tolerance)

    def peakmem_run(self, n_ranks, tolerance):
        self._run(tolerance)


class AllToAllAtScale:
    """An even 1 GiB all-to-all over 1,024 and 4,096 H100s (128 and 512 HGX nodes on Quantum-2)
    as NCCL schedules it: 8 and 32 waves of 16 channels, and at 4,096 three kernels in a row
    (254 batches each); 144,384 and 2,150,400 flows. Fast mode (1e-2)."""

    params = ([1024, 4096],)
    param_names = ["n_ranks"]
    timeout = 900
    number = 1
    repeat = (1, 2, 600.0)
    warmup_time = 0

    def setup(self, n_ranks):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=n_ranks // 8, scale_out="quantum-2")
        self.ranks = np.arange(n_ranks)

    def _run(self):
        sc = fs.Scenario(self.fabric)
        sc.add_collective("all_to_all", self.ranks, GiB)
        return sc.run(tolerance=1e-2)

    def time_run(self, n_ranks):
        self._run()

    def peakmem_run(self, n_ranks):
        self._run()


def distinct_draws(rng, shape, n, k):
    """``k`` distinct integers of ``[0, n)`` drawn uniformly for every index of ``shape``
    (R. Floyd's algorithm, vectorised)."""
    out = np.empty(shape + (k,), dtype=np.int64)
    for i, j in enumerate(range(n - k, n)):
        t = rng.integers(0, j + 1, size=shape)
        taken = (out[..., :i] == t[..., None]).any(axis=-1)
        out[..., i] = np.where(taken, j, t)
    return out


class MoeDispatchDeepEP:
    """A DeepSeek-V3-like dispatch over 1,024 H100s (128 nodes): 4,096 tokens per rank, each to
    8 of 1,024 experts (one per GPU; node-limited to 4 nodes as DeepSeek-V3 routes), FP8 with
    its scales (7,392 bytes a token), as DeepEP's normal kernels run it: once per node over the
    network, then NVLink. The routing is made in ``setup``; the timed call builds the scenario
    (deduplicating per node) and runs it in the fast mode (1e-2)."""

    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self):
        n, nodes, tokens, top_k = 1024, 128, 4096, 8
        rng = np.random.default_rng(0)
        # Per token: 4 distinct nodes, then 2 distinct GPUs (experts) on each.
        node = distinct_draws(rng, (n, tokens), nodes, 4)
        gpu = distinct_draws(rng, (n, tokens, 4), 8, 2)
        self.ids = (node[..., None] * 8 + gpu).reshape(n, tokens, top_k)
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=nodes, scale_out="quantum-2")
        self.routing = fs.MoeRouting.from_topk(self.ids, n_experts=n)

    def _run(self):
        routing = fs.MoeRouting.from_topk(self.ids, n_experts=1024)  # its deduplication timed too
        sc = fs.Scenario(self.fabric)
        sc.add_moe_dispatch(routing, bytes_per_token=7392)
        return sc.run(tolerance=1e-2)

    def time_dispatch(self):
        self._run()

    def peakmem_dispatch(self):
        self._run()


class EthernetAllToAllEcmp:
    """Uniform 1 GiB all-to-all among 512 H100s in 64 HGX servers on SN5600 Ethernet with ECMP:
    collisions give the flows different rates, so the exact engine finishes them one by one."""

    params = [0.0, 1e-2]
    param_names = ["tolerance"]
    timeout = 600
    number = 1
    repeat = (1, 2, 200.0)
    warmup_time = 0

    def setup(self, tolerance):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=64, scale_out="sn5600", nic="cx7")
        self.ranks = np.arange(512)

    def time_all_to_all(self, tolerance):
        sc = fs.Scenario(self.fabric, routing="ecmp")
        sc.add_collective("all_to_all", self.ranks, GiB, algorithm="direct")
        sc.run(tolerance=tolerance)
