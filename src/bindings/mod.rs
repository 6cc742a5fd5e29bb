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
use crate::routing::structured::{self, Routed, Traffic};
use crate::routing::Router;
use crate::scenario::{self as sc, Route};
use crate::solver;
use crate::topology;
use crate::topology::fabric::{Fabric, Mode, NodeKind};
use crate::topology::generators::{self, NvlinkParams, ScaleOutParams};

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

type Int64Array<'py> = Bound<'py, PyArray1<i64>>;

/// Usage lists of many flows as arrays: (offsets, constraint ids, coefficients).
type UsageColumns<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
);

/// A directed graph of links with capacities (bytes/s) and latencies (s).
#[pyclass(module = "fabricsim._core", frozen)]
pub struct Topology {
    inner: Arc<Fabric>,
}

impl Topology {
    fn ecmp_route(&self, src: i64, dst: i64, key: u64, seed: u64) -> Result<Vec<u32>, Error> {
        let f = &self.inner;
        let t = f.topology();
        let (s, d) = (t.node("src", src)?, t.node("dst", dst)?);
        let mut routed = Routed::default();
        let modes = [Mode::Ecmp, Mode::Ecmp];
        let connection = Traffic::Connection;
        if structured::route(f, s.0, d.0, key, seed, modes, connection, &mut routed)? {
            return Ok(routed.links);
        }
        let mut router = Router::new();
        let path = router.route(t, f.link_capacity_Bps(), s, d, key, seed)?;
        Ok(path.iter().map(|l| l.0).collect())
    }
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
            Ok(Topology {
                inner: Arc::new(Fabric::generic(t)),
            })
        })
    }

    #[getter]
    fn n_nodes(&self) -> usize {
        self.inner.topology().n_nodes()
    }

    #[getter]
    fn n_links(&self) -> usize {
        self.inner.n_links()
    }

    #[getter]
    fn n_gpus(&self) -> u32 {
        self.inner.n_gpus
    }

    #[getter]
    fn n_nics(&self) -> u32 {
        self.inner.n_nics
    }

    /// Link columns: link_id, src, dst, capacity_Bps, latency_s (NumPy arrays); capacities
    /// are those in force, faults applied.
    fn link_columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let t = self.inner.topology();
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
            (
                "capacity_Bps",
                Column::F64(self.inner.link_capacity_Bps().to_vec()),
            ),
            ("latency_s", Column::F64(t.latency_s().to_vec())),
        ];
        table_to_py(py, Table { columns: cols })
    }

    /// The ECMP route (link ids) from `src` to `dst` for flow key `key` under `seed`:
    /// from the structure where the fabric has one, else over shortest paths.
    #[pyo3(signature = (src, dst, key=0, seed=0))]
    fn route(&self, src: i64, dst: i64, key: u64, seed: u64) -> PyResult<Vec<u32>> {
        guard(|| self.ecmp_route(src, dst, key, seed))
    }

    /// The latency of that route: the sum of its links' latencies.
    #[pyo3(signature = (src, dst, key=0, seed=0))]
    fn path_latency_s(&self, src: i64, dst: i64, key: u64, seed: u64) -> PyResult<f64> {
        guard(|| {
            let links = self.ecmp_route(src, dst, key, seed)?;
            let latency = self.inner.topology().latency_s();
            Ok(links.iter().map(|&l| latency[l as usize]).sum())
        })
    }

    /// Routes many flows from the structure: returns (offsets, constraint ids, coefficients)
    /// of their usage lists; `mode` is "ecmp" or "spray" for every tier.
    #[pyo3(signature = (src, dst, seed=0, mode="ecmp"))]
    fn route_many<'py>(
        &self,
        py: Python<'py>,
        src: PyReadonlyArray1<'_, i64>,
        dst: PyReadonlyArray1<'_, i64>,
        seed: u64,
        mode: &str,
    ) -> PyResult<UsageColumns<'py>> {
        let (src, dst) = (slice("src", &src)?, slice("dst", &dst)?);
        let f = &self.inner;
        let (o, c, k) = py.allow_threads(|| {
            guard(|| {
                let m = parse_mode(mode)?;
                if src.len() != dst.len() {
                    return Err(Error::InvalidArgument(format!(
                        "src and dst must have one length, got {} and {}",
                        src.len(),
                        dst.len()
                    )));
                }
                let t = f.topology();
                let mut router = Router::new();
                let mut routed = Routed::default();
                let mut offsets = Vec::with_capacity(src.len() + 1);
                offsets.push(0i64);
                let (mut cs, mut ks) = (Vec::new(), Vec::new());
                for i in 0..src.len() {
                    let (s, d) = (t.node("src", src[i])?, t.node("dst", dst[i])?);
                    let (key, connection) = (i as u64, Traffic::Connection);
                    if !structured::route(f, s.0, d.0, key, seed, [m, m], connection, &mut routed)?
                    {
                        let path = router.route(t, f.link_capacity_Bps(), s, d, i as u64, seed)?;
                        cs.extend(path.iter().map(|l| l.0 as i64));
                        ks.extend(std::iter::repeat_n(1.0, path.len()));
                    } else {
                        cs.extend(routed.usage.iter().map(|u| u.constraint as i64));
                        ks.extend(routed.usage.iter().map(|u| u.coefficient));
                    }
                    offsets.push(cs.len() as i64);
                }
                Ok((offsets, cs, ks))
            })
        })?;
        Ok((o.into_pyarray(py), c.into_pyarray(py), k.into_pyarray(py)))
    }

    /// A copy with the given links' capacities multiplied by `factor` (0 = down).
    fn with_link_factors(&self, links: Vec<i64>, factor: f64) -> PyResult<Topology> {
        guard(|| {
            let ids = links
                .iter()
                .map(|&l| self.inner.topology().link(l).map(|l| l.0))
                .collect::<Result<Vec<u32>, Error>>()?;
            Ok(Topology {
                inner: Arc::new(self.inner.with_link_factors(&ids, factor)?),
            })
        })
    }

    /// Every link touching the given nodes (either direction).
    fn links_of_nodes(&self, nodes: Vec<i64>) -> PyResult<Vec<u32>> {
        guard(|| {
            let t = self.inner.topology();
            let mut out = Vec::new();
            for &n in &nodes {
                let node = t.node("faulted", n)?;
                out.extend_from_slice(t.out_links(node));
                out.extend_from_slice(t.in_links(node));
            }
            out.sort_unstable();
            out.dedup();
            Ok(out)
        })
    }

    /// Every scale-out link of plane `plane` (NIC to leaf and above).
    fn links_of_plane(&self, plane: i64) -> PyResult<Vec<u32>> {
        guard(|| {
            let Some(p) = self.inner.scale_out_placed_opt() else {
                return Err(Error::InvalidArgument(
                    "this fabric has no scale-out planes".into(),
                ));
            };
            if plane < 0 || plane >= p.shape.planes as i64 {
                return Err(Error::InvalidArgument(format!(
                    "plane {plane} does not exist: planes run from 0 to {}",
                    p.shape.planes - 1
                )));
            }
            let mut out = Vec::new();
            for l in 0..p.shape.n_links() {
                if p.shape.locate(l).0 == plane as u32 {
                    out.push(p.link_base + l);
                }
            }
            Ok(out)
        })
    }

    /// Readable names of the given nodes.
    fn node_names(&self, nodes: Vec<i64>) -> PyResult<Vec<String>> {
        guard(|| {
            let t = self.inner.topology();
            nodes
                .iter()
                .map(|&n| Ok(self.inner.node_name(t.node("named", n)?.0)))
                .collect()
        })
    }

    /// Every node's readable name as the buffers of an Arrow string array: offsets
    /// (n_nodes + 1, int32) and UTF-8 bytes, so that a table names its nodes without a Python
    /// string per node.
    fn node_name_buffers<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u8>>)> {
        let f = &self.inner;
        let (offsets, bytes) = py.allow_threads(|| guard(|| f.node_names_utf8()))?;
        Ok((offsets.into_pyarray(py), bytes.into_pyarray(py)))
    }

    /// What each link is (`topology::roles`): kind, tier and direction as dictionary
    /// columns, plane, rail and domain as ids (-1 for none).
    fn link_roles<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let f = &self.inner;
        let r = py.allow_threads(|| f.link_roles());
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let table = Table {
            columns: vec![
                (
                    "kind",
                    Column::Dict {
                        indices: r.kind.iter().map(|&k| k as i32).collect(),
                        values: names(&topology::roles::KIND_NAMES),
                    },
                ),
                (
                    "tier",
                    Column::Dict {
                        indices: r.tier,
                        values: r.tier_names,
                    },
                ),
                (
                    "direction",
                    Column::Dict {
                        indices: r.direction,
                        values: names(&topology::roles::DIRECTION_NAMES),
                    },
                ),
                ("plane", Column::I64(r.plane)),
                ("rail", Column::I64(r.rail)),
                ("domain", Column::I64(r.domain)),
            ],
        };
        table_to_py(py, table)
    }

    /// Where the given scale-out endpoints sit (NIC i serves GPU i; a bare Clos's host i is
    /// endpoint i): their leaves, and their pods in a three-tier Clos (0 in a two-tier one),
    /// so callers read the placement instead of restating it.
    fn scale_out_positions<'py>(
        &self,
        py: Python<'py>,
        endpoints: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<(Int64Array<'py>, Int64Array<'py>)> {
        let endpoints = slice("endpoints", &endpoints)?;
        let (leaves, pods) = guard(|| {
            let Some(p) = self.inner.scale_out_placed_opt() else {
                return Err(Error::InvalidArgument(
                    "this fabric has no scale-out Clos".into(),
                ));
            };
            let s = p.shape;
            let ids = to_u32("endpoints", endpoints, s.n_endpoints as usize)?;
            let leaves: Vec<i64> = ids.iter().map(|&e| s.leaf_of(e) as i64).collect();
            let pods = leaves
                .iter()
                .map(|&l| {
                    if s.tiers == 3 {
                        s.pod_of_leaf(l as u32) as i64
                    } else {
                        0
                    }
                })
                .collect::<Vec<i64>>();
            Ok((leaves, pods))
        })?;
        Ok((leaves.into_pyarray(py), pods.into_pyarray(py)))
    }

    /// Node kind codes (see `structure()["kind_names"]`) as a NumPy uint8 array.
    fn node_kinds<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u8>> {
        self.inner
            .kinds()
            .iter()
            .map(|&k| k as u8)
            .collect::<Vec<u8>>()
            .into_pyarray(py)
    }

    /// The structure behind the fabric: sizes of its domains and scale-out Clos.
    fn structure<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = &self.inner;
        let d = PyDict::new(py);
        d.set_item("n_gpus", f.n_gpus)?;
        d.set_item("n_nics", f.n_nics)?;
        d.set_item("n_nodes", f.topology().n_nodes())?;
        d.set_item("n_links", f.n_links())?;
        d.set_item("n_bundles", f.n_bundles())?;
        d.set_item("has_faults", f.has_faults())?;
        let kinds = PyList::empty(py);
        for k in 0..=8u8 {
            let kind: NodeKind = kind_from_code(k);
            kinds.append(kind.name())?;
        }
        d.set_item("kind_names", kinds)?;
        if let Some(dm) = &f.domains {
            let s = PyDict::new(py);
            s.set_item("n_domains", dm.n_domains)?;
            clos_dict(&s, &dm.shape)?;
            s.set_item("link_Bps", dm.links.endpoint_link_Bps)?;
            d.set_item("domain", s)?;
        }
        if let Some(o) = &f.scale_out {
            let s = PyDict::new(py);
            clos_dict(&s, &o.shape)?;
            s.set_item("link_Bps", o.links.endpoint_link_Bps)?;
            d.set_item("scale_out", s)?;
        }
        Ok(d)
    }
}

