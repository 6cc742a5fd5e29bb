"""Million-GPU fabrics: build, route and simulate on 14,564 GB300 NVL72 racks
(1,048,608 GPUs) joined by a three-tier Clos.

* Quantum-X800 (144 x 800G): a 3-tier Clos holds 746,496 endpoints per plane, so the CX-8
  NICs are split over 2 planes of 400G (radix 288), as the generator chooses by itself.
* Spectrum-X Photonics 512 x 800G: one plane.

Routing is timed through ``Scenario.add_flows`` (routing plus adding the flows), one flow
per GPU along a seeded random derangement, ECMP and adaptive. The simulation runs that
permutation (1 GiB per flow) to completion.
"""

import numpy as np

import fabricsim as fs

N_RACKS = 14_564


def million_gpu_cluster(switch):
    return fs.cluster(domain="gb300-nvl72", n_domains=N_RACKS, scale_out=switch, tiers=3)


def derangement(n, seed=0):
    """A random permutation with no fixed point (each GPU sends to another)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    fixed = np.flatnonzero(perm == np.arange(n))
    perm[fixed] = perm[(fixed + 1) % n]  # swap fixed points forward
    perm[(fixed + 1) % n] = fixed
    return perm


class BuildMillionGpuCluster:
    params = (["quantum-x800", "spectrum-x-photonics-512"],)
    param_names = ["switch"]
    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def time_build(self, switch):
        million_gpu_cluster(switch)

    def peakmem_build(self, switch):
        million_gpu_cluster(switch)


class RouteMillionFlows:
    params = (["ecmp", "adaptive"],)
    param_names = ["routing"]
    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup_cache(self):
        return None

    def setup(self, routing):
        self.fabric = million_gpu_cluster("quantum-x800")
        n = self.fabric.n_gpus
        self.src = np.arange(n, dtype=np.int64)
        self.dst = derangement(n)

    def time_add_flows(self, routing):
        s = fs.Scenario(self.fabric, seed=1, routing=routing)
        s.add_flows(self.src, self.dst, 2**30)


class SimulateMillionGpuPermutation:
    params = (["adaptive", "ecmp"],)
    param_names = ["routing"]
    timeout = 900
    number = 1
    repeat = (1, 2, 300.0)
    warmup_time = 0

    def setup(self, routing):
        fabric = million_gpu_cluster("quantum-x800")
        n = fabric.n_gpus
        self.scenario = fs.Scenario(fabric, seed=1, routing=routing)
        self.scenario.add_flows(np.arange(n, dtype=np.int64), derangement(n), 2**30)

    def time_run(self, routing):
        self.scenario.run()

    def peakmem_run(self, routing):
        self.scenario.run()


class LinksOfMillionGpuCluster:
    """Links by what they are on the million-GPU Quantum-X800 fabric (46 M links): every
    node's name (what result tables name their nodes with, made once per fabric), the whole
    links table, and a selection of one rail's leaf-to-spine links."""

    timeout = 300
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self):
        self.fabric = million_gpu_cluster("quantum-x800")

    def time_node_names(self):
        self.fabric.names_of(0)  # the first name asked of a fabric makes every node's (setup runs per call)

    def time_links_table(self):
        self.fabric.links

    def time_links_where(self):
        self.fabric.links_where(tier="leaf-spine", rail=3, direction="up")

    def peakmem_links_where(self):
        self.fabric.links_where(tier="leaf-spine", rail=3, direction="up")
