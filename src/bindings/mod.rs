//! The Python extension module `fabricsim._core`. All PyO3 code lives here.
//!
//! Every entry point runs inside `guard`, so a Rust panic becomes `InternalError` instead of
//! aborting Python, and every `Error` is mapped once to its `fabricsim.exceptions` class.
//! Result columns leave as NumPy arrays that own the Rust buffers (no copy); the Python layer
//! wraps them as Arrow arrays, again without copying.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::engine::{Progress, RunOptions};
use crate::error::Error;
use crate::export::{self, Column, Table};
use crate::ids::{ActivityId, LinkId};
use crate::routing::Router;
use crate::scenario::{self as sc, Route};
use crate::solver;
use crate::topology;

/// Raises `err` as the matching class of `fabricsim.exceptions`.
fn to_py(err: Error) -> PyErr {
    Python::with_gil(|py| {
        let class = py
            .import("fabricsim.exceptions")
            .and_then(|m| m.getattr(err.kind()));
        match class {
            Ok(class) => match class.call1((err.message().to_string(),)) {
                Ok(instance) => PyErr::from_value(instance),
                Err(e) => e,
            },
            Err(_) => PyRuntimeError::new_err(err.to_string()),
        }
    })
}

/// Runs `f`, turning errors and panics into Python exceptions.
fn guard<T>(f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(to_py(Error::Internal(format!(
                "fabricsim hit a bug and stopped safely: {what}"
            ))))
        }
    }
}

fn slice<'a, T: numpy::Element>(what: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        to_py(Error::InvalidArgument(format!(
            "{what} must be a contiguous 1-D array"
        )))
    })
}

fn to_u32(what: &str, values: &[i64], bound: usize) -> Result<Vec<u32>, Error> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v < 0 || v as u64 >= bound as u64 {
                Err(Error::InvalidArgument(format!(
                    "{what}[{i}] = {v} is out of range: expected 0 <= value < {bound}"
                )))
            } else {
                Ok(v as u32)
            }
        })
        .collect()
}

/// A directed graph of links with capacities (bytes/s) and latencies (s).
#[pyclass(module = "fabricsim._core", frozen)]
pub struct Topology {
    inner: Arc<topology::Topology>,
}

#[pymethods]
impl Topology {
    /// Builds a topology from link arrays: link i goes from `src[i]` to `dst[i]` with
    /// `capacity_Bps[i]` bytes per second and `latency_s[i]` seconds.
    #[staticmethod]
    fn from_arrays(
        n_nodes: i64,
        src: PyReadonlyArray1<'_, i64>,
        dst: PyReadonlyArray1<'_, i64>,
        capacity_Bps: PyReadonlyArray1<'_, f64>,
        latency_s: PyReadonlyArray1<'_, f64>,
    ) -> PyResult<Topology> {
        let (src, dst) = (slice("src", &src)?, slice("dst", &dst)?);
        let (cap, lat) = (
            slice("capacity_Bps", &capacity_Bps)?,
            slice("latency_s", &latency_s)?,
        );
        guard(|| {
            if n_nodes < 0 {
                return Err(Error::InvalidArgument(format!(
                    "n_nodes must be >= 0, got {n_nodes}"
                )));
            }
            let n = n_nodes as usize;
            let src = to_u32("src", src, n).map_err(as_unknown_node)?;
            let dst = to_u32("dst", dst, n).map_err(as_unknown_node)?;
            let t = topology::Topology::from_links(n, src, dst, cap.to_vec(), lat.to_vec())?;
            Ok(Topology { inner: Arc::new(t) })
        })
    }

    #[getter]
    fn n_nodes(&self) -> usize {
        self.inner.n_nodes()
    }

    #[getter]
    fn n_links(&self) -> usize {
        self.inner.n_links()
    }

