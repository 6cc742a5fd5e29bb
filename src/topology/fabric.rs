//! Fabrics: a topology plus the structure it was generated from, so routes are computed
//! from positions (domain, plane, leaf, pod) instead of searched.
//!
//! Node layout: GPUs `0..n_gpus`, then one NIC per GPU (or the hosts of a bare Clos), then
//! every scale-up domain's switch chips, then the scale-out switches. Link layout: the
//! domains' links, then each GPU's link pair to its NIC, then the scale-out links.
//! Constraint ids: links first, then pooled bundles (domain bundles, then scale-out ones).

use std::sync::Arc;

use super::clos::{ClosParams, ClosShape, LinkClass};
use super::Topology;
use crate::error::{Error, Result};

/// What a node is; the names of its variants are what `describe` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NodeKind {
    Node = 0,
    Gpu = 1,
    Nic = 2,
    NvSwitch = 3,
    Leaf = 4,
    Spine = 5,
    Core = 6,
    PcieSwitch = 7,
    Cpu = 8,
}

impl NodeKind {
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Node => "node",
            NodeKind::Gpu => "gpu",
            NodeKind::Nic => "nic",
            NodeKind::NvSwitch => "nvswitch",
            NodeKind::Leaf => "leaf",
            NodeKind::Spine => "spine",
            NodeKind::Core => "core",
            NodeKind::PcieSwitch => "pcie_switch",
            NodeKind::Cpu => "cpu",
        }
    }
}

/// How flows cross a tier: pinned to one path by a hash, or spread evenly over every
/// equal-cost next hop (adaptive routing, packet spraying, NVLink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ecmp,
    Spray,
}

/// Per-link settings of one Clos instance.
#[derive(Debug, Clone)]
pub struct ClosLinks {
    /// Capacity of an endpoint link and of a switch-to-switch link (bytes/s per direction).
    pub endpoint_link_Bps: f64,
    pub fabric_link_Bps: f64,
    /// Latency of a link entering a switch, and of a link entering an endpoint.
    pub to_switch_latency_s: f64,
    pub to_endpoint_latency_s: f64,
}

/// The scale-up part: `n_domains` copies of one Clos whose endpoints are GPUs.
#[derive(Debug, Clone)]
pub struct Domains {
    pub shape: Arc<ClosShape>,
    pub n_domains: u32,
    pub node_base: u32,
    pub link_base: u32,
    pub bundle_base: u32,
    pub links: ClosLinks,
}

/// The scale-out part: one Clos whose endpoints are NICs (or a bare Clos's hosts).
#[derive(Debug, Clone)]
pub struct ScaleOut {
    pub shape: Arc<ClosShape>,
    pub endpoint_base: u32,
    pub node_base: u32,
    pub link_base: u32,
    pub bundle_base: u32,
    pub links: ClosLinks,
}

/// One placed Clos: where its endpoints, nodes, links and bundles start.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'f> {
    pub shape: &'f ClosShape,
    /// Some link of this placed Clos is not at its nominal capacity.
    pub faulty: bool,
    pub endpoint_base: u32,
    pub node_base: u32,
    pub link_base: u32,
    pub bundle_base: u32,
}

#[derive(Debug, Clone)]
pub struct Fabric {
    topology: Arc<Topology>,
    /// Link capacities after faults (None: the topology's own).
    link_capacity: Option<Arc<Vec<f64>>>,
    bundle_capacity: Arc<Vec<f64>>,
    /// Bundles whose members do not all carry their nominal capacity (routing checks them).
    has_faults: bool,
    /// Per placed Clos (the domains in order, then the scale-out), whether one of its links
    /// is not at its nominal capacity; empty without faults.
    faulty_placed: Arc<Vec<bool>>,
    kind: Arc<Vec<NodeKind>>,
    pub n_gpus: u32,
    /// NICs (or hosts) are nodes `n_gpus..n_gpus + n_nics`.
    pub n_nics: u32,
    /// GPU g's link to its NIC is `nic_link_base + 2g`, the way back `+ 1`.
    pub nic_link_base: u32,
    pub domains: Option<Domains>,
    pub scale_out: Option<ScaleOut>,
    /// Default routing of the scale-up and scale-out tiers.
    pub default_modes: [Mode; 2],
}