fn kind_from_code(k: u8) -> NodeKind {
    match k {
        1 => NodeKind::Gpu,
        2 => NodeKind::Nic,
        3 => NodeKind::NvSwitch,
        4 => NodeKind::Leaf,
        5 => NodeKind::Spine,
        6 => NodeKind::Core,
        7 => NodeKind::PcieSwitch,
        8 => NodeKind::Cpu,
        _ => NodeKind::Node,
    }
}

fn clos_dict(d: &Bound<'_, PyDict>, s: &topology::clos::ClosShape) -> PyResult<()> {
    d.set_item("n_endpoints", s.n_endpoints)?;
    d.set_item("planes", s.planes)?;
    d.set_item("endpoint_links", s.endpoint_links.clone())?;
    d.set_item("tiers", s.tiers)?;
    d.set_item("radix", s.radix)?;
    d.set_item("rails", s.rails)?;
    d.set_item("endpoints_per_leaf", s.endpoints_per_leaf)?;
    d.set_item("rails_per_leaf", s.rails_per_leaf)?;
    d.set_item("n_leaves", s.n_leaves)?;
    d.set_item("leaf_down", s.leaf_down)?;
    d.set_item("leaf_up", s.leaf_up)?;
    d.set_item("n_spines", s.n_spines)?;
    d.set_item("leaf_spine_width", s.leaf_spine_width)?;
    d.set_item("n_pods", s.n_pods)?;
    d.set_item("leaves_per_pod", s.leaves_per_pod)?;
    d.set_item("spine_down", s.spine_down)?;
    d.set_item("spine_up", s.spine_up)?;
    d.set_item("n_cores", s.n_cores)?;
    d.set_item("cores_per_group", s.cores_per_group)?;
    d.set_item("spine_core_width", s.spine_core_width)?;
    Ok(())
}