    /// Link columns: link_id, src, dst, capacity_Bps, latency_s (NumPy arrays).
    fn link_columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let t = &self.inner;
        let n = t.n_links() as i64;
        let cols: Vec<(&str, Column)> = vec![
            ("link_id", Column::I64((0..n).collect())),
            (
                "src",
                Column::I64(t.link_src().iter().map(|&x| x as i64).collect()),
            ),
            (
                "dst",
                Column::I64(t.link_dst().iter().map(|&x| x as i64).collect()),
            ),
            ("capacity_Bps", Column::F64(t.capacity_Bps().to_vec())),
            ("latency_s", Column::F64(t.latency_s().to_vec())),
        ];
        table_to_py(py, Table { columns: cols })
    }

    /// The ECMP route (link ids) from `src` to `dst` for flow key `key` under `seed`.
    #[pyo3(signature = (src, dst, key=0, seed=0))]
    fn route(&self, src: i64, dst: i64, key: u64, seed: u64) -> PyResult<Vec<u32>> {
        guard(|| {
            let t = &self.inner;
            let (s, d) = (t.node("src", src)?, t.node("dst", dst)?);
            let path = Router::new().route(t, s, d, key, seed)?;
            Ok(path.into_iter().map(|l| l.0).collect())
        })
    }
}

fn as_unknown_node(e: Error) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::UnknownNode(m),
        other => other,
    }
}

/// A topology plus a DAG of flows and delays, ready to run.
#[pyclass(module = "fabricsim._core")]
pub struct Scenario {
    inner: sc::Scenario,
}

fn activities(s: &sc::Scenario, ids: &[i64]) -> Result<Vec<ActivityId>, Error> {
    ids.iter().map(|&i| s.activity(i)).collect()
}

#[pymethods]
impl Scenario {
    #[new]
    #[pyo3(signature = (topology, seed=0))]
    fn new(topology: &Topology, seed: u64) -> Self {
        Scenario {
            inner: sc::Scenario::new(Arc::clone(&topology.inner), seed),
        }
    }

    #[getter]
    fn n_activities(&self) -> usize {
        self.inner.n_activities()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    /// Adds a flow of `size_bytes` from `src` to `dst`; returns its id.
    #[pyo3(signature = (src, dst, size_bytes, start_s=0.0, after=Vec::new(), route=None, tag=None, max_rate_Bps=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_flow(
        &mut self,
        src: i64,
        dst: i64,
        size_bytes: f64,
        start_s: f64,
        after: Vec<i64>,
        route: Option<Vec<i64>>,
        tag: Option<String>,
        max_rate_Bps: Option<f64>,
    ) -> PyResult<u32> {
        let s = &mut self.inner;
        guard(|| {
            let topo = Arc::clone(s.topology());
            let (src, dst) = (topo.node("src", src)?, topo.node("dst", dst)?);
            let after = activities(s, &after)?;
            let links: Option<Vec<LinkId>> = match route {
                None => None,
                Some(r) => Some(r.iter().map(|&l| topo.link(l)).collect::<Result<_, _>>()?),
            };
            let route = match &links {
                None => Route::Ecmp,
                Some(l) => Route::Links(l),
            };
            let cap = max_rate_Bps.unwrap_or(f64::INFINITY);
            Ok(s.add_flow(
                src,
                dst,
                size_bytes,
                start_s,
                &after,
                route,
                tag.as_deref(),
                cap,
            )?
            .0)
        })
    }