/// Everything a generator decides; `build` lays it out.
#[derive(Debug, Clone)]
pub struct FabricSpec {
    pub n_domains: u32,
    pub domain: Option<(ClosParams, ClosLinks)>,
    /// GPUs when there is no domain (a bare Clos has hosts instead: 0 GPUs).
    pub n_gpus_without_domain: u32,
    /// One NIC per GPU joined by a link of this capacity and latency.
    pub nic_link: Option<(f64, f64)>,
    pub scale_out: Option<(ClosParams, ClosLinks)>,
    pub scale_out_mode: Mode,
}

/// A fault's capacity factor: in [0, 1] (0 = down, 1 = nominal).
pub(crate) fn check_factor(factor: f64) -> Result<()> {
    if (0.0..=1.0).contains(&factor) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "capacity factor must be a number in [0, 1] (0 = down, 1 = full capacity), got {}",
        crate::error::shown(factor)
    )))
}

/// Refuses, before anything is allocated, a fabric of `n_nodes` nodes, `n_links` links and
/// `n_bundles` bundles (counted in u64, so that no product wraps) beyond the 2^32 ids
/// fabricsim numbers them with or the memory available.
pub(crate) fn check_fabric_size(n_nodes: u64, n_links: u64, n_bundles: u64) -> Result<()> {
    if n_nodes >= u32::MAX as u64 || n_links + n_bundles >= u32::MAX as u64 {
        return Err(Error::TooLarge(format!(
            "the fabric would have {n_nodes} nodes and {n_links} links plus {n_bundles} \
             bundles, beyond the 2^32 ids fabricsim numbers them with"
        )));
    }
    crate::memory::check_fits(
        &format!("a fabric of {n_nodes} nodes and {n_links} links"),
        // Link arrays, both adjacency rows, node kinds and bundle capacities.
        40.0 * n_links as f64 + 17.0 * n_nodes as f64 + 8.0 * n_bundles as f64,
    )
}

impl Fabric {
    /// A fabric with no structure: every route is searched on the graph.
    pub fn generic(topology: Topology) -> Fabric {
        let n = topology.n_nodes();
        Fabric {
            topology: Arc::new(topology),
            link_capacity: None,
            bundle_capacity: Arc::new(Vec::new()),
            has_faults: false,
            faulty_placed: Arc::new(Vec::new()),
            kind: Arc::new(vec![NodeKind::Node; n]),
            n_gpus: 0,
            n_nics: 0,
            nic_link_base: 0,
            domains: None,
            scale_out: None,
            default_modes: [Mode::Ecmp, Mode::Ecmp],
        }
    }

    /// A generic fabric whose nodes have kinds (e.g. a PCIe server): GPUs are nodes
    /// `0..n_gpus`, NICs the next `n_nics`.
    pub fn generic_with_kinds(
        topology: Topology,
        kind: Vec<NodeKind>,
        n_gpus: u32,
        n_nics: u32,
    ) -> Fabric {
        let mut f = Fabric::generic(topology);
        f.kind = Arc::new(kind);
        f.n_gpus = n_gpus;
        f.n_nics = n_nics;
        f
    }

