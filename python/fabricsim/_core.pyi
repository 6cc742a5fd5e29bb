"""Type stubs of the Rust extension module (src/bindings). Use the wrappers in fabricsim instead.

Constraint ids, as ``Scenario.usage_of`` returns them: links ``0 .. n_links``, then the fabric's
pooled bundles (``structure()["n_bundles"]`` of them), then the scenario's reduction engines in
the order ``Scenario.add_engine`` made them.
"""

from typing import Any, Callable, Literal, Optional, Sequence, TypeAlias, TypedDict, final, type_check_only

import numpy as np
import numpy.typing as npt

__version__: str
# What the module exports, as PyO3 lists it at run time (stubtest checks the two agree).
__all__ = [
    "Topology",
    "Scenario",
    "max_min_rates",
    "build_nvlink_domains",
    "build_clos",
    "build_cluster",
    "build_pcie_server",
    "clos_shape",
    "check_fits",
    "__version__",
]

# The aliases and TypedDicts below exist only for type checking (the core has no such objects), hence
# private aliases and @type_check_only classes.
# A string column is (int32 indices, -1 for null; its distinct values).
_Column: TypeAlias = npt.NDArray[Any] | tuple[npt.NDArray[np.int32], list[str]]
# Activity ids to wait for; an int64 array is read without a Python object per id.
_Ids: TypeAlias = Sequence[int] | npt.NDArray[np.int64]
_Routing: TypeAlias = Literal["ecmp", "adaptive", "spray"]

@type_check_only
class NvlinkParams(TypedDict):
    """One NVLink domain, as fabrics.specs._nvlink_spec lays it out."""

    gpus_per_domain: int
    chip_links: list[int]
    tiers: int
    chip_ports: int
    link_Bps: float
    chip_latency_s: float

@type_check_only
class ScaleOutParams(TypedDict):
    """A scale-out Clos, as fabrics.specs._scale_out_spec lays it out."""

    tiers: int
    planes: int
    radix: int
    oversubscription: tuple[float, float]
    link_Bps: float
    switch_latency_s: float
    nic_latency_s: float
    routing: _Routing

