"""Collectives as NCCL runs them, in two fidelities (docs/design.md section 2).

**flow**: a pipelined ring (or reduction tree) is one *coupled flow* whose usage is the union
of its edges' routes, so the slowest edge paces it; phases (hierarchical algorithms) are a DAG
joined by zero-length barriers; all-to-all and send/recv are independent flows.

**routing**: an edge of a coupled flow, and each independent transfer (all-to-all,
send/recv, halving-doubling's steps), stands for NCCL's channels to a peer, which NCCL
stripes over the NIC's ports (a multi-plane NIC splits over the planes itself). So where a
multi-plane tier is routed by ECMP, each splits over the planes as adaptive routing splits a
flow (by the endpoint's links per plane; after a fault, by what each plane still carries)
and is hashed onto one path within each plane, as the analytical time, which counts every
plane, assumes. A SHARP tree's edges are not hashed but climb to the tree's root switch
(``sharp`` below), and NVLS is sprayed over every NVSwitch chip whatever the routing.

**analytical**: the alpha-beta closed form of the same construction on an idle fabric: alpha
from NCCL's latency model (`nccl_model`) for the protocol, plus the wire latency of each
pipelined step (a step waits for its hop's route: NCCL's step counts times the NVLink or
network route latency), beta from the per-GPU NVLink and network bandwidths. On an
uncongested fabric the two agree; the difference is contention.

**cost model**: every constant here (NVLS efficiency and channel counts, per-channel
ceilings, latencies, protocol overheads, the SHARP accounting, optional payload
efficiencies) comes from one :class:`fabricsim.CostModel`, passed as ``cost_model=`` to
:class:`~fabricsim.Scenario`, :func:`estimate` and :func:`nccl_tests`; its ``latency_scale`` set
to 0 leaves only wire latency (ASTRA-sim's analytical ring, docs/sources.md 6.4, within 0.2%).

**protocols**: ring and tree run Simple, LL128 or LL. The low-latency protocols send flags
with the data, so every edge carries ``1/efficiency`` wire bytes per payload byte, the
efficiency being NCCL's own ratio of that protocol's bus bandwidth to Simple's (LL128 about
0.92 or its per-channel cap, LL far less), and the alpha is that protocol's.

Algorithms (``size_bytes`` is nccl-tests' "size", ``S``; ``n`` ranks, ``D`` NVLink domains of
``p`` ranks each, or, where domains hold different numbers, ``m`` the fewest (``m = p`` where
they hold as many); ``B_nvl``, ``B_net`` per-GPU NVLink and network payload rates):

* ``ring``: every op. All-reduce moves ``2(n-1)/n S`` over every ring edge, reduce-scatter and
  all-gather ``(n-1)/n S``, broadcast/reduce ``S`` along a chain from the root. Across domains
  the ring runs ``p`` channels: channel ``c`` enters domain ``d`` at local GPU ``c - d`` and
  leaves from the GPU before it, on the same rail as the next domain's entry, so each GPU is the
  exit of one channel and each NIC carries one channel's edge (no PXN hop is modelled).
* ``tree``: NCCL's double binary tree all-reduce: ``m`` channels (one per rail), each two
  pipelined trees of ``S/(2m)`` over the domains (NCCL's binary tree and its mirror or shift, so
  most leaves of one are inner vertices of the other), joined inside each domain by a chain
  through all its ranks that starts at the channel's rail GPU (rank ``c`` of the domain), as
  NCCL chains each node's own ranks and keeps the fewest channels any node has. Every tree and
  chain edge carries its tree's bytes once up (reduce) and once down (broadcast); a domain's
  NIC carries one edge per tree neighbour. Where domains hold more than ``m`` ranks, the
  longer chains load their GPUs' NVLink more (``analytical_s`` says how much).
* ``halving_doubling``: recursive halving (reduce-scatter) then recursive doubling
  (all-gather), as MPI's Rabenseifner all-reduce: step ``s`` of the halving exchanges
  ``S/2^(s+1)`` with the rank at distance ``2^k/2^(s+1)``; a non-power of two first folds the
  extra ranks into the first ones and finally sends them the result. Not pipelined: each step
  is a phase of independent flows and pays its own point-to-point alpha. Reduce-scatter and
  all-gather alone need a power of two. Its flows, like ``direct``'s, stand for NCCL's
  channels to a peer and are striped over the NIC's ports as a ring's edge is (under ECMP
  split over the planes of a multi-plane fabric, hashed within each).
* ``p2p``: all-to-all and send/recv as NCCL's point-to-point schedule runs them, ``auto``'s
  choice on a generated fabric (:mod:`~fabricsim.collectives.cost.p2p`, its construction
  :mod:`~fabricsim.collectives.alltoall`; docs/collectives.md): rounds a node at a time in
  NCCL's order, on bit-reversed channels, as many per operation as its size asks; with PXN
  (cost model ``pxn``) one network flow per node pair and rail from the receiver's rail GPU,
  each sender's share reaching it by an NVLink hop flow; batches one after another on a
  channel past its budget, joined per node; each operation held to its channels' share of a
  CTA's rate.
* ``direct``: all-to-all (``S/n`` to every peer, or a size matrix) and send/recv (rank i to
  rank i+1, as nccl-tests' sendrecv), every transfer at once from its sender's own NIC (the
  construction before ``p2p``, kept for comparison). A transfer starts after its route's wire latency, which
  is its pair's latency class's: one domain (NVLink), or where the two NICs meet in the
  scale-out Clos (one leaf, a spine, a core). The analytical time has each rank's NVLink and
  NIC, each way, move their bytes at full rate from their classes' starts on (a port's last
  busy period begins as one of its classes starts), then the p2p alpha. That is exact where
  every rank's ports carry alike per class (whole domains on a Clos, send/recv's ring), as
  max-min sharing then keeps every port busy. Elsewhere it can hold a port below its rate
  while its transfers wait on busier ports: the analytical time is then a lower bound (within
  0.12% on random subsets of 16 HGX H100s, 1 KiB to 16 MiB). Halving-doubling's steps (one
  transfer per port) last as their slowest class's transfer, exactly. On a plain topology (no
  structure to class the pairs, and routing every pair costs n^2 routes) the first and last
  rank's route stands for every pair's, so a flow over a longer route comes out above the
  analytical time by the difference.
* ``nvls``: all-reduce inside one NVSwitch domain: every GPU sends and receives ``S(1 + 1/n)``
  (docs/sources.md 3.3). Efficiency is per GPU: each GPU's NVLS engine (a constraint of its own,
  shared by every NVLS collective on that GPU) moves its traffic at NCCL's NVLS efficiency
  (0.85 Hopper, 0.74 Blackwell) of its NVLink rate, so busbw follows 2(n-1)/(n+1) x eff x B
  with the communicator, a partial one too. Per communicator, NCCL's channels bound it: NVLS
  runs 16 channels on Hopper, 24 on Blackwell in one domain (nvls.cc), each at the ladder
  speed at which they fit the GPU's NVLinks, and that ceiling (510 GB/s busbw on H100, 817
  on B200/GB200) holds however large the domain (an NVL72's 72 GPUs as its 8).
* ``nvls_tree``: NCCL's NVLSTree, its default across NVLS nodes: NVLS in each domain, and
  each rail's double binary tree across the domains' heads (two trees of half the rail's
  bytes; a head's NIC carries one stream per tree neighbour, so beyond two domains the
  network leg's busbw is the domain's NIC aggregate, as measured), one pipelined flow held to
  the NVLS ceiling and to NCCL's NVLSTree per-channel cap (NCCL src/graph/tuning.cc:177-211). Needs no SHARP.
* ``sharp``: all-reduce across the scale-out fabric with one rank per domain, on a fabric
  built with SHARP (``fs.cluster(..., sharp=True)``: a deployment's choice, docs/sources.md 3.2):
  one flow up and down the aggregation tree. The network leg is counted as bus bandwidth, as
  NCCL counts it and measurements bear out (multi-node all-reduce reaches about the same busbw
  with SHARP as without, docs/sources.md 6.2): a byte of the stream takes ``2(n-1)/n`` bytes of
  every tree link (cost model ``sharp_network_as_bus``; False gives SHARP's ideal, one). The
  tree is routed as SHARP's Aggregation Manager builds one: under ECMP every switch sends it
  through one link toward a single root switch, the same port index at every hop (not hashed
  edge by edge as connections are), and a job's trees take consecutive roots; adaptive
  routing spreads it evenly instead. The switches' reduction engine is a constraint sized to
  all their ports. Its latency is NCCL's CollNet Direct's where the GPUs sit on NVSwitches,
  CollNet Chain's elsewhere (a host-level Clos).
* ``hierarchical``: ring reduce-scatter in each domain, ring all-reduce of ``S/m`` per rail
  across domains, ring all-gather in each domain. The rails are the first ``m`` ranks of each
  domain, as NCCL's CollNet and NVLS trees use the fewest heads any node has (connect.cc); a
  domain holding more ranks reduce-scatters onto those ``m`` (its other ranks send their whole
  buffer) and all-gathers from them.
* ``nvls_sharp``: NCCL's NVLS across nodes over CollNet: as ``nvls_tree`` with each rail's
  SHARP tree (counted as ``sharp`` counts it) in place of its double binary tree. The first
  ``m`` ranks of each domain are the heads (connect.cc: minHeadNum): every rank sends ``S``
  into its NVSwitches and receives ``S``; each head also takes back its reduced ``S/m`` and
  multicasts the result. The flow is counted in bytes of one rail's ``S/m``: against other
  traffic in the network it takes its share by bytes, as every flow does, while its NVLink
  legs carry ``m`` bytes per byte (a head ``m + 1``). Its alpha is NCCL's for NVLS across
  nodes; ``hierarchical``, which NCCL has no counterpart of, runs as three phases and pays
  their alphas.

``algorithm="auto"`` and ``protocol="auto"`` take, among the (algorithm, protocol) pairs NCCL
enables on the communicator (`nccl_model`: SHARP only where the deployment has it) that
fabricsim builds, the one fabricsim's own analytical time finds fastest, so that the time
reported is the time of the construction chosen; ``hierarchical`` and ``halving_doubling``
have no NCCL counterpart and are only used when asked for (on Simple), as is ``direct``.
:func:`estimate` gives the analytical time alone, without a scenario.

Modules, each importing only the ones before it:

* :mod:`~fabricsim.collectives.conventions`: nccl-tests' conventions (sizes, bus bandwidth,
  the layout of its tables);
* :mod:`~fabricsim.collectives.communicator`: the fabric as collectives see it, the ranks
  grouped by domain, sizes as nccl-tests counts them;
* :mod:`~fabricsim.collectives.cost`: the cost of one collective, read in one direction:
  :mod:`~fabricsim.collectives.cost.model` (the constants, :class:`~fabricsim.CostModel`),
  :mod:`~fabricsim.collectives.cost.nccl` (NCCL's tuning model),
  :mod:`~fabricsim.collectives.cost.p2p` (NCCL's point-to-point schedule and its time),
  :mod:`~fabricsim.collectives.cost.analytical` (each algorithm's time on an idle fabric),
  :mod:`~fabricsim.collectives.cost.choice` (what ``auto`` runs, :func:`estimate`);
* :mod:`~fabricsim.collectives.alltoall`: the ``p2p`` flows on a scenario;
* :mod:`~fabricsim.collectives.construction`: each algorithm's flows on a scenario, the
  results table;
* :mod:`~fabricsim.collectives.moe`: mixture-of-experts dispatch and combine (DeepEP's normal
  and low-latency kernels, NCCL's all-to-all-v), as flows and as an idle-fabric time;
* :mod:`~fabricsim.collectives.nccl_logs` and :mod:`~fabricsim.collectives.calibration`:
  real nccl-tests logs read, and a cost model fitted to them.

The simulated nccl-tests sweep and the validation table run whole scenarios, so they sit
above the scenario, in :mod:`fabricsim.studies`.
"""

from .communicator import FabricView, applied_fabric, collective_size, communicator, fabric_view
from .cost.analytical import analytical_s
from .cost.choice import ALGORITHMS, OPS, PROTOCOLS, Estimate, estimate
from .cost.model import checked_cost_model

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "Estimate", "FabricView", "analytical_s", "applied_fabric",
           "checked_cost_model", "collective_size", "communicator", "estimate", "fabric_view"]