    /// Adds one flow per element of the arrays; returns their ids. Flow i takes the links
    /// `route_links[route_offsets[i]..route_offsets[i + 1]]` when routes are given, else ECMP.
    #[pyo3(signature = (src, dst, size_bytes, start_s, tag=None, route_offsets=None, route_links=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_flows<'py>(
        &mut self,
        py: Python<'py>,
        src: PyReadonlyArray1<'_, i64>,
        dst: PyReadonlyArray1<'_, i64>,
        size_bytes: PyReadonlyArray1<'_, f64>,
        start_s: PyReadonlyArray1<'_, f64>,
        tag: Option<String>,
        route_offsets: Option<PyReadonlyArray1<'_, i64>>,
        route_links: Option<PyReadonlyArray1<'_, i64>>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (src, dst) = (slice("src", &src)?, slice("dst", &dst)?);
        let (size, start) = (
            slice("size_bytes", &size_bytes)?,
            slice("start_s", &start_s)?,
        );
        let offsets = route_offsets
            .as_ref()
            .map(|a| slice("route_offsets", a))
            .transpose()?;
        let links = route_links
            .as_ref()
            .map(|a| slice("route_links", a))
            .transpose()?;
        let s = &mut self.inner;
        let ids = guard(|| {
            let n = src.len();
            if dst.len() != n || size.len() != n || start.len() != n {
                return Err(Error::InvalidArgument(format!(
                    "src, dst, size_bytes and start_s must have one length, got {}, {}, {} and {}",
                    n,
                    dst.len(),
                    size.len(),
                    start.len()
                )));
            }
            let routes = match (offsets, links) {
                (None, None) => None,
                (Some(o), Some(l)) => {
                    check_offsets(o, n, l.len())?;
                    Some((o, l))
                }
                _ => {
                    return Err(Error::InvalidArgument(
                        "route_offsets and route_links go together: give both or neither".into(),
                    ))
                }
            };
            let topo = Arc::clone(s.topology());
            let first = s.n_activities();
            let mut ids = Vec::with_capacity(n);
            let mut route: Vec<LinkId> = Vec::new();
            for i in 0..n {
                let added = (|| {
                    let (a, b) = (topo.node("src", src[i])?, topo.node("dst", dst[i])?);
                    let r = match routes {
                        None => Route::Ecmp,
                        Some((o, l)) => {
                            route.clear();
                            for &link in &l[o[i] as usize..o[i + 1] as usize] {
                                route.push(topo.link(link)?);
                            }
                            Route::Links(&route)
                        }
                    };
                    s.add_flow(
                        a,
                        b,
                        size[i],
                        start[i],
                        &[],
                        r,
                        tag.as_deref(),
                        f64::INFINITY,
                    )
                })();
                match added {
                    Ok(id) => ids.push(id.0 as i64),
                    Err(e) => {
                        // All or nothing: a bad element leaves the scenario as it was.
                        s.truncate(first);
                        return Err(prefix(e, &format!("element {i}: ")));
                    }
                }
            }
            Ok(ids)
        })?;
        Ok(ids.into_pyarray(py))
    }

    /// Adds a delay (compute time) of `duration_s`; returns its id.
    #[pyo3(signature = (duration_s, start_s=0.0, after=Vec::new(), tag=None))]
    fn add_delay(
        &mut self,
        duration_s: f64,
        start_s: f64,
        after: Vec<i64>,
        tag: Option<String>,
    ) -> PyResult<u32> {
        let s = &mut self.inner;
        guard(|| {
            let after = activities(s, &after)?;
            Ok(s.add_delay(duration_s, start_s, &after, tag.as_deref())?.0)
        })
    }

    /// Makes `activity_id` wait for `after_id`.
    fn add_dependency(&mut self, activity_id: i64, after_id: i64) -> PyResult<()> {
        let s = &mut self.inner;
        guard(|| {
            let (a, b) = (s.activity(activity_id)?, s.activity(after_id)?);
            s.add_dependency(a, b)
        })
    }

    /// Link ids of a flow's route in path order (empty for a delay).
    fn route_of(&self, activity_id: i64) -> PyResult<Vec<u32>> {
        guard(|| {
            Ok(self
                .inner
                .route_of(self.inner.activity(activity_id)?)
                .to_vec())
        })
    }

    /// Runs the scenario with the GIL released. `progress(n_done, n_activities, time_s)` is
    /// called now and then; Ctrl-C stops the run with KeyboardInterrupt.
    #[pyo3(signature = (record_rates=false, progress=None, verify_rates=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        record_rates: bool,
        progress: Option<PyObject>,
        verify_rates: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner;
        let options = RunOptions {
            record_rates,
            verify: verify_rates,
        };
        let mut stop: Option<PyErr> = None;
        let out = py.allow_threads(|| {
            let mut report = |p: &Progress| -> bool {
                Python::with_gil(|py| {
                    let r = py.check_signals().and_then(|_| match &progress {
                        Some(cb) => cb
                            .call1(py, (p.n_done, p.n_activities, p.time_s))
                            .map(|_| ()),
                        None => Ok(()),
                    });
                    match r {
                        Ok(()) => true,
                        Err(e) => {
                            stop = Some(e);
                            false
                        }
                    }
                })
            };
            guard(|| s.run(&options, &mut report))
        });
        if let Some(e) = stop {
            return Err(e);
        }
        let out = out?;
        let (flows, delays, links, rates) = guard(|| {
            Ok((
                export::flows_table(s, &out),
                export::delays_table(s, &out),
                export::links_table(s, &out),
                export::rate_changes_table(&out),
            ))
        })?;
        let d = PyDict::new(py);
        d.set_item("flows", table_to_py(py, flows)?)?;
        d.set_item("delays", table_to_py(py, delays)?)?;
        d.set_item("links", table_to_py(py, links)?)?;
        if record_rates {
            d.set_item("rate_changes", table_to_py(py, rates)?)?;
        }
        d.set_item("makespan_s", out.makespan_s)?;
        d.set_item("n_instants", out.n_instants)?;
        d.set_item("n_solves", out.n_solves)?;
        d.set_item("n_flows_resolved", out.n_flows_resolved)?;
        d.set_item("n_rate_changes", out.n_rate_changes)?;
        Ok(d)
    }
}