    pub fn build(spec: &FabricSpec) -> Result<Fabric> {
        let domain_shape = match &spec.domain {
            Some((p, _)) => Some(Arc::new(ClosShape::new(p)?)),
            None => None,
        };
        let n_domains = if domain_shape.is_some() {
            spec.n_domains
        } else {
            0
        };
        let n_gpus: u64 = match &domain_shape {
            Some(s) => s.n_endpoints as u64 * n_domains as u64,
            None => spec.n_gpus_without_domain as u64,
        };
        let n_nics: u64 = match (&spec.nic_link, &spec.scale_out) {
            (Some(_), _) => n_gpus,
            (None, Some((p, _))) if n_gpus == 0 => p.n_endpoints as u64,
            (None, Some(_)) => {
                return Err(Error::InvalidArgument(
                    "a scale-out fabric over GPUs needs their NICs".into(),
                ))
            }
            (None, None) => 0,
        };
        let out_shape = match &spec.scale_out {
            Some((p, _)) => {
                if p.n_endpoints as u64 != n_nics {
                    return Err(Error::InvalidArgument(format!(
                        "the scale-out fabric has {} endpoints but there are {n_nics} NICs",
                        p.n_endpoints
                    )));
                }
                Some(Arc::new(ClosShape::new(p)?))
            }
            None => None,
        };
        // Sizes, checked against the 2^32 ids before anything is allocated.
        let dom_nodes = domain_shape.as_ref().map_or(0, |s| s.n_nodes() as u64) * n_domains as u64;
        let dom_links = domain_shape.as_ref().map_or(0, |s| s.n_links() as u64) * n_domains as u64;
        let dom_bundles =
            domain_shape.as_ref().map_or(0, |s| s.n_bundles() as u64) * n_domains as u64;
        let nic_links = if spec.nic_link.is_some() {
            2 * n_gpus
        } else {
            0
        };
        let out_nodes = out_shape.as_ref().map_or(0, |s| s.n_nodes() as u64);
        let out_links = out_shape.as_ref().map_or(0, |s| s.n_links() as u64);
        let out_bundles = out_shape.as_ref().map_or(0, |s| s.n_bundles() as u64);
        let n_nodes = n_gpus + n_nics + dom_nodes + out_nodes;
        let n_links = dom_links + nic_links + out_links;
        let n_bundles = dom_bundles + out_bundles;
        check_fabric_size(n_nodes, n_links, n_bundles)?;
        let n_links = n_links as usize;
        let mut src = Vec::with_capacity(n_links);
        let mut dst = Vec::with_capacity(n_links);
        let mut cap = Vec::with_capacity(n_links);
        let mut lat = Vec::with_capacity(n_links);
        let mut kind = vec![NodeKind::Gpu; n_gpus as usize];
        kind.resize((n_gpus + n_nics) as usize, NodeKind::Nic);

        let mut domains = None;
        if let (Some(shape), Some((_, links))) = (&domain_shape, &spec.domain) {
            let node_base = (n_gpus + n_nics) as u32;
            let per_nodes = shape.n_nodes();
            for d in 0..n_domains {
                let nb = node_base + d * per_nodes;
                let eb = d * shape.n_endpoints;
                push_clos(shape, links, eb, nb, &mut src, &mut dst, &mut cap, &mut lat);
            }
            for _ in 0..n_domains {
                push_kinds(shape, &mut kind, NodeKind::NvSwitch);
            }
            domains = Some(Domains {
                shape: Arc::clone(shape),
                n_domains,
                node_base,
                link_base: 0,
                bundle_base: 0,
                links: links.clone(),
            });
        }
        let nic_link_base = src.len() as u32;
        if let Some((nic_Bps, nic_latency_s)) = spec.nic_link {
            for g in 0..n_gpus as u32 {
                let nic = n_gpus as u32 + g;
                for (a, b) in [(g, nic), (nic, g)] {
                    src.push(a);
                    dst.push(b);
                    cap.push(nic_Bps);
                    lat.push(nic_latency_s);
                }
            }
        }
        let mut scale_out = None;
        if let (Some(shape), Some((_, links))) = (&out_shape, &spec.scale_out) {
            let node_base = kind.len() as u32;
            let link_base = src.len() as u32;
            let endpoint_base = n_gpus as u32;
            push_clos(
                shape,
                links,
                endpoint_base,
                node_base,
                &mut src,
                &mut dst,
                &mut cap,
                &mut lat,
            );
            push_kinds(shape, &mut kind, NodeKind::Leaf);
            scale_out = Some(ScaleOut {
                shape: Arc::clone(shape),
                endpoint_base,
                node_base,
                link_base,
                bundle_base: dom_bundles as u32,
                links: links.clone(),
            });
        }
        let topology = Topology::from_links(kind.len(), src, dst, cap, lat)?;
        let mut f = Fabric {
            topology: Arc::new(topology),
            link_capacity: None,
            bundle_capacity: Arc::new(Vec::new()),
            has_faults: false,
            faulty_placed: Arc::new(Vec::new()),
            kind: Arc::new(kind),
            n_gpus: n_gpus as u32,
            n_nics: n_nics as u32,
            nic_link_base,
            domains,
            scale_out,
            default_modes: [Mode::Spray, spec.scale_out_mode],
        };
        f.bundle_capacity = Arc::new(f.nominal_bundle_capacities());
        for b in 0..f.n_bundles() as u32 {
            f.check_bundle_capacity(b)?;
        }
        Ok(f)
    }

