//! Structured generators: the wiring of NVLink domains, rail-optimised Clos fabrics and
//! clusters of both. Figures (rates, radixes, latencies) come in as numbers; the Python
//! layer takes them from the hardware catalog.

use super::clos::ClosParams;
use super::fabric::{check_fabric_size, ClosLinks, Fabric, FabricSpec, Mode, NodeKind};
use super::Topology;
use crate::error::{shown, Error, Result};

/// A scale-up domain of GPUs wired to NVSwitch chips.
#[derive(Debug, Clone)]
pub struct NvlinkParams {
    pub gpus_per_domain: u32,
    /// NVLinks from each GPU to each first-tier chip (one entry per chip, i.e. per plane).
    pub chip_links: Vec<u32>,
    /// 1: every GPU on every chip (HGX, NVL72). 2: chips per rack under spine chips.
    pub tiers: u32,
    pub chip_ports: u32,
    /// Payload capacity of one NVLink per direction (line rate times efficiency), bytes/s.
    pub link_Bps: f64,
    pub chip_latency_s: f64,
}

/// A scale-out Clos; capacities are per plane link, latencies per switch.
#[derive(Debug, Clone)]
pub struct ScaleOutParams {
    pub tiers: u32,
    pub planes: u32,
    /// Switch ports at the plane link rate.
    pub radix: u32,
    pub oversubscription: [f64; 2],
    pub link_Bps: f64,
    pub switch_latency_s: f64,
    pub nic_latency_s: f64,
    pub mode: Mode,
}

fn positive(what: &str, x: f64) -> Result<()> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} must be a finite number > 0, got {}",
            shown(x)
        )))
    }
}

fn nvlink_spec(n: &NvlinkParams) -> Result<(ClosParams, ClosLinks)> {
    positive("NVLink link_Bps", n.link_Bps)?;
    crate::error::check_non_negative("NVSwitch latency_s", n.chip_latency_s)?;
    Ok((
        ClosParams {
            n_endpoints: n.gpus_per_domain,
            rails: 1,
            endpoint_links: n.chip_links.clone(),
            tiers: n.tiers,
            radix: n.chip_ports,
            oversubscription: [1.0, 1.0],
        },
        ClosLinks {
            endpoint_link_Bps: n.link_Bps,
            fabric_link_Bps: n.link_Bps,
            to_switch_latency_s: n.chip_latency_s,
            to_endpoint_latency_s: 0.0,
        },
    ))
}

fn scale_out_spec(
    n_endpoints: u32,
    rails: u32,
    s: &ScaleOutParams,
) -> Result<(ClosParams, ClosLinks)> {
    positive("scale-out link_Bps", s.link_Bps)?;
    crate::error::check_non_negative("switch latency_s", s.switch_latency_s)?;
    crate::error::check_non_negative("NIC latency_s", s.nic_latency_s)?;
    if s.planes == 0 {
        return Err(Error::InvalidArgument("planes must be >= 1, got 0".into()));
    }
    Ok((
        ClosParams {
            n_endpoints,
            rails,
            endpoint_links: vec![1; s.planes as usize],
            tiers: s.tiers,
            radix: s.radix,
            oversubscription: s.oversubscription,
        },
        ClosLinks {
            endpoint_link_Bps: s.link_Bps,
            fabric_link_Bps: s.link_Bps,
            to_switch_latency_s: s.switch_latency_s,
            to_endpoint_latency_s: s.nic_latency_s,
        },
    ))
}

/// `n_domains` NVLink domains with nothing between them (one domain is an HGX board or an
/// NVL72 rack).
pub fn nvlink_domains(n_domains: u32, nv: &NvlinkParams) -> Result<Fabric> {
    if n_domains == 0 {
        return Err(Error::InvalidArgument(
            "n_domains must be >= 1, got 0".into(),
        ));
    }
    Fabric::build(&FabricSpec {
        n_domains,
        domain: Some(nvlink_spec(nv)?),
        n_gpus_without_domain: 0,
        nic_link: None,
        scale_out: None,
        scale_out_mode: Mode::Spray,
    })
}

/// A bare Clos of `n_hosts` hosts (one NIC each, split over the planes).
pub fn clos(n_hosts: u32, so: &ScaleOutParams) -> Result<Fabric> {
    Fabric::build(&FabricSpec {
        n_domains: 0,
        domain: None,
        n_gpus_without_domain: 0,
        nic_link: None,
        scale_out: Some(scale_out_spec(n_hosts, 1, so)?),
        scale_out_mode: so.mode,
    })
}

