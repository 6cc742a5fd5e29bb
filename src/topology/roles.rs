//! What each link of a fabric is, read off the layout of `fabric.rs` and `clos.rs` (never
//! searched): its kind (NVLink, PCIe, scale-out network or a plain link), its tier (the two
//! levels it joins, named as the nodes are: `gpu-nvswitch`, `gpu-nic`, `nic-leaf`,
//! `leaf-spine`, `spine-core`), its direction (up, towards the core, or down), and the plane,
//! rail and NVLink domain it belongs to where it has one. This is what lets a user name "a
//! leaf-to-spine link of plane 0" instead of a link id.

use super::clos::{ClosShape, LinkClass};
use super::fabric::{Fabric, NodeKind, Placed};

/// Kinds of link, in code order (`LinkRoles::kind` indexes this).
pub const KIND_NAMES: [&str; 4] = ["link", "scale_up", "pcie", "scale_out"];
const LINK: u8 = 0;
const SCALE_UP: u8 = 1;
const PCIE: u8 = 2;
const SCALE_OUT: u8 = 3;

/// Directions, in code order (`LinkRoles::direction` indexes this; -1 for none).
pub const DIRECTION_NAMES: [&str; 2] = ["up", "down"];

/// One entry per link; -1 where a link has no such role (a plain topology's links have none
/// but their kind).
#[derive(Debug, Clone, Default)]
pub struct LinkRoles {
    pub kind: Vec<u8>,
    /// Index into `tier_names`, or -1.
    pub tier: Vec<i32>,
    pub tier_names: Vec<String>,
    pub direction: Vec<i32>,
    pub plane: Vec<i64>,
    pub rail: Vec<i64>,
    pub domain: Vec<i64>,
}

impl LinkRoles {
    fn with_capacity(n: usize) -> LinkRoles {
        LinkRoles {
            kind: Vec::with_capacity(n),
            tier: Vec::with_capacity(n),
            tier_names: Vec::new(),
            direction: Vec::with_capacity(n),
            plane: Vec::with_capacity(n),
            rail: Vec::with_capacity(n),
            domain: Vec::with_capacity(n),
        }
    }