fn parse_mode(mode: &str) -> Result<Mode, Error> {
    match mode {
        "ecmp" => Ok(Mode::Ecmp),
        "spray" | "adaptive" => Ok(Mode::Spray),
        other => Err(Error::InvalidArgument(format!(
            "routing must be \"ecmp\" or \"adaptive\", got {other:?}"
        ))),
    }
}

fn nvlink_params(d: &Bound<'_, PyDict>) -> PyResult<NvlinkParams> {
    Ok(NvlinkParams {
        gpus_per_domain: get(d, "gpus_per_domain")?,
        chip_links: get(d, "chip_links")?,
        tiers: get(d, "tiers")?,
        chip_ports: get(d, "chip_ports")?,
        link_Bps: get(d, "link_Bps")?,
        chip_latency_s: get(d, "chip_latency_s")?,
    })
}

fn scale_out_params(d: &Bound<'_, PyDict>) -> PyResult<ScaleOutParams> {
    let mode: String = get(d, "routing")?;
    let o: (f64, f64) = get(d, "oversubscription")?;
    Ok(ScaleOutParams {
        tiers: get(d, "tiers")?,
        planes: get(d, "planes")?,
        radix: get(d, "radix")?,
        oversubscription: [o.0, o.1],
        link_Bps: get(d, "link_Bps")?,
        switch_latency_s: get(d, "switch_latency_s")?,
        nic_latency_s: get(d, "nic_latency_s")?,
        mode: parse_mode(&mode).map_err(to_py)?,
    })
}

