"""Failures over a job's life: a 30-day failure horizon for a 100,000-GPU job
(12,500 HGX H100 hosts on a Quantum-X800 Clos; Llama 3 70B, TP 8, PP 5, DP 2,500). The
fabric and the checked plan are built in ``setup``; each timed call estimates the step
analytically, draws the failures (seeded) and costs them into the failures and summary
tables. Budget: < 10 s."""

import fabricsim as fs
from fabricsim import reliability, training


class Reliability100kGpus30Days:
    number = 1
    repeat = (3, 10, 30.0)
    timeout = 120

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=12_500, scale_out="quantum-x800")
        par = training.Parallelism(tp=8, pp=5, dp=2500, micro_batch_size=1, global_batch_size=20_000,
                                   schedule="1f1b")
        self.job = training.TrainingStep("llama3-70b", par, self.fabric, check_memory=False)

    def time_failures_30_days(self):
        reliability.simulate(self.fabric, self.job, horizon_s=30 * 86400, seed=0)

    def peakmem_failures_30_days(self):
        reliability.simulate(self.fabric, self.job, horizon_s=30 * 86400, seed=0)
