"""Workloads: what runs on a fabric, built onto a :class:`~fabricsim.Scenario` and run.

* :mod:`~fabricsim.workloads.training`: a training step of a model under a parallelism, as one
  scenario DAG or in closed form (``fs.training``);
* :mod:`~fabricsim.workloads.serving`: disaggregated inference serving, requests arriving on
  prefill and decode pools (``fs.serving``);
* :mod:`~fabricsim.workloads.reliability`: failures over a job's life and what they cost
  (``fs.reliability``);
* :mod:`~fabricsim.workloads.jobs`: jobs sharing a fabric under isolation policies
  (``fs.jobs``).

A workload imports the scenario and what is below it, never the studies or the CLI above
it. A recorded workload (an execution trace, such as Chakra's) is imported here too, as a
module beside these that turns the trace into activities on a scenario.
"""