fn get<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v
            .extract()
            .map_err(|e| to_py(Error::InvalidArgument(format!("parameter {key}: {e}")))),
        None => Err(to_py(Error::InvalidArgument(format!(
            "missing parameter {key}"
        )))),
    }
}

/// NVLink domains with nothing between them (an HGX board, an NVL72 rack, ...).
#[pyfunction]
fn build_nvlink_domains(
    py: Python<'_>,
    n_domains: u32,
    nvlink: &Bound<'_, PyDict>,
) -> PyResult<Topology> {
    let nv = nvlink_params(nvlink)?;
    let f = py.allow_threads(|| guard(|| generators::nvlink_domains(n_domains, &nv)))?;
    Ok(Topology { inner: Arc::new(f) })
}

/// A bare Clos of hosts.
#[pyfunction]
fn build_clos(py: Python<'_>, n_hosts: u32, scale_out: &Bound<'_, PyDict>) -> PyResult<Topology> {
    let so = scale_out_params(scale_out)?;
    let f = py.allow_threads(|| guard(|| generators::clos(n_hosts, &so)))?;
    Ok(Topology { inner: Arc::new(f) })
}

/// NVLink domains joined by a rail-optimised scale-out Clos.
#[pyfunction]
fn build_cluster(
    py: Python<'_>,
    n_domains: u32,
    nvlink: &Bound<'_, PyDict>,
    nic_link_Bps: f64,
    scale_out: &Bound<'_, PyDict>,
) -> PyResult<Topology> {
    let nv = nvlink_params(nvlink)?;
    let so = scale_out_params(scale_out)?;
    let f =
        py.allow_threads(|| guard(|| generators::cluster(n_domains, &nv, nic_link_Bps, &so)))?;
    Ok(Topology { inner: Arc::new(f) })
}

/// The sizes of a Clos, as `structure()` gives them, without building it (an error where it
/// cannot be built): the one place the shape arithmetic lives, for Python's plans too.
#[pyfunction]
fn clos_shape<'py>(
    py: Python<'py>,
    n_endpoints: u32,
    rails: u32,
    endpoint_links: Vec<u32>,
    tiers: u32,
    radix: u32,
    oversubscription: (f64, f64),
) -> PyResult<Bound<'py, PyDict>> {
    let shape = guard(|| {
        topology::clos::ClosShape::new(&topology::clos::ClosParams {
            n_endpoints,
            rails,
            endpoint_links,
            tiers,
            radix,
            oversubscription: [oversubscription.0, oversubscription.1],
        })
    })?;
    let d = PyDict::new(py);
    clos_dict(&d, &shape)?;
    Ok(d)
}

/// A PCIe server.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn build_pcie_server(
    n_gpus: u32,
    gpus_per_switch: u32,
    nics_per_switch: u32,
    n_cpus: u32,
    pcie_Bps: f64,
    nic_Bps: f64,
    cpu_link_Bps: f64,
    latency_s: f64,
) -> PyResult<Topology> {
    let f = guard(|| {
        generators::pcie_server(
            n_gpus,
            gpus_per_switch,
            nics_per_switch,
            n_cpus,
            pcie_Bps,
            nic_Bps,
            cpu_link_Bps,
            latency_s,
        )
    })?;
    Ok(Topology { inner: Arc::new(f) })
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
    /// Activities kept to be added again (`template`, `add_batch`).
    templates: Vec<sc::Template>,
}

fn activities(s: &sc::Scenario, ids: &Ids) -> Result<Vec<ActivityId>, Error> {
    ids.0.iter().map(|&i| s.activity(i)).collect()
}

/// Activity ids a caller waits on: any sequence of ints, read without a Python object per
/// id when it is an int64 NumPy array (an all-to-all's end waits on millions of flows).
#[derive(Default)]
struct Ids(Vec<i64>);

