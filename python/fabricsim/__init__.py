"""fabricsim: flow-level, max-min fair simulation of AI-factory fabrics.

Build a :class:`Topology`, add flows and delays to a :class:`Scenario`, ``run()`` it, and
read the results as Arrow tables. All quantities are SI: bytes, seconds, bytes per second.

The package is in layers, each importing only itself and the layers below it (docs/design.md
section 4; tests/python/test_layout.py holds the rule): the base (``units``, ``exceptions``,
``progress``, the compiled core); :mod:`~fabricsim.fabrics` (the catalog, topologies and the
generators); :mod:`~fabricsim.collectives` (communicators, the cost of a collective in
:mod:`~fabricsim.collectives.cost`, its flows); the scenario (``results``, ``tenancy``,
``scenario``); :mod:`~fabricsim.workloads` (training, serving, reliability, jobs, Chakra traces);
:mod:`~fabricsim.studies` (sweeps, scenario files, nccl-tests, validation, plots, timelines);
then the CLI and this front, which names everything public.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _moved, exceptions, units
from ._checks import U32, integer, integers, number, quantities
from ._core import __version__
from ._core import max_min_rates as _max_min_rates
from .exceptions import (  # the exception tree is part of the API
    FabricsimError,
    InvalidArgumentError,
    UnknownNodeError,
    UnknownLinkError,
    UnknownPartError,
    UnknownActivityError,
    SameEndpointsError,
    RoutingError,
    UnreachableError,
    ZeroCapacityPathError,
    DependencyCycleError,
    ScenarioTooLargeError,
    RunInterruptedError,
    ScenarioRunningError,
    InternalError,
    NcclLogError,
    SweepError,
    ScenarioFileError,
    WriteError,
    ChakraTraceError,
    CablingError,
)
from .fabrics import Fabric, Topology, clos, cluster, hgx_b200, hgx_h100, nvl72, nvlink_domain, pcie_server
from .collectives import Estimate, estimate
from .collectives.moe import MoeRouting, estimate_moe
from .collectives.calibration import Calibration, calibrate
from .collectives.cost.model import CostModel
from .collectives.nccl_logs import NcclTestsLog, read_nccl_tests
from .results import Result, Summary
from .scenario import Scenario
from .workloads.jobs import Job, JobSpec, compare_isolation
from .workloads.training import Model, Parallelism, TrainingStep
from .studies.nccl_tests import nccl_tests
from .studies.scenario_file import ScenarioFile, load_scenario
from .studies.sweep import sweep
from .studies.validation import validate

# The documented modules, reached as attributes of the package (fs.training, fs.catalog, ...)
# wherever their files are; plot imports matplotlib only when it draws.
from . import progress
from .collectives.cost import model as cost_model, nccl as nccl_model  # noqa: F401
from .fabrics import catalog, power
from .studies import plot, trace
from .workloads import chakra, jobs, reliability, serving, training

__all__ = [
    "estimate",
    "Estimate",
    "MoeRouting",
    "estimate_moe",
    "nccl_tests",
    "read_nccl_tests",
    "NcclTestsLog",
    "CostModel",
    "cost_model",
    "calibrate",
    "Calibration",
    "validate",
    "training",
    "Model",
    "Parallelism",
    "TrainingStep",
    "jobs",
    "chakra",
    "Job",
    "JobSpec",
    "compare_isolation",
    "power",
    "reliability",
    "serving",
    "Topology",
    "Fabric",
    "hgx_h100",
    "hgx_b200",
    "nvl72",
    "nvlink_domain",
    "clos",
    "cluster",
    "pcie_server",
    "catalog",
    "Scenario",
    "sweep",
    "load_scenario",
    "ScenarioFile",
    "plot",
    "progress",
    "trace",
    "Result",
    "Summary",
    "max_min_rates",
    "units",
    "exceptions",
    "__version__",
    # the exception tree (fabricsim.exceptions): listed here so that type checkers see the
    # re-exports, which a computed __all__ hides from them
    "FabricsimError",
    "InvalidArgumentError",
    "UnknownNodeError",
    "UnknownLinkError",
    "UnknownPartError",
    "UnknownActivityError",
    "SameEndpointsError",
    "RoutingError",
    "UnreachableError",
    "ZeroCapacityPathError",
    "DependencyCycleError",
    "ScenarioTooLargeError",
    "RunInterruptedError",
    "ScenarioRunningError",
    "InternalError",
    "NcclLogError",
    "SweepError",
    "ScenarioFileError",
    "WriteError",
    "ChakraTraceError",
    "CablingError",
]


_moved.install()

if not TYPE_CHECKING:  # type checkers see only the attributes above

    def __getattr__(name: str) -> Any:
        """The old names of moved modules (``fs.validation``), with a DeprecationWarning."""
        return _moved.old_attribute(name)


def max_min_rates(
    capacity_Bps: Any,
    flow_index: Any,
    constraint_index: Any,
    coefficient: Any = None,
    *,
    n_flows: int | None = None,
    rate_cap_Bps: Any = None,
) -> np.ndarray:
    """Max-min fair rates (bytes/s), one per flow, by progressive filling.

    Usage entry ``e`` says flow ``flow_index[e]`` puts ``coefficient[e]`` (default 1) times
    its rate on constraint ``constraint_index[e]``, whose capacity is ``capacity_Bps[...]``;
    ``coefficient`` is one number for every entry or one per entry.
    ``rate_cap_Bps`` optionally caps each flow (``inf`` for none), one cap for all or one per
    flow. Rates are numbers (bytes/s) or unit strings ("400Gb/s").

    Example::

        # link 0 (8 Gb/s) carries flows 0 and 1; link 1 (16 Gb/s) carries flow 1 only
        fs.max_min_rates(["8Gb/s", "16Gb/s"], flow_index=[0, 1, 1], constraint_index=[0, 0, 1])
        # array([5.e+08, 5.e+08]): bytes/s, link 0 split evenly
    """
    fi = integers("flow_index", flow_index)
    ci = integers("constraint_index", constraint_index)
    k = np.ones(fi.shape[0]) if coefficient is None else quantities("coefficient", coefficient, fi.shape[0], number)
    n_flows = int(fi.max(initial=-1)) + 1 if n_flows is None else integer("n_flows", n_flows, U32)
    caps = None if rate_cap_Bps is None else quantities("rate_cap_Bps", rate_cap_Bps, n_flows, units.bandwidth_Bps)
    return _max_min_rates(quantities("capacity_Bps", capacity_Bps, None, units.bandwidth_Bps), fi, ci, k, n_flows, caps)
