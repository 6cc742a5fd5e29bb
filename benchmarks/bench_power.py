"""Power and cost: NVIDIA's co-packaged optics claim evaluated on a 1,048,576-GPU
cluster (131,072 HGX B300 boards, three-tier Clos of Quantum-X800 and of Quantum-X Photonics),
counted from structure with ``fabricsim.power.plan_cluster``: building the same fabric takes
about 3 s and 1.8 GB (52 M links); the plan milliseconds and a few MB.
"""

import fabricsim as fs
from fabricsim import power


class CpoClaimMillionGpus:
    timeout = 120
    number = 1
    repeat = (1, 5, 30.0)

    def time_cpo_claim(self):
        power.cpo_claim(1_048_576)

    def peakmem_cpo_claim(self):
        power.cpo_claim(1_048_576)


class CompareFabrics:
    """Budgets of built fabrics side by side (the 4,096-GPU pair is built once in setup)."""

    timeout = 120

    def setup(self):
        self.fabrics = [fs.cluster(domain="hgx-b300", n_domains=512, scale_out=s, tiers=3)
                        for s in ("quantum-x800", "quantum-x-photonics")]

    def time_compare(self):
        power.compare(self.fabrics, names=["pluggable", "co-packaged"])

    def time_describe(self):
        self.fabrics[0].describe()