impl<'py> FromPyObject<'py> for Ids {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(a) = ob.extract::<PyReadonlyArray1<'py, i64>>() {
            return Ok(Ids(a.as_array().iter().copied().collect()));
        }
        Ok(Ids(ob.extract()?))
    }
}

#[pymethods]
impl Scenario {
    #[new]
    #[pyo3(signature = (topology, seed=0, scale_up=None, scale_out=None))]
    fn new(
        topology: &Topology,
        seed: u64,
        scale_up: Option<&str>,
        scale_out: Option<&str>,
    ) -> PyResult<Self> {
        let mut inner = sc::Scenario::new(Arc::clone(&topology.inner), seed);
        let mut modes = inner.modes();
        if let Some(m) = scale_up {
            modes[0] = parse_mode(m).map_err(to_py)?;
        }
        if let Some(m) = scale_out {
            modes[1] = parse_mode(m).map_err(to_py)?;
        }
        inner.set_modes(modes);
        Ok(Scenario {
            inner,
            templates: Vec::new(),
        })
    }

    /// Routing of the (scale-up, scale-out) tiers: "ecmp" or "adaptive".
    #[getter]
    fn routing(&self) -> (&'static str, &'static str) {
        let name = |m: Mode| if m == Mode::Ecmp { "ecmp" } else { "adaptive" };
        let m = self.inner.modes();
        (name(m[0]), name(m[1]))
    }