    /// A bundle's capacity, the sum of its members', is a capacity like any other
    /// (`units::MAX_CAPACITY_BPS`): members each within it can add up past it.
    fn check_bundle_capacity(&self, b: u32) -> Result<()> {
        let cap = self.bundle_capacity[b as usize];
        if cap <= crate::units::MAX_CAPACITY_BPS {
            return Ok(());
        }
        let (mut first, mut n) = (u32::MAX, 0usize);
        self.for_each_bundle_member(b, |l| {
            first = first.min(l);
            n += 1;
        });
        Err(crate::error::capacity_too_large(
            format_args!(
                "the capacity of bundle {b} (its {n} parallel links like link {first}, added up)"
            ),
            cap,
        ))
    }

    fn nominal_bundle_capacities(&self) -> Vec<f64> {
        let mut caps = Vec::with_capacity(self.n_bundles());
        if let Some(d) = &self.domains {
            let per = d.shape.n_bundles();
            for dom in 0..d.n_domains {
                for b in 0..per {
                    caps.push(self.bundle_sum(&self.domain(dom), b));
                }
            }
        }
        if let Some(o) = &self.scale_out {
            let placed = self.scale_out_placed(o);
            for b in 0..o.shape.n_bundles() {
                caps.push(self.bundle_sum(&placed, b));
            }
        }
        caps
    }

    fn bundle_sum(&self, p: &Placed, b: u32) -> f64 {
        let caps = self.link_capacity_Bps();
        let mut sum = 0.0;
        p.shape
            .for_each_member(b, |l| sum += caps[(p.link_base + l) as usize]);
        sum
    }

    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// Link capacities in force (faults applied), bytes/s.
    pub fn link_capacity_Bps(&self) -> &[f64] {
        match &self.link_capacity {
            Some(c) => c,
            None => self.topology.capacity_Bps(),
        }
    }

    pub fn bundle_capacity_Bps(&self) -> &[f64] {
        &self.bundle_capacity
    }

    pub fn n_links(&self) -> usize {
        self.topology.n_links()
    }

    pub fn n_bundles(&self) -> usize {
        let d = self
            .domains
            .as_ref()
            .map_or(0, |d| d.shape.n_bundles() as usize * d.n_domains as usize);
        d + self
            .scale_out
            .as_ref()
            .map_or(0, |o| o.shape.n_bundles() as usize)
    }

    pub fn n_constraints(&self) -> usize {
        self.n_links() + self.n_bundles()
    }

    /// Capacity of constraint `c` (a link, then the bundles).
    pub fn constraint_capacity_Bps(&self, c: u32) -> f64 {
        let n = self.n_links();
        if (c as usize) < n {
            self.link_capacity_Bps()[c as usize]
        } else {
            self.bundle_capacity[c as usize - n]
        }
    }

