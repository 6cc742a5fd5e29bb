"""The cost of one collective, read in one direction, each module importing only the ones
before it:

1. :mod:`~fabricsim.collectives.cost.model`: every constant, named, with its default and
   source (:class:`~fabricsim.CostModel`);
2. :mod:`~fabricsim.collectives.cost.nccl`: NCCL's tuning model on those constants: which
   (algorithm, protocol) pairs NCCL enables on a communicator, and their latencies;
3. :mod:`~fabricsim.collectives.cost.analytical`: fabricsim's alpha-beta time of each
   algorithm's construction on an idle fabric, its alpha from NCCL's latencies;
4. :mod:`~fabricsim.collectives.cost.choice`: the pair ``auto`` runs (the fastest of those NCCL
   enables, by the analytical time) and :func:`~fabricsim.estimate`.
"""
