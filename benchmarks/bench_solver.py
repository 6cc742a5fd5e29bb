"""fs.max_min_rates alone: the water-filling solver (docs/design.md section 1) on random problems.

Each flow uses 6 distinct constraints with coefficient 1; about 30 flows share a constraint.
Problems are built in ``setup``, outside the timed part.
"""

import fabricsim as fs

from . import workloads


def _solve(problem):
    return fs.max_min_rates(
        problem.capacity_Bps,
        problem.flow_index,
        problem.constraint_index,
        problem.coefficient,
        n_flows=problem.n_flows,
    )


class MaxMinRates:
    """n_entries // 6 flows, each on 6 of n_flows // 5 constraints."""

    params = [10_000, 100_000, 1_000_000]
    param_names = ["n_entries"]
    timeout = 600

    def setup(self, n_entries):
        self.problem = workloads.max_min_problem_with_entries(n_entries)

    def time_max_min_rates(self, n_entries):
        _solve(self.problem)

    def peakmem_max_min_rates(self, n_entries):
        _solve(self.problem)


class MaxMinRatesTarget:
    """The target case: 1,000,000 flows, each on 6 of 200,000 constraints (6e6 entries)."""

    timeout = 600
    number = 1
    repeat = (1, 5, 120.0)
    warmup_time = 0

    def setup(self):
        self.problem = workloads.target_max_min_problem()

    def time_max_min_rates_1M_flows_x6_of_200k(self):
        _solve(self.problem)

    def peakmem_max_min_rates_1M_flows_x6_of_200k(self):
        _solve(self.problem)
