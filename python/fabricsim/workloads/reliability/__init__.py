"""Failures over a job's life: failure rates per part, failures drawn over a
horizon, what each one costs, goodput; pluggable against co-packaged optics.

**Rates** (``data/failure_rates.json``, :func:`failure_rates`): failures per unit per hour,
each derived as events / (units x hours) from the 419 unexpected interruptions of Llama 3 405B
pre-training (54 days on 16,384 H100 in 2,048 hosts; arXiv:2407.21783, Table 5). GPU, host,
unplanned host maintenance, software, unknown (NCCL watchdog timeouts) and NIC come straight
from the table; its one "Network Switch/Cable" row is split between switches, pluggable
transceivers and cables by a named assumption, over the counts of fabricsim's equivalent
16,384-GPU fabric. A co-packaged switch port's rate is the pluggable per-port rate times the
mechanism factors of ``optics_mechanisms`` (fewer lasers, no DSP, fewer connectors).

**Parts of a fabric** (:func:`part_counts`): GPUs, hosts (8 GPUs per HGX host, 4 per NVL72
compute tray), NICs, scale-out switches by tier, cables, pluggable transceivers (NIC side and
switch side, as :meth:`Fabric.describe` counts them) or co-packaged switch ports, each by
location: ``host`` (the NIC-to-leaf links; ``nic`` for the NIC's own transceiver on them),
``leaf-spine``, ``spine-core``. A job on part of
the fabric (a :class:`~fabricsim.training.TrainingStep` on fewer GPUs than the fabric has)
sees that fraction of every part.

**Sampling** (:func:`simulate`): for each (part, location), the number of failures over the
horizon is Poisson(rate x units x hours), their times uniform over the horizon and the unit
uniform among the units; one ``numpy.random.Generator`` seeded with ``seed`` draws them in a
fixed order, so a seed gives the same tables every time.

**Consequences** (:class:`Policy`), by part or ``part.location`` (the more specific wins):

* ``restart``: the job goes back to its last checkpoint. Lost work is the time since the
  later of the last checkpoint and the last resume (checkpoints every ``checkpoint_interval_s``
  of running time after each resume), plus ``restart_s`` of downtime. A failure during a
  restart starts the restart again (the downtime runs ``restart_s`` from the new failure).
* ``reroute`` (a switch above the leaves, or a leaf-spine or spine-core link or its optics):
  adaptive routing spreads the traffic over the surviving paths. The job goes on with less
  bandwidth until the part is repaired (``repair_hours`` of the rates).
* ``fallback`` (a NIC, a leaf, or a NIC-to-leaf link or its optics): NCCL runs on the
  remaining rails (PXN moves the lost rail's traffic over NVLink to the domain's other NICs)
  until the part is repaired.
* ``ignore``: no cost (e.g. a failure a spare absorbs).

**Slowed step** (bounded closed form): a failure that removes a fraction ``f`` of the
bottleneck's capacity (one of ``U`` uplinks of a leaf: ``f = links_down / leaf_up``; a spine
switch: ``leaf_spine_width / leaf_up``; a core switch: ``spine_core_width / spine_up``; one
rail of ``R`` rails x ``P`` planes: ``links_down / (R x P)``) makes every pipelined
collective crossing it run at the slowest member's rate, so the exposed scale-out
communication ``X`` (the step's ``dp + pp + cp + ep`` exposed times) grows by ``1 / (1 - f)``:
``step' = step + X (1 / (1 - f) - 1)``. It is an upper bound: the whole fault is charged to
one plane and to every collective, and ``X`` counts cp and ep even where they stay in the
NVLink domain. ``Policy.slowdown`` replaces ``1 / (1 - f)`` by a given factor (e.g. NCCL's
fallback from SHARP to a ring, measured). Work lost while degraded over ``d`` seconds is
``d (1 - step / step')``. A fault that takes a whole bottleneck (``f >= 1``) is a restart.

**Goodput** is useful step time / wall time: (horizon - lost) / horizon, lost being the
restarts' lost work and downtime, the slowed steps' lost work and checkpoint writes
(``checkpoint_write_s`` per ``checkpoint_interval_s`` of running time). Degradations are
counted independently (two overlapping ones each lose their own share) and not stopped by a
restart.
"""

from .exposure import expected_failures, part_counts
from .policy import CONSEQUENCES, Policy
from .rates import PARTS, FailureRates, cpo_port_factor, failure_rates
from .simulate import ReliabilityResult, compare_optics, simulate

__all__ = [
    "PARTS",
    "CONSEQUENCES",
    "FailureRates",
    "Policy",
    "ReliabilityResult",
    "failure_rates",
    "part_counts",
    "expected_failures",
    "simulate",
    "compare_optics",
    "cpo_port_factor",
]