/// NVLink domains joined by a rail-optimised Clos: one NIC per GPU, NIC i of every domain
/// on rail i, as in DGX SuperPODs. `nic_link_Bps` is the GPU-to-NIC host link.
pub fn cluster(
    n_domains: u32,
    nv: &NvlinkParams,
    nic_link_Bps: f64,
    so: &ScaleOutParams,
) -> Result<Fabric> {
    positive("NIC host link_Bps", nic_link_Bps)?;
    if n_domains == 0 {
        return Err(Error::InvalidArgument(
            "n_domains must be >= 1, got 0".into(),
        ));
    }
    let n_gpus = nv.gpus_per_domain as u64 * n_domains as u64;
    if n_gpus > u32::MAX as u64 / 4 {
        return Err(Error::TooLarge(format!(
            "{n_gpus} GPUs exceed what fabricsim numbers"
        )));
    }
    Fabric::build(&FabricSpec {
        n_domains,
        domain: Some(nvlink_spec(nv)?),
        n_gpus_without_domain: 0,
        nic_link: Some((nic_link_Bps, 0.0)),
        scale_out: Some(scale_out_spec(n_gpus as u32, nv.gpus_per_domain, so)?),
        scale_out_mode: so.mode,
    })
}

/// A PCIe server: GPUs (and NICs) behind PCIe switches, the switches split evenly over the
/// CPU sockets, the sockets joined by one link. Routes are searched (the graph is a tree).
#[allow(clippy::too_many_arguments)]
pub fn pcie_server(
    n_gpus: u32,
    gpus_per_switch: u32,
    nics_per_switch: u32,
    n_cpus: u32,
    pcie_Bps: f64,
    nic_Bps: f64,
    cpu_link_Bps: f64,
    latency_s: f64,
) -> Result<Fabric> {
    positive("pcie_Bps", pcie_Bps)?;
    positive("cpu_link_Bps", cpu_link_Bps)?;
    crate::error::check_non_negative("latency_s", latency_s)?;
    if n_gpus == 0 || gpus_per_switch == 0 || n_cpus == 0 {
        return Err(Error::InvalidArgument(format!(
            "n_gpus, gpus_per_switch and n_cpus must be >= 1, got {n_gpus}, {gpus_per_switch} and {n_cpus}"
        )));
    }
    if nics_per_switch > 0 {
        positive("nic_Bps", nic_Bps)?;
    }
    let n_switches = n_gpus.div_ceil(gpus_per_switch);
    if n_switches % n_cpus != 0 {
        return Err(Error::InvalidArgument(format!(
            "{n_switches} PCIe switches cannot be split evenly over {n_cpus} CPUs"
        )));
    }
    // Counted wide: NICs per switch times switches can pass 2^32 (it wrapped to a fabric
    // with no NICs), and a server too large must be refused before its arrays are built.
    let n_nics = n_switches as u64 * nics_per_switch as u64;
    let n_cables = n_gpus as u64 + n_nics + n_switches as u64 + (n_cpus as u64 - 1);
    check_fabric_size(
        n_gpus as u64 + n_nics + n_switches as u64 + n_cpus as u64,
        2 * n_cables,
        0,
    )?;
    let n_nics = n_nics as u32;
    let mut kind = vec![NodeKind::Gpu; n_gpus as usize];
    kind.extend(std::iter::repeat_n(NodeKind::Nic, n_nics as usize));
    let switch_base = kind.len() as u32;
    kind.extend(std::iter::repeat_n(
        NodeKind::PcieSwitch,
        n_switches as usize,
    ));
    let cpu_base = kind.len() as u32;
    kind.extend(std::iter::repeat_n(NodeKind::Cpu, n_cpus as usize));
    let (mut src, mut dst, mut cap) = (Vec::new(), Vec::new(), Vec::new());
    let mut cable = |a: u32, b: u32, c: f64| {
        src.extend([a, b]);
        dst.extend([b, a]);
        cap.extend([c, c]);
    };
    for g in 0..n_gpus {
        cable(g, switch_base + g / gpus_per_switch, pcie_Bps);
    }
    for n in 0..n_nics {
        cable(
            n_gpus + n,
            switch_base + n / nics_per_switch,
            nic_Bps.min(pcie_Bps),
        );
    }
    let per_cpu = n_switches / n_cpus;
    for sw in 0..n_switches {
        cable(switch_base + sw, cpu_base + sw / per_cpu, pcie_Bps);
    }
    for c in 1..n_cpus {
        cable(cpu_base + c - 1, cpu_base + c, cpu_link_Bps);
    }
    let n_links = src.len();
    let topo = Topology::from_links(kind.len(), src, dst, cap, vec![latency_s; n_links])?;
    Ok(Fabric::generic_with_kinds(topo, kind, n_gpus, n_nics))
}