# PyO3 classes, which Python cannot subclass.
@final
class Topology:
    @staticmethod
    def from_arrays(
        n_nodes: int,
        src: npt.NDArray[np.int64],
        dst: npt.NDArray[np.int64],
        capacity_Bps: npt.NDArray[np.float64],
        latency_s: npt.NDArray[np.float64],
    ) -> Topology: ...
    @property
    def n_nodes(self) -> int: ...
    @property
    def n_links(self) -> int: ...
    @property
    def n_gpus(self) -> int: ...
    @property
    def n_nics(self) -> int: ...
    def link_columns(self) -> list[tuple[str, _Column]]: ...
    def route(self, src: int, dst: int, key: int = 0, seed: int = 0) -> list[int]: ...
    def path_latency_s(self, src: int, dst: int, key: int = 0, seed: int = 0) -> float: ...
    def route_many(
        self,
        src: npt.NDArray[np.int64],
        dst: npt.NDArray[np.int64],
        seed: int = 0,
        mode: _Routing = "ecmp",
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
    def with_link_factors(self, links: Sequence[int], factor: float) -> Topology: ...
    def links_of_nodes(self, nodes: Sequence[int]) -> list[int]: ...
    def links_of_plane(self, plane: int) -> list[int]: ...
    def node_names(self, nodes: Sequence[int]) -> list[str]: ...
    def node_name_buffers(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]: ...
    def link_roles(self) -> list[tuple[str, _Column]]: ...
    def scale_out_positions(
        self, endpoints: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def node_kinds(self) -> npt.NDArray[np.uint8]: ...
    def structure(self) -> dict[str, Any]: ...

@final
class Scenario:
    def __new__(
        cls,
        topology: Topology,
        seed: int = 0,
        scale_up: Optional[_Routing] = None,
        scale_out: Optional[_Routing] = None,
    ) -> Scenario: ...
    @property
    def routing(self) -> tuple[Literal["ecmp", "adaptive"], Literal["ecmp", "adaptive"]]: ...
    @property
    def n_activities(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def n_faults(self) -> int: ...
    def usage_of(self, activity_id: int) -> tuple[list[int], list[float]]: ...
    def add_flow(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        start_s: float = 0.0,
        after: _Ids = ...,
        route: Optional[Sequence[int]] = None,
        tag: Optional[str] = None,
        max_rate_Bps: Optional[float] = None,
    ) -> int: ...
    def add_flows(
        self,
        src: npt.NDArray[np.int64],
        dst: npt.NDArray[np.int64],
        size_bytes: npt.NDArray[np.float64],
        start_s: npt.NDArray[np.float64],
        tag: Optional[str] = None,
        route_offsets: Optional[npt.NDArray[np.int64]] = None,
        route_links: Optional[npt.NDArray[np.int64]] = None,
        after: _Ids = ...,
        striped: bool = False,
        max_rate_Bps: Optional[npt.NDArray[np.float64]] = None,
    ) -> npt.NDArray[np.int64]: ...
    def add_delay(
        self, duration_s: float, start_s: float = 0.0, after: _Ids = ..., tag: Optional[str] = None
    ) -> int: ...
    def check_room_for_flows(self, n_flows: int) -> None: ...
    def set_weights(self, first: int, end: int, weight: float) -> None: ...
    def truncate(self, first: int) -> None: ...
    def truncate_faults(self, n: int) -> None: ...
    def add_engine(self, capacity_Bps: float) -> int: ...
    def add_coupled_flow(
        self,
        edge_src: npt.NDArray[np.int64],
        edge_dst: npt.NDArray[np.int64],
        edge_coef: npt.NDArray[np.float64],
        combine: Literal["sum", "max"],
        engines: Sequence[tuple[int, float]],
        size_bytes: float,
        latency_s: float,
        start_s: float = 0.0,
        after: _Ids = ...,
        tag: Optional[str] = None,
        max_rate_Bps: Optional[float] = None,
        edge_leg: Optional[Sequence[Literal["whole", "up", "down"]]] = None,
        edge_tree: Optional[npt.NDArray[np.int64]] = None,
    ) -> int: ...
    def template(self, first: int) -> Optional[tuple[int, int, bool]]: ...
    def template_shifted(self, template: int, shift: int, limit: int) -> Optional[int]: ...
    def add_batch(
        self,
        template: npt.NDArray[np.int64],
        duration_s: npt.NDArray[np.float64],
        tag: npt.NDArray[np.int64],
        tags: Sequence[str],
        after_offsets: npt.NDArray[np.int64],
        after_ids: npt.NDArray[np.int64],
    ) -> None: ...
    def add_fault(self, time_s: float, links: Sequence[int], factor: float) -> None: ...
    def add_dependency(self, activity_id: int, after_id: int) -> None: ...
    def route_of(self, activity_id: int) -> list[int]: ...
    def run(
        self,
        record_rates: bool = False,
        progress: Optional[Callable[[int, int, float], Any]] = None,
        verify_rates: bool = False,
        finish_rel_tol: float = 0.0,
    ) -> dict[str, Any]: ...

def max_min_rates(
    capacity_Bps: npt.NDArray[np.float64],
    flow_index: npt.NDArray[np.int64],
    constraint_index: npt.NDArray[np.int64],
    coefficient: npt.NDArray[np.float64],
    n_flows: int,
    rate_cap_Bps: Optional[npt.NDArray[np.float64]] = None,
) -> npt.NDArray[np.float64]: ...
def build_nvlink_domains(n_domains: int, nvlink: NvlinkParams) -> Topology: ...
def build_clos(n_hosts: int, scale_out: ScaleOutParams) -> Topology: ...
def build_cluster(
    n_domains: int, nvlink: NvlinkParams, nic_link_Bps: float, scale_out: ScaleOutParams
) -> Topology: ...
def build_pcie_server(
    n_gpus: int,
    gpus_per_switch: int,
    nics_per_switch: int,
    n_cpus: int,
    pcie_Bps: float,
    nic_Bps: float,
    cpu_link_Bps: float,
    latency_s: float,
) -> Topology: ...
def clos_shape(
    n_endpoints: int,
    rails: int,
    endpoint_links: Sequence[int],
    tiers: int,
    radix: int,
    oversubscription: tuple[float, float],
) -> dict[str, Any]: ...
def check_fits(what: str, estimate_bytes: float) -> None: ...