    /// A flow's usage list: (fabric constraint ids, coefficients); ids >= n_links are bundles.
    fn usage_of(&self, activity_id: i64) -> PyResult<(Vec<u32>, Vec<f64>)> {
        guard(|| {
            let u = self.inner.usage_of(self.inner.activity(activity_id)?);
            Ok(u.into_iter().unzip())
        })
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
    #[pyo3(signature = (src, dst, size_bytes, start_s=0.0, after=Ids::default(), route=None, tag=None, max_rate_Bps=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_flow(
        &mut self,
        src: i64,
        dst: i64,
        size_bytes: f64,
        start_s: f64,
        after: Ids,
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
    /// `route_links[route_offsets[i]..route_offsets[i + 1]]` when routes are given, else ECMP:
    /// as one connection each, or `striped` as a collective's transfers (NCCL channels over
    /// the NIC's ports: split over the planes of an ECMP tier, hashed within each).
    /// `max_rate_Bps[i]` caps flow i's rate (none where None).
    #[pyo3(signature = (src, dst, size_bytes, start_s, tag=None, route_offsets=None, route_links=None, after=Ids::default(), striped=false, max_rate_Bps=None))]
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
        after: Ids,
        striped: bool,
        max_rate_Bps: Option<PyReadonlyArray1<'_, f64>>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (src, dst) = (slice("src", &src)?, slice("dst", &dst)?);
        let caps = max_rate_Bps
            .as_ref()
            .map(|a| slice("max_rate_Bps", a))
            .transpose()?;
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
            if dst.len() != n
                || size.len() != n
                || start.len() != n
                || caps.is_some_and(|c| c.len() != n)
            {
                return Err(Error::InvalidArgument(format!(
                    "src, dst, size_bytes, start_s (and max_rate_Bps) must have one length, got {}, {}, {}, {}{}",
                    n,
                    dst.len(),
                    size.len(),
                    start.len(),
                    caps.map_or(String::new(), |c| format!(" and {}", c.len()))
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
            s.check_room_for_flows(n)?;
            let topo = Arc::clone(s.topology());
            let after = activities(s, &after)?;
            let first = s.n_activities();
            let mut ids = Vec::with_capacity(n);
            let mut route: Vec<LinkId> = Vec::new();
            for i in 0..n {
                let added = (|| {
                    let (a, b) = (topo.node("src", src[i])?, topo.node("dst", dst[i])?);
                    let r = match routes {
                        None if striped => Route::Striped,
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
                        &after,
                        r,
                        tag.as_deref(),
                        caps.map_or(f64::INFINITY, |c| c[i]),
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
    #[pyo3(signature = (duration_s, start_s=0.0, after=Ids::default(), tag=None))]
    fn add_delay(
        &mut self,
        duration_s: f64,
        start_s: f64,
        after: Ids,
        tag: Option<String>,
    ) -> PyResult<u32> {
        let s = &mut self.inner;
        guard(|| {
            let after = activities(s, &after)?;
            Ok(s.add_delay(duration_s, start_s, &after, tag.as_deref())?.0)
        })
    }

    /// Raises TooLargeError, with an estimate, if `n_flows` more flows cannot fit in memory.
    fn check_room_for_flows(&self, n_flows: usize) -> PyResult<()> {
        guard(|| self.inner.check_room_for_flows(n_flows))
    }

    /// Gives the flows among activities `first..end` the share weight `weight` (weighted
    /// max-min: bandwidth at a shared bottleneck in proportion to it).
    fn set_weights(&mut self, first: usize, end: usize, weight: f64) -> PyResult<()> {
        let s = &mut self.inner;
        guard(|| s.set_weights(first, end, weight))
    }

    /// Forgets faults `n..` (undoes a change that failed partway).
    fn truncate_faults(&mut self, n: usize) {
        self.inner.truncate_faults(n);
    }

    /// Forgets activities `first..` (undoes a partly added collective).
    fn truncate(&mut self, first: usize) {
        self.inner.truncate(first);
    }

    /// A reduction engine (a constraint of the scenario's own) of `capacity_Bps`; returns
    /// its constraint id.
    fn add_engine(&mut self, capacity_Bps: f64) -> PyResult<u32> {
        let s = &mut self.inner;
        guard(|| s.add_engine(capacity_Bps))
    }

    /// A coupled flow: edge i from `edge_src[i]` to `edge_dst[i]` carries `edge_coef[i]`
    /// bytes per byte of the flow on its leg of the route (`edge_leg[i]`: "whole", "up" into
    /// the network, or "down" out of it; all "whole" if None); routes add (`combine="sum"`)
    /// or reduce (`"max"`) within each reduction tree (`edge_tree[i]`, all one tree if
    /// None), the trees' streams adding; `max_rate_Bps` caps its rate. A `"max"` flow's
    /// edges are routed as reduction trees (`Traffic::Tree`: SHARP toward one root switch,
    /// NVLS sprayed in a domain), a `"sum"` flow's as NCCL channels (`Traffic::Channels`).
    #[pyo3(signature = (edge_src, edge_dst, edge_coef, combine, engines, size_bytes, latency_s, start_s=0.0, after=Ids::default(), tag=None, max_rate_Bps=None, edge_leg=None, edge_tree=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_coupled_flow(
        &mut self,
        edge_src: PyReadonlyArray1<'_, i64>,
        edge_dst: PyReadonlyArray1<'_, i64>,
        edge_coef: PyReadonlyArray1<'_, f64>,
        combine: &str,
        engines: Vec<(i64, f64)>,
        size_bytes: f64,
        latency_s: f64,
        start_s: f64,
        after: Ids,
        tag: Option<String>,
        max_rate_Bps: Option<f64>,
        edge_leg: Option<Vec<String>>,
        edge_tree: Option<PyReadonlyArray1<'_, i64>>,
    ) -> PyResult<u32> {
        let (src, dst) = (slice("edge_src", &edge_src)?, slice("edge_dst", &edge_dst)?);
        let coef = slice("edge_coef", &edge_coef)?;
        let tree = edge_tree
            .as_ref()
            .map(|t| slice("edge_tree", t))
            .transpose()?;
        let s = &mut self.inner;
        guard(|| {
            if dst.len() != src.len() || coef.len() != src.len() {
                return Err(Error::InvalidArgument(format!(
                    "edge_src, edge_dst and edge_coef must have one length, got {}, {} and {}",
                    src.len(),
                    dst.len(),
                    coef.len()
                )));
            }
            let combine = match combine {
                "sum" => sc::Combine::Sum,
                "max" => sc::Combine::Max,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "combine must be 'sum' or 'max', got {other:?}"
                    )))
                }
            };
            if let Some(legs) = edge_leg.as_ref().filter(|l| l.len() != src.len()) {
                return Err(Error::InvalidArgument(format!(
                    "edge_leg must have one entry per edge ({}), got {}",
                    src.len(),
                    legs.len()
                )));
            }
            if let Some(tree) = tree.filter(|t| t.len() != src.len()) {
                return Err(Error::InvalidArgument(format!(
                    "edge_tree must have one entry per edge ({}), got {}",
                    src.len(),
                    tree.len()
                )));
            }
            let topo = Arc::clone(s.topology());
            let mut edges = Vec::with_capacity(src.len());
            for i in 0..src.len() {
                let (a, b) = (topo.node("src", src[i])?, topo.node("dst", dst[i])?);
                let leg = match edge_leg.as_ref().map(|l| l[i].as_str()) {
                    None | Some("whole") => sc::Leg::Whole,
                    Some("up") => sc::Leg::Up,
                    Some("down") => sc::Leg::Down,
                    Some(other) => {
                        return Err(Error::InvalidArgument(format!(
                            "edge_leg[{i}] must be 'whole', 'up' or 'down', got {other:?}"
                        )))
                    }
                };
                let tree = match tree.map(|t| t[i]) {
                    None => 0,
                    Some(t) => u32::try_from(t).map_err(|_| {
                        Error::InvalidArgument(format!(
                            "edge_tree[{i}] must be a tree number from 0 to {}, got {t}",
                            u32::MAX
                        ))
                    })?,
                };
                edges.push(sc::Edge {
                    src: a.0,
                    dst: b.0,
                    coefficient: coef[i],
                    leg,
                    tree,
                });
            }
            let engines = engines
                .iter()
                .map(|&(c, w)| {
                    if c < 0 || c > u32::MAX as i64 || !(w.is_finite() && w > 0.0) {
                        return Err(Error::InvalidArgument(format!(
                            "engine usage ({c}, {}): expected an engine id and a coefficient > 0",
                            crate::error::shown(w)
                        )));
                    }
                    Ok(crate::solver::Usage {
                        constraint: c as u32,
                        coefficient: w,
                    })
                })
                .collect::<crate::error::Result<Vec<_>>>()?;
            let after = activities(s, &after)?;
            Ok(s.add_coupled_flow(
                edges,
                combine,
                engines,
                size_bytes,
                latency_s,
                start_s,
                &after,
                tag.as_deref(),
                max_rate_Bps.unwrap_or(f64::INFINITY),
            )?
            .0)
        })
    }

    /// Keeps activities `first..` (the latest) to be added again by `add_batch`; returns the
    /// template's number, its roots (those a copy makes wait for its `after`) and whether
    /// all have one tag (which a copy may replace), or None where they cannot be repeated
    /// (`sc::Scenario::template`).
    fn template(&mut self, first: usize) -> PyResult<Option<(usize, usize, bool)>> {
        let s = &self.inner;
        let kept = guard(|| s.template(first))?;
        Ok(kept.map(|t| {
            let (roots, one_tag) = (t.n_roots(), t.one_tag());
            self.templates.push(t);
            (self.templates.len() - 1, roots, one_tag)
        }))
    }

    /// Keeps template `template` moved `shift` nodes (`sc::Template::shifted`, endpoints
    /// below `limit`): the new template's number, or None where it cannot be moved.
    fn template_shifted(
        &mut self,
        template: usize,
        shift: i64,
        limit: u32,
    ) -> PyResult<Option<usize>> {
        let (n, templates) = (self.templates.len(), &self.templates);
        let moved = guard(|| {
            let t = templates.get(template).ok_or_else(|| {
                Error::InvalidArgument(format!("template {template} is not one of the {n} kept"))
            })?;
            Ok(t.shifted(shift, limit))
        })?;
        Ok(moved.map(|t| {
            self.templates.push(t);
            n
        }))
    }

    /// Adds items in order, each waiting for `after_ids[after_offsets[i]..after_offsets[i +
    /// 1]]`: where `template[i]` is a template's number, a copy of it (its roots waiting,
    /// `sc::Scenario::repeat`; every activity tagged `tags[tag[i]]` where `tag[i]` is not
    /// -1), else (-1) a delay of `duration_s[i]` tagged `tags[tag[i]]` (none where -1). Their
    /// ids follow each other from `n_activities`, so the caller knows them before the call.
    /// All or nothing: on an error nothing of the batch stays.
    #[allow(clippy::too_many_arguments)]
    fn add_batch(
        &mut self,
        template: PyReadonlyArray1<'_, i64>,
        duration_s: PyReadonlyArray1<'_, f64>,
        tag: PyReadonlyArray1<'_, i64>,
        tags: Vec<String>,
        after_offsets: PyReadonlyArray1<'_, i64>,
        after_ids: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<()> {
        let (template, duration) = (
            slice("template", &template)?,
            slice("duration_s", &duration_s)?,
        );
        let (tag, offsets) = (slice("tag", &tag)?, slice("after_offsets", &after_offsets)?);
        let after_ids = slice("after_ids", &after_ids)?;
        let (s, templates) = (&mut self.inner, &self.templates);
        guard(|| {
            let n = template.len();
            if duration.len() != n || tag.len() != n {
                return Err(Error::InvalidArgument(format!(
                    "template, duration_s and tag must have one length, got {n}, {} and {}",
                    duration.len(),
                    tag.len()
                )));
            }
            check_rows(
                ("after_offsets", "items", "after_ids"),
                offsets,
                n,
                after_ids.len(),
            )?;
            let mut n_flows = 0;
            for (i, &t) in template.iter().enumerate() {
                if t < -1 || tag[i] < -1 {
                    return Err(Error::InvalidArgument(format!(
                        "item {i}: template {t} and tag {} must each be an index or -1 (none)",
                        tag[i]
                    )));
                }
                if t >= 0 {
                    let t = templates.get(t as usize).ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "item {i}: template {t} is not one of the {} kept",
                            templates.len()
                        ))
                    })?;
                    n_flows += t.n_flows();
                }
                if tag[i] >= tags.len() as i64 {
                    return Err(Error::InvalidArgument(format!(
                        "item {i}: tag {} is not one of the {} given",
                        tag[i],
                        tags.len()
                    )));
                }
            }
            s.check_room_for_flows(n_flows)?;
            let first = s.n_activities();
            let mut after = Vec::new();
            let added = (|| {
                for i in 0..n {
                    after.clear();
                    for &a in &after_ids[offsets[i] as usize..offsets[i + 1] as usize] {
                        after.push(s.activity(a)?);
                    }
                    let name = usize::try_from(tag[i]).ok().map(|k| tags[k].as_str());
                    if template[i] >= 0 {
                        s.repeat(&templates[template[i] as usize], &after, name)?;
                    } else {
                        s.add_delay(duration[i], 0.0, &after, name)?;
                    }
                }
                Ok(())
            })();
            if added.is_err() {
                s.truncate(first);
            }
            added
        })
    }

    /// From `time_s` on, `links` carry `factor` times their nominal capacity.
    fn add_fault(&mut self, time_s: f64, links: Vec<i64>, factor: f64) -> PyResult<()> {
        let s = &mut self.inner;
        guard(|| {
            let ids = links
                .iter()
                .map(|&l| s.topology().link(l).map(|l| l.0))
                .collect::<crate::error::Result<Vec<u32>>>()?;
            s.add_fault(time_s, &ids, factor)
        })
    }

    #[getter]
    fn n_faults(&self) -> usize {
        self.inner.n_faults()
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
    #[pyo3(signature = (record_rates=false, progress=None, verify_rates=false, finish_rel_tol=0.0))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        record_rates: bool,
        progress: Option<PyObject>,
        verify_rates: bool,
        finish_rel_tol: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner;
        if !(finish_rel_tol.is_finite() && finish_rel_tol >= 0.0) {
            return Err(to_py(Error::InvalidArgument(format!(
                "finish_rel_tol must be a finite number >= 0 (0: exact), got {finish_rel_tol}"
            ))));
        }
        let options = RunOptions {
            record_rates,
            verify: verify_rates,
            finish_rel_tol,
            ..Default::default()
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
        let ran = out?;
        let (flows, delays, links, rates) = guard(|| {
            Ok((
                export::flows_table(s, &ran),
                export::delays_table(s, &ran),
                export::links_table(s, &ran),
                export::rate_changes_table(&ran.out),
            ))
        })?;
        let out = &ran.out;
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
        d.set_item("n_full_solves", out.n_full_solves)?;
        d.set_item("n_flows_resolved", out.n_flows_resolved)?;
        d.set_item("n_rate_changes", out.n_rate_changes)?;
        d.set_item("n_group_share_changes", out.n_group_share_changes)?;
        d.set_item("n_bottleneck_moves", out.n_bottleneck_moves)?;
        Ok(d)
    }
}

/// Checks compressed-row offsets: n + 1 of them, from 0, never decreasing, ending at `len`.
fn check_offsets(offsets: &[i64], n: usize, len: usize) -> Result<(), Error> {
    check_rows(("route_offsets", "flows", "route_links"), offsets, n, len)
}

/// Checks compressed rows: `names` are the offsets', the rows' and the values' names.
fn check_rows(
    names: (&str, &str, &str),
    offsets: &[i64],
    n: usize,
    len: usize,
) -> Result<(), Error> {
    let (o, rows, values) = names;
    if offsets.len() != n + 1 {
        return Err(Error::InvalidArgument(format!(
            "{o} must have {} entries (one more than {rows}), got {}",
            n + 1,
            offsets.len()
        )));
    }
    if offsets[0] != 0 || offsets[n] != len as i64 {
        return Err(Error::InvalidArgument(format!(
            "{o} must start at 0 and end at len({values}) = {len}, got {} and {}",
            offsets[0], offsets[n]
        )));
    }
    if let Some(i) = (0..n).find(|&i| offsets[i + 1] < offsets[i]) {
        return Err(Error::InvalidArgument(format!(
            "{o} must not decrease: {o}[{}] = {} < {o}[{i}] = {}",
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

/// Raises ScenarioTooLargeError if `estimate_bytes` of memory for `what` is more than is
/// available (the check the core makes before its own large allocations).
#[pyfunction]
fn check_fits(what: &str, estimate_bytes: f64) -> PyResult<()> {
    guard(|| crate::memory::check_fits(what, estimate_bytes))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Topology>()?;
    m.add_class::<Scenario>()?;
    m.add_function(wrap_pyfunction!(max_min_rates, m)?)?;
    m.add_function(wrap_pyfunction!(build_nvlink_domains, m)?)?;
    m.add_function(wrap_pyfunction!(build_clos, m)?)?;
    m.add_function(wrap_pyfunction!(build_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(build_pcie_server, m)?)?;
    m.add_function(wrap_pyfunction!(clos_shape, m)?)?;
    m.add_function(wrap_pyfunction!(check_fits, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