    pub fn has_faults(&self) -> bool {
        self.has_faults
    }

    pub fn kind(&self, node: u32) -> NodeKind {
        self.kind[node as usize]
    }

    pub fn kinds(&self) -> &[NodeKind] {
        &self.kind
    }

    pub fn domain(&self, d: u32) -> Placed<'_> {
        let dm = self.domains.as_ref().expect("a fabric with domains");
        Placed {
            shape: &dm.shape,
            faulty: self.faulty_placed.get(d as usize) == Some(&true),
            endpoint_base: d * dm.shape.n_endpoints,
            node_base: dm.node_base + d * dm.shape.n_nodes(),
            link_base: dm.link_base + d * dm.shape.n_links(),
            bundle_base: dm.bundle_base + d * dm.shape.n_bundles(),
        }
    }

    fn scale_out_placed<'f>(&'f self, o: &'f ScaleOut) -> Placed<'f> {
        let index = self.domains.as_ref().map_or(0, |d| d.n_domains) as usize;
        Placed {
            shape: &o.shape,
            faulty: self.faulty_placed.get(index) == Some(&true),
            endpoint_base: o.endpoint_base,
            node_base: o.node_base,
            link_base: o.link_base,
            bundle_base: o.bundle_base,
        }
    }

    pub fn scale_out_placed_opt(&self) -> Option<Placed<'_>> {
        self.scale_out.as_ref().map(|o| self.scale_out_placed(o))
    }

    /// Which domain a GPU belongs to and its index there.
    pub fn gpu_domain(&self, gpu: u32) -> Option<(u32, u32)> {
        let d = self.domains.as_ref()?;
        (gpu < self.n_gpus).then(|| (gpu / d.shape.n_endpoints, gpu % d.shape.n_endpoints))
    }

    /// A copy with the given links' capacities multiplied by `factor`, in [0, 1] (0 = down,
    /// 1 = nominal); bundles lose what their members lose. A fault takes capacity away or
    /// gives it back: more than nominal would be a faster link, and could pass
    /// `units::MAX_CAPACITY_BPS` (a factor of 8 gave links a peak utilization of 8).
    pub fn with_link_factors(&self, links: &[u32], factor: f64) -> Result<Fabric> {
        check_factor(factor)?;
        let mut caps = self.link_capacity_Bps().to_vec();
        let nominal = self.topology.capacity_Bps();
        for &l in links {
            self.topology.link(l as i64)?;
            caps[l as usize] = nominal[l as usize] * factor;
        }
        let mut f = self.clone();
        f.link_capacity = Some(Arc::new(caps));
        let (mut has_faults, mut faulty_placed) = (false, Vec::new());
        for (l, (c, n)) in f.link_capacity_Bps().iter().zip(nominal).enumerate() {
            if c != n {
                has_faults = true;
                if let Some(i) = f.placed_of_link(l as u32) {
                    faulty_placed.resize(faulty_placed.len().max(i + 1), false);
                    faulty_placed[i] = true;
                }
            }
        }
        f.has_faults = has_faults;
        f.faulty_placed = Arc::new(faulty_placed);
        // Each bundle a link of `links` is in, summed once from its members: a bundle whose
        // members all fail sums to 0, so 0 cannot mark "not summed yet" (that re-summed it
        // once per member, members^2 for a whole plane).
        let mut bundles = (*self.bundle_capacity).clone();
        let mut touched: Vec<u32> = links.iter().filter_map(|&l| f.bundle_of_link(l)).collect();
        touched.sort_unstable();
        touched.dedup();
        for b in touched {
            let (placed, local) = f.placed_bundle(b);
            bundles[b as usize] = f.bundle_sum(&placed, local);
        }
        f.bundle_capacity = Arc::new(bundles);
        Ok(f)
    }

    /// This fabric with every link back at its nominal capacity.
    pub fn without_faults(&self) -> Result<Fabric> {
        let nominal = self.topology.capacity_Bps();
        let faulted: Vec<u32> = (0..self.n_links() as u32)
            .filter(|&l| self.link_capacity_Bps()[l as usize] != nominal[l as usize])
            .collect();
        let mut f = self.with_link_factors(&faulted, 1.0)?;
        f.link_capacity = None;
        Ok(f)
    }

    /// The placed Clos a link belongs to, if any: domain d is d, the scale-out comes next.
    fn placed_of_link(&self, link: u32) -> Option<usize> {
        let n_domains = self.domains.as_ref().map_or(0, |d| d.n_domains);
        if let Some(d) = &self.domains {
            let per = d.shape.n_links();
            if link >= d.link_base && link < d.link_base + per * d.n_domains {
                return Some(((link - d.link_base) / per) as usize);
            }
        }
        match &self.scale_out {
            Some(o) if link >= o.link_base && link < o.link_base + o.shape.n_links() => {
                Some(n_domains as usize)
            }
            _ => None,
        }
    }

    /// The bundle (global index) a link belongs to, if any.
    pub fn bundle_of_link(&self, link: u32) -> Option<u32> {
        if let Some(d) = &self.domains {
            let per = d.shape.n_links();
            if link < d.link_base + per * d.n_domains {
                let dom = (link - d.link_base) / per;
                let local = d.shape.bundle_of_link((link - d.link_base) % per)?;
                return Some(d.bundle_base + dom * d.shape.n_bundles() + local);
            }
        }
        if let Some(o) = &self.scale_out {
            if link >= o.link_base {
                return o
                    .shape
                    .bundle_of_link(link - o.link_base)
                    .map(|b| o.bundle_base + b);
            }
        }
        None
    }

    /// The placed Clos a global bundle index lives in, and its index there.
    pub fn placed_bundle(&self, b: u32) -> (Placed<'_>, u32) {
        if let Some(d) = &self.domains {
            let per = d.shape.n_bundles();
            if per > 0 && b < d.bundle_base + per * d.n_domains {
                let dom = (b - d.bundle_base) / per;
                return (self.domain(dom), (b - d.bundle_base) % per);
            }
        }
        let o = self
            .scale_out
            .as_ref()
            .expect("a bundle outside the domains is scale-out");
        (self.scale_out_placed(o), b - o.bundle_base)
    }

    /// Calls `f` with every member link (global id) of global bundle `b`.
    pub fn for_each_bundle_member(&self, b: u32, mut f: impl FnMut(u32)) {
        let (placed, local) = self.placed_bundle(b);
        placed
            .shape
            .for_each_member(local, |l| f(placed.link_base + l));
    }

    /// Whether `is(link)` holds for a link constraint `c` stands for: itself, or a member of
    /// the bundle it is.
    pub fn any_link_of(&self, c: u32, mut is: impl FnMut(u32) -> bool) -> bool {
        let n = self.n_links() as u32;
        if c < n {
            return is(c);
        }
        let mut any = false;
        self.for_each_bundle_member(c - n, |l| any = any || is(l));
        any
    }

    /// A readable name: `gpu12`, `nic12`, `d3.nvswitch4`, `p1.leaf7`, `spine2`, `core9`.
    pub fn node_name(&self, node: u32) -> String {
        let k = self
            .kind
            .get(node as usize)
            .copied()
            .unwrap_or(NodeKind::Node);
        match k {
            NodeKind::Gpu => return format!("gpu{node}"),
            NodeKind::Nic if self.n_gpus > 0 => return format!("nic{}", node - self.n_gpus),
            NodeKind::Nic => return format!("host{node}"),
            _ => {}
        }
        if let Some(d) = &self.domains {
            let per = d.shape.n_nodes();
            if node >= d.node_base && node < d.node_base + per * d.n_domains {
                let (dom, local) = ((node - d.node_base) / per, (node - d.node_base) % per);
                return format!("d{dom}.{}", clos_node_name(&d.shape, local, "nvswitch"));
            }
        }
        if let Some(o) = &self.scale_out {
            if node >= o.node_base {
                return clos_node_name(&o.shape, node - o.node_base, "leaf");
            }
        }
        format!("{}{node}", k.name())
    }
}

