"""Workloads: what runs on a fabric, built onto a :class:`~fabricsim.Scenario` and run."""