    /// The index of a tier name, added on first use (tiers are few: a dictionary).
    fn tier_code(&mut self, name: &str) -> i32 {
        match self.tier_names.iter().position(|t| t == name) {
            Some(i) => i as i32,
            None => {
                self.tier_names.push(name.to_string());
                (self.tier_names.len() - 1) as i32
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, kind: u8, tier: i32, up: Option<bool>, plane: i64, rail: i64, domain: i64) {
        self.kind.push(kind);
        self.tier.push(tier);
        self.direction.push(match up {
            Some(true) => 0,
            Some(false) => 1,
            None => -1,
        });
        self.plane.push(plane);
        self.rail.push(rail);
        self.domain.push(domain);
    }
}

/// Every link of a placed Clos in link order. Its tiers are named after the words its
/// nodes' names use (`Fabric::node_name`): `<endpoint>-<leaf>`, `<leaf>-spine`, `spine-core`;
/// `rail_of(shape, class, plane, position)` gives a link's rail (or -1). The layout is walked
/// block by block (`clos.rs`: per plane, endpoint, leaf-spine and spine-core links, each
/// position an up and a down link), with no search per link.
fn push_clos(
    roles: &mut LinkRoles,
    p: &Placed<'_>,
    kind: u8,
    [endpoint, leaf]: [&str; 2],
    domain: i64,
    rail_of: impl Fn(&ClosShape, LinkClass, u32, u32) -> i64,
) {
    let s = p.shape;
    let names = [
        format!("{endpoint}-{leaf}"),
        format!("{leaf}-spine"),
        "spine-core".to_string(),
    ];
    let classes = [LinkClass::EndpointUp, LinkClass::LeafUp, LinkClass::SpineUp];
    let mut tiers = [-1i32; 3]; // named on first use, so the dictionary holds only tiers present
    for plane in 0..s.planes {
        let end = if plane + 1 < s.planes {
            s.endpoint_link(plane + 1, 0, 0, false)
        } else {
            s.n_links()
        };
        let bounds = [
            s.endpoint_link(plane, 0, 0, false),
            s.leaf_spine_link(plane, 0, 0, false),
            s.spine_core_link(plane, 0, 0, false),
            end,
        ];
        for t in 0..3 {
            let (lo, hi) = (bounds[t], bounds[t + 1]);
            if lo >= hi {
                continue;
            }
            if tiers[t] < 0 {
                tiers[t] = roles.tier_code(&names[t]);
            }
            for l in lo..hi {
                let (pos, up) = ((l - lo) / 2, (l - lo) % 2 == 0);
                let rail = rail_of(s, classes[t], plane, pos);
                roles.push(kind, tiers[t], Some(up), plane as i64, rail, domain);
            }
        }
    }
}

/// The rail of a scale-out link: an endpoint's (its index in its group, a GPU's index in its
/// domain), and a leaf's where it serves one rail alone; -1 where the Clos has one rail (a
/// bare Clos of hosts) or the link serves many (spines and cores, shared leaves).
fn scale_out_rail(s: &ClosShape, class: LinkClass, plane: u32, pos: u32) -> i64 {
    if s.rails <= 1 {
        return -1;
    }
    match class {
        LinkClass::EndpointUp => {
            let e = pos / s.endpoint_links[plane as usize];
            (e % s.rails) as i64
        }
        LinkClass::LeafUp if s.rails_per_leaf == 1 && s.tiers >= 2 => {
            let leaf = pos / s.leaf_up;
            (leaf % s.leaves_per_block) as i64
        }
        _ => -1,
    }
}

/// Where a node kind sits between endpoints and the core, for the links of a fabric without
/// a Clos structure (a PCIe server): a link from a lower level to a higher one goes up.
fn level(k: NodeKind) -> u8 {
    match k {
        NodeKind::Gpu | NodeKind::Nic | NodeKind::Node => 0,
        NodeKind::NvSwitch | NodeKind::Leaf | NodeKind::PcieSwitch => 1,
        NodeKind::Spine | NodeKind::Cpu => 2,
        NodeKind::Core => 3,
    }
}

impl Fabric {
    /// The role of every link, in link order (see the module docs).
    pub fn link_roles(&self) -> LinkRoles {
        let mut roles = LinkRoles::with_capacity(self.n_links());
        if self.domains.is_none() && self.scale_out.is_none() {
            self.push_generic(&mut roles);
            return roles;
        }
        if let Some(d) = &self.domains {
            for dom in 0..d.n_domains {
                let words = ["gpu", "nvswitch"];
                push_clos(
                    &mut roles,
                    &self.domain(dom),
                    SCALE_UP,
                    words,
                    dom as i64,
                    |_, _, _, _| -1,
                );
            }
        }
        let out = self.scale_out_placed_opt();
        // A structured fabric with GPUs and NICs joins each GPU to its NIC (fabric.rs's layout).
        if self.n_gpus > 0 && self.n_nics > 0 {
            debug_assert_eq!(roles.kind.len(), self.nic_link_base as usize);
            let tier = roles.tier_code("gpu-nic");
            let rails = out.map_or(1, |p| p.shape.rails);
            for g in 0..self.n_gpus {
                let domain = self.gpu_domain(g).map_or(-1, |(d, _)| d as i64);
                let rail = if rails > 1 { (g % rails) as i64 } else { -1 };
                roles.push(PCIE, tier, Some(true), -1, rail, domain);
                roles.push(PCIE, tier, Some(false), -1, rail, domain);
            }
        }
        if let Some(p) = out {
            let endpoint = if self.n_gpus > 0 { "nic" } else { "host" };
            push_clos(
                &mut roles,
                &p,
                SCALE_OUT,
                [endpoint, "leaf"],
                -1,
                scale_out_rail,
            );
        }
        debug_assert_eq!(roles.kind.len(), self.n_links());
        roles
    }

    /// Roles from node kinds alone: a plain topology's links are plain links; a PCIe
    /// server's are PCIe links named by the kinds they join, going up towards the CPUs.
    fn push_generic(&self, roles: &mut LinkRoles) {
        let t = self.topology();
        let kinds = self.kinds();
        for (&a, &b) in t.link_src().iter().zip(t.link_dst()) {
            let (ka, kb) = (kinds[a as usize], kinds[b as usize]);
            if ka == NodeKind::Node || kb == NodeKind::Node {
                roles.push(LINK, -1, None, -1, -1, -1);
                continue;
            }
            let (la, lb) = (level(ka), level(kb));
            let (low, high) = if (la, ka.name()) <= (lb, kb.name()) {
                (ka, kb)
            } else {
                (kb, ka)
            };
            let tier = roles.tier_code(&format!("{}-{}", low.name(), high.name()));
            let up = (la != lb).then_some(la < lb);
            roles.push(PCIE, tier, up, -1, -1, -1);
        }
    }
}