impl Fabric {
    /// Every node's name (`node_name`) as the buffers of an Arrow string array: `n_nodes + 1`
    /// offsets and the UTF-8 bytes they index (fewer than 2^31: a name is some 12 bytes and a
    /// fabric has fewer than 2^32 nodes, so only a fabric far beyond the memory has more).
    pub fn node_names_utf8(&self) -> Result<(Vec<i32>, Vec<u8>)> {
        let n = self.topology.n_nodes();
        let mut offsets = Vec::with_capacity(n + 1);
        let mut bytes = Vec::with_capacity(n * 8);
        offsets.push(0i32);
        for node in 0..n as u32 {
            bytes.extend_from_slice(self.node_name(node).as_bytes());
            let end = i32::try_from(bytes.len()).map_err(|_| {
                Error::TooLarge(format!(
                    "the names of {n} nodes pass the 2 GiB of text an Arrow string column holds"
                ))
            })?;
            offsets.push(end);
        }
        Ok((offsets, bytes))
    }
}

fn clos_node_name(s: &ClosShape, local: u32, leaf_word: &str) -> String {
    let per = s.nodes_per_plane();
    let (plane, i) = (local / per, local % per);
    let prefix = if s.planes > 1 {
        format!("p{plane}.")
    } else {
        String::new()
    };
    if s.tiers == 1 {
        // One switch chip per plane: name it by its plane alone.
        return format!("{leaf_word}{plane}");
    }
    if i < s.n_leaves {
        format!("{prefix}{leaf_word}{i}")
    } else if i < s.n_leaves + s.n_spines {
        format!("{prefix}spine{}", i - s.n_leaves)
    } else {
        format!("{prefix}core{}", i - s.n_leaves - s.n_spines)
    }
}

