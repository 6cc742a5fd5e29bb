"""Type stubs of the Rust extension module. Use the wrappers in fabricsim instead."""

from typing import Any, Callable, Optional, Sequence

import numpy as np
import numpy.typing as npt

__version__: str

Column = npt.NDArray[Any] | tuple[npt.NDArray[np.int32], list[str]]

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
    def link_columns(self) -> list[tuple[str, Column]]: ...
    def route(self, src: int, dst: int, key: int = 0, seed: int = 0) -> list[int]: ...
    def path_latency_s(self, src: int, dst: int, key: int = 0, seed: int = 0) -> float: ...

class Scenario:
    def __init__(self, topology: Topology, seed: int = 0) -> None: ...
    @property
    def n_activities(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def add_flow(
        self,
        src: int,
        dst: int,
        size_bytes: float,
        start_s: float = 0.0,
        after: Sequence[int] | np.ndarray = ...,
        route: Optional[list[int]] = None,
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
    ) -> npt.NDArray[np.int64]: ...
    def add_delay(
        self, duration_s: float, start_s: float = 0.0, after: Sequence[int] | np.ndarray = ..., tag: Optional[str] = None
    ) -> int: ...
    def add_dependency(self, activity_id: int, after_id: int) -> None: ...
    def check_room_for_flows(self, n_flows: int) -> None: ...
    def add_fault(self, time_s: float, links: list[int], factor: float) -> None: ...
    @property
    def n_faults(self) -> int: ...
    def route_of(self, activity_id: int) -> list[int]: ...
    def run(
        self,
        record_rates: bool = False,
        progress: Optional[Callable[[int, int, float], Any]] = None,
        verify_rates: bool = False,
    ) -> dict[str, Any]: ...

def max_min_rates(
    capacity_Bps: npt.NDArray[np.float64],
    flow_index: npt.NDArray[np.int64],
    constraint_index: npt.NDArray[np.int64],
    coefficient: npt.NDArray[np.float64],
    n_flows: int,
    rate_cap_Bps: Optional[npt.NDArray[np.float64]] = None,
) -> npt.NDArray[np.float64]: ...