/// Checks compressed-row offsets: n + 1 of them, from 0, never decreasing, ending at `len`.
fn check_offsets(offsets: &[i64], n: usize, len: usize) -> Result<(), Error> {
    if offsets.len() != n + 1 {
        return Err(Error::InvalidArgument(format!(
            "route_offsets must have {} entries (one more than flows), got {}",
            n + 1,
            offsets.len()
        )));
    }
    if offsets[0] != 0 || offsets[n] != len as i64 {
        return Err(Error::InvalidArgument(format!(
            "route_offsets must start at 0 and end at len(route_links) = {len}, got {} and {}",
            offsets[0], offsets[n]
        )));
    }
    if let Some(i) = (0..n).find(|&i| offsets[i + 1] < offsets[i]) {
        return Err(Error::InvalidArgument(format!(
            "route_offsets must not decrease: route_offsets[{}] = {} < route_offsets[{i}] = {}",
            i + 1,
            offsets[i + 1],
            offsets[i]
        )));
    }
    Ok(())
}

fn prefix(e: Error, p: &str) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{p}{m}")),
        Error::UnknownNode(m) => Error::UnknownNode(format!("{p}{m}")),
        Error::SameEndpoints(m) => Error::SameEndpoints(format!("{p}{m}")),
        Error::Unreachable(m) => Error::Unreachable(format!("{p}{m}")),
        Error::ZeroCapacityPath(m) => Error::ZeroCapacityPath(format!("{p}{m}")),
        Error::UnknownLink(m) => Error::UnknownLink(format!("{p}{m}")),
        other => other,
    }
}

/// A table as a list of (name, column); a column is a NumPy array, or for strings a
/// (int32 indices with -1 for null, list of values) pair.
fn table_to_py<'py>(py: Python<'py>, t: Table) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (name, col) in t.columns {
        let value: Bound<'py, PyAny> = match col {
            Column::I64(v) => v.into_pyarray(py).into_any(),
            Column::F64(v) => v.into_pyarray(py).into_any(),
            Column::Dict { indices, values } => {
                (indices.into_pyarray(py), PyList::new(py, values)?)
                    .into_pyobject(py)?
                    .into_any()
            }
        };
        list.append((name, value))?;
    }
    Ok(list)
}

/// Max-min fair rates (bytes/s) of flows sharing constraints: flow `flow_index[e]` puts
/// `coefficient[e]` times its rate on constraint `constraint_index[e]`.
#[pyfunction]
#[pyo3(signature = (capacity_Bps, flow_index, constraint_index, coefficient, n_flows, rate_cap_Bps=None))]
fn max_min_rates<'py>(
    py: Python<'py>,
    capacity_Bps: PyReadonlyArray1<'_, f64>,
    flow_index: PyReadonlyArray1<'_, i64>,
    constraint_index: PyReadonlyArray1<'_, i64>,
    coefficient: PyReadonlyArray1<'_, f64>,
    n_flows: i64,
    rate_cap_Bps: Option<PyReadonlyArray1<'_, f64>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let cap = slice("capacity_Bps", &capacity_Bps)?.to_vec();
    let fi = slice("flow_index", &flow_index)?;
    let ci = slice("constraint_index", &constraint_index)?;
    let k = slice("coefficient", &coefficient)?;
    let caps = match &rate_cap_Bps {
        Some(a) => Some(slice("rate_cap_Bps", a)?.to_vec()),
        None => None,
    };
    let rates = py.allow_threads(|| {
        guard(|| {
            if n_flows < 0 {
                return Err(Error::InvalidArgument(format!(
                    "n_flows must be >= 0, got {n_flows}"
                )));
            }
            let fi = to_u32("flow_index", fi, n_flows as usize)?;
            let ci = to_u32("constraint_index", ci, cap.len())?;
            solver::max_min_rates(cap, &fi, &ci, k, n_flows as usize, caps)
        })
    })?;
    Ok(rates.into_pyarray(py))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Topology>()?;
    m.add_class::<Scenario>()?;
    m.add_function(wrap_pyfunction!(max_min_rates, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
