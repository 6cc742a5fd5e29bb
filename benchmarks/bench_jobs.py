"""Jobs sharing a fabric: two 4,096-GPU training jobs (Llama 3 70B, TP 8, PP 4, DP 128,
8 micro-batches per replica, TP collectives on the fabric) on whole HGX H100 nodes drawn at
random from a 3-tier Quantum-2 fat-tree of 8,192 GPUs, one step each, with the jobs table (the
shared run and each job's run alone). Each timed call builds the scenario and runs it."""

import fabricsim as fs
from fabricsim import training


class TwoTrainingJobs4096:
    timeout = 600
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=1024, scale_out="quantum-2", tiers=3)
        self.par = training.Parallelism(tp=8, pp=4, dp=128, global_batch_size=1024)

    def _run(self):
        sc = fs.Scenario(self.fabric)
        for name in ("a", "b"):
            sc.add_job(name, n_gpus=4096, placement="random").add_training_step("llama3-70b", self.par)
        return sc.run().jobs

    def time_two_jobs_one_step_each(self):
        self._run()

    def peakmem_two_jobs_one_step_each(self):
        self._run()