fn push_kinds(shape: &ClosShape, kind: &mut Vec<NodeKind>, first_tier: NodeKind) {
    for _ in 0..shape.planes {
        let leaf = first_tier;
        let (spine, core) = if first_tier == NodeKind::NvSwitch {
            (NodeKind::NvSwitch, NodeKind::NvSwitch)
        } else {
            (NodeKind::Spine, NodeKind::Core)
        };
        kind.extend(std::iter::repeat_n(leaf, shape.n_leaves as usize));
        kind.extend(std::iter::repeat_n(spine, shape.n_spines as usize));
        kind.extend(std::iter::repeat_n(core, shape.n_cores as usize));
    }
}

#[allow(clippy::too_many_arguments)]
fn push_clos(
    shape: &ClosShape,
    links: &ClosLinks,
    endpoint_base: u32,
    node_base: u32,
    src: &mut Vec<u32>,
    dst: &mut Vec<u32>,
    cap: &mut Vec<f64>,
    lat: &mut Vec<f64>,
) {
    shape.for_each_link(|a, b, class| {
        let (s, d) = match class {
            LinkClass::EndpointUp => (endpoint_base + a, node_base + b),
            LinkClass::EndpointDown => (node_base + a, endpoint_base + b),
            _ => (node_base + a, node_base + b),
        };
        src.push(s);
        dst.push(d);
        let endpoint = matches!(class, LinkClass::EndpointUp | LinkClass::EndpointDown);
        cap.push(if endpoint {
            links.endpoint_link_Bps
        } else {
            links.fabric_link_Bps
        });
        lat.push(if class == LinkClass::EndpointDown {
            links.to_endpoint_latency_s
        } else {
            links.to_switch_latency_s
        });
    });
}
