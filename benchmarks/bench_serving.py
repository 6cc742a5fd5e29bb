"""Inference serving traffic: one simulated hour of disaggregated serving at 1,000
requests per second on 1,152 H100 (144 HGX servers on Quantum-2, routed by ECMP), beside a
training neighbour. Llama 3 70B, TP 8: 64 prefill and 32 decode instances (768 GPUs); the
neighbour is a data-parallel job on the other 48 servers (384 GPUs), whose step is 1.5 s of
compute then an 8 GiB ring all-reduce over its GPUs in a scattered order, repeated for the
hour. Serving and training servers are interleaved, so they share leaves and spines.

The fabric is built in ``setup``; each timed call builds the scenario (requests, neighbour,
serving flows), runs it and reads the per-request report. ``kv_shards``: "all" simulates every
TP rank's KV shard (8 flows per request, 28.8 million flows), "one" the first rank's only.
"""

import numpy as np

import fabricsim as fs
from fabricsim import serving

N_SERVERS = 144
HOUR_S = 3600.0
RATE_PER_S = 1000.0
TRAIN_STEP_COMPUTE_S = 1.5
TRAIN_ALLREDUCE_BYTES = 8 * 2**30


def layout(fabric):
    """(prefill pool, decode pool, training GPUs in ring order): every third server trains."""
    servers = np.arange(N_SERVERS)
    train_servers = servers[servers % 3 == 2]
    serve_servers = servers[servers % 3 != 2]
    serve_gpus = (serve_servers[:, None] * 8 + np.arange(8)).ravel()
    prefill, decode = serving.carve_pools(fabric, prefill_instances=64, decode_instances=32, tp=8, gpus=serve_gpus)
    rng = np.random.default_rng(7)  # a scattered job: its ring crosses leaves
    order = rng.permutation(train_servers)
    train_gpus = (order[:, None] * 8 + np.arange(8)).ravel()
    return prefill, decode, train_gpus


def add_neighbour(sc, train_gpus, horizon_s):
    """The training job (a tenant: ``Result.jobs`` reports what serving costs it): steps back
    to back until ``horizon_s``, each compute then a ring all-reduce of its gradients."""
    job = sc.add_job("train", gpus=train_gpus)
    prev = ()
    t = 0.0
    while t < horizon_s:
        d = job.add_delay(TRAIN_STEP_COMPUTE_S, after=prev, tag="train.compute")
        prev = job.add_collective("all_reduce", None, TRAIN_ALLREDUCE_BYTES, algorithm="ring", after=d,
                                  tag="train.dp")
        t += TRAIN_STEP_COMPUTE_S + 0.3  # about the all-reduce's time: enough steps for the horizon
    return prev


def serving_run(fabric, horizon_s, *, neighbour=True, kv_shards="all", seed=0):
    """Builds and runs the case; returns the report."""
    prefill, decode, train_gpus = layout(fabric)
    sc = fs.Scenario(fabric, routing="ecmp", seed=seed)
    if neighbour:
        add_neighbour(sc, train_gpus, horizon_s)
    requests = serving.poisson_requests(RATE_PER_S, horizon_s, seed=seed)
    sv = serving.add_serving(sc, "llama3-70b", requests, prefill=prefill, decode=decode, kv_shards=kv_shards)
    return sv.report(sc.run())


class Serving1kRps1152Gpus:
    """The case the serving model was built for: one hour, KV transfers as the first TP rank's flow per request
    (``kv_shards="one"``: exact under rail symmetry; 3.6 million flows). With every shard
    (28.8 million flows) the hour needs about 16 GiB, which the core refuses on a 23 GB
    machine: ServingQuarterHourAllShards measures that mode on a quarter of the hour."""

    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=N_SERVERS, scale_out="quantum-2")

    def time_hour_beside_training(self):
        serving_run(self.fabric, HOUR_S, kv_shards="one")

    def peakmem_hour_beside_training(self):
        serving_run(self.fabric, HOUR_S, kv_shards="one")


class ServingQuarterHourAllShards:
    """15 simulated minutes of the same case with every TP rank's KV shard as a flow (7.2
    million KV flows)."""

    timeout = 900
    number = 1
    repeat = (1, 3, 300.0)
    warmup_time = 0

    def setup(self):
        self.fabric = fs.cluster(domain="hgx-h100", n_domains=N_SERVERS, scale_out="quantum-2")

    def time_quarter_hour_all_shards(self):
        serving_run(self.fabric, HOUR_S / 4, kv_shards="all")

    def peakmem_quarter_hour_all_shards(self):
        serving_run(self.fabric, HOUR_S / 4, kv_shards="all")
