//! Multi-plane Clos shapes whose nodes, links and bundles are laid out arithmetically, so
//! routing reads positions off the structure and needs no per-pair tables.
//!
//! One shape describes an NVSwitch domain (tier 1: one switch chip per plane, every endpoint
//! wired to it, as in HGX and NVL72), an NVLink domain spread over racks (tier 2), or a
//! rail-optimised scale-out fat-tree (one switch per plane where the endpoints fit its ports,
//! else tiers 2 and 3; any number of planes).
//!
//! *Placement.* Endpoint `e` belongs to group `D = e / rails` at rail `i = e % rails`
//! (rail-optimised: NIC i of every domain on the same leaf). A leaf takes `endpoints_per_leaf`
//! endpoints of a rail. When a rail has at least that many (one per group), every rail has
//! leaves of its own: leaf `(D / endpoints_per_leaf) * rails + i` (with `rails = 1`, plain
//! consecutive filling). When it has fewer, consecutive rails share a leaf instead of each
//! taking a near-empty one: leaf `i / rails_per_leaf`, where `rails_per_leaf` is the fewest
//! rails per leaf that keeps the fewest leaves, `ceil(rails / floor(endpoints_per_leaf /
//! groups))`; the leaves are then as even as blocks of consecutive rails allow, the last one
//! taking the rails that remain (72 rails of 3 endpoints on 32-endpoint leaves: 10 would fit,
//! so 8 leaves of 9 rails; 8 rails of 9: 3 fit, rails 0-2, 3-5 and 6-7). One form covers
//! both: leaf `(D / endpoints_per_leaf) * leaves_per_block + i / rails_per_leaf`, a block
//! being `endpoints_per_leaf` consecutive groups on `leaves_per_block` leaves.
//!
//! *Oversubscription* is the down:up capacity ratio of a tier's fullest switch, as built (the
//! leaf tier, and in three tiers the spine tier too). The port split `floor(radix / (1 + r))`
//! up, `r` times that down, bounds a switch's down ports, and placement fills them with whole
//! rails (and whole blocks); the up ports are then the fewest that hold the down ports the
//! fullest switch of the tier really uses at the ratio asked, `ceil(used / r)` (never more than
//! the split's). One rule for every ratio, 1:1 included: a 1:1 leaf holding 24 endpoints has 24
//! up ports, not half its radix. Full leaves and pods (every DGX SuperPOD reference
//! configuration) keep the split's up ports. All switches of a tier have the same up ports, so
//! a switch holding fewer endpoints (the last leaf when rails do not share leaves evenly, the
//! leaves of a partial last block, the spines of a partial last pod) is less oversubscribed than
//! the ratio asked; the fullest is at it, within the rounding up of its up ports.
//!
//! *Wiring, per plane.* Endpoint to leaf: `endpoint_links[p]` parallel links. Tier 2: every
//! leaf to every spine with `leaf_spine_width` parallel links. Tier 3: pods of
//! `leaves_per_pod` leaves and `leaf_up` spines, each leaf one link to each spine of its pod;
//! spine `j` of every pod joins the `cores_per_group` cores of core group `j` with
//! `spine_core_width` parallel links each (the sizing that reproduces the DGX SuperPOD
//! reference tables).
//!
//! *Layout.* Per plane: leaves, spines, cores; links in blocks endpoint-leaf, leaf-spine,
//! spine-core, each position as an (up, down) pair, so a switch's candidate next hops are in
//! link-id order. Per-hop ECMP therefore picks exactly what the generic shortest-path router
//! would pick on the same graph.
//!
//! *Bundles* (pooled constraints for even spreading, DESIGN section 3): each endpoint's
//! uplinks and downlinks over all planes, each leaf's uplinks and downlinks, each pod's
//! links to and from the cores. Every link belongs to at most one bundle.

use crate::error::{shown, Error, Result};

/// Sizes of a Clos, before layout.
#[derive(Debug, Clone)]
pub struct ClosParams {
    pub n_endpoints: u32,
    /// Endpoints per group (a scale-up domain's NICs); rail i of every group shares leaves.
    pub rails: u32,
    /// Parallel endpoint-to-leaf links in each plane; its length is the number of planes.
    pub endpoint_links: Vec<u32>,
    /// 1 (a single switch per plane), 2 or 3.
    pub tiers: u32,
    /// Ports per switch, counted at the plane's link rate.
    pub radix: u32,
    /// Down:up capacity ratio of the fullest leaf and of the fullest spine (see the module docs).
    pub oversubscription: [f64; 2],
}

#[derive(Debug, Clone)]
pub struct ClosShape {
    pub n_endpoints: u32,
    pub rails: u32,
    pub planes: u32,
    pub endpoint_links: Vec<u32>,
    pub tiers: u32,
    pub radix: u32,
    /// Endpoints of one rail a leaf takes (its down ports over the links of an endpoint).
    pub endpoints_per_leaf: u32,
    /// Consecutive rails sharing a leaf: 1 unless a rail leaves a leaf's ports unused.
    pub rails_per_leaf: u32,
    /// Leaves of a block of `endpoints_per_leaf` consecutive groups: `rails / rails_per_leaf`
    /// rounded up.
    pub leaves_per_block: u32,
    pub n_leaves: u32,
    /// Down ports in use on the fullest leaf (leaf 0): its endpoints times their links
    /// (tiers 2 and 3; 0 in one tier).
    pub leaf_down: u32,
    pub leaf_up: u32,
    pub n_spines: u32,
    pub leaf_spine_width: u32,
    pub leaves_per_pod: u32,
    pub n_pods: u32,
    /// Down ports in use on the fullest spine: tier 3, the leaves of pod 0; tier 2, every
    /// leaf's links to one spine (0 in one tier).
    pub spine_down: u32,
    pub spine_up: u32,
    pub cores_per_group: u32,
    pub spine_core_width: u32,
    pub n_cores: u32,
    /// First link of each plane's block, relative to the instance; the last entry is the total.
    plane_link_base: Vec<u32>,
    /// Endpoint bundles exist when an endpoint has more than one uplink.
    endpoint_bundles: bool,
}

/// The smallest divisor of `n` that is at least `at_least` (n itself if none is smaller).
fn smallest_divisor_at_least(n: u32, at_least: u32) -> u32 {
    (at_least.max(1)..=n).find(|d| n % d == 0).unwrap_or(n)
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// The fewest up ports that carry `used` down ports at a down:up `ratio` (at least one).
fn up_ports_for(used: u32, ratio: f64) -> u32 {
    // The tolerance keeps an exact quotient (42 / 3, 32 / 1.6) from rounding up a port.
    ((used as f64 / ratio - 1e-9).ceil() as u32).max(1)
}

/// The most up ports and down ports of a switch of `radix` ports at a down:up ratio.
fn split_ports(radix: u32, oversubscription: f64, tier: &str) -> Result<(u32, u32)> {
    if !(oversubscription.is_finite() && oversubscription >= 1.0) {
        return Err(bad(format!(
            "oversubscription of the {tier} tier must be a finite ratio >= 1 (down:up), got {}",
            shown(oversubscription)
        )));
    }
    let up = (radix as f64 / (1.0 + oversubscription)).floor() as u32;
    let down = (up as f64 * oversubscription + 1e-9).floor() as u32;
    if up == 0 || down == 0 {
        return Err(bad(format!(
            "a {radix}-port {tier} switch at {}:1 has no {} ports left",
            shown(oversubscription),
            if up == 0 { "up" } else { "down" }
        )));
    }
    Ok((up, down))
}

impl ClosShape {
    pub fn new(p: &ClosParams) -> Result<ClosShape> {
        let planes = p.endpoint_links.len() as u32;
        if planes == 0 {
            return Err(bad("a Clos needs at least one plane".into()));
        }
        if p.n_endpoints == 0 {
            return Err(bad("a Clos needs at least one endpoint".into()));
        }
        if p.rails == 0 {
            return Err(bad("rails must be >= 1, got 0".into()));
        }
        if p.radix < 2 {
            return Err(bad(format!(
                "switch radix must be >= 2 ports, got {}",
                p.radix
            )));
        }
        if let Some(&m) = p.endpoint_links.iter().find(|&&m| m == 0) {
            return Err(bad(format!(
                "links per endpoint and plane must be >= 1, got {m}"
            )));
        }
        let e = p.n_endpoints;
        let mut s = ClosShape {
            n_endpoints: e,
            rails: p.rails,
            planes,
            endpoint_links: p.endpoint_links.clone(),
            tiers: p.tiers,
            radix: p.radix,
            endpoints_per_leaf: e,
            rails_per_leaf: 1,
            leaves_per_block: 1,
            n_leaves: 1,
            leaf_down: 0,
            leaf_up: 0,
            n_spines: 0,
            leaf_spine_width: 0,
            leaves_per_pod: 1,
            n_pods: 1,
            spine_down: 0,
            spine_up: 0,
            cores_per_group: 0,
            spine_core_width: 0,
            n_cores: 0,
            plane_link_base: Vec::new(),
            endpoint_bundles: p.endpoint_links.iter().sum::<u32>() > 1,
        };
        let widest = *p.endpoint_links.iter().max().unwrap();
        match p.tiers {
            1 => {
                if let Some((plane, &m)) = p
                    .endpoint_links
                    .iter()
                    .enumerate()
                    .find(|(_, &m)| m as u64 * e as u64 > p.radix as u64)
                {
                    return Err(bad(format!(
                        "a single {}-port switch cannot take {e} endpoints with {m} links each \
                         (plane {plane}): use more tiers",
                        p.radix
                    )));
                }
            }
            2 | 3 => {
                if p.endpoint_links.iter().any(|&m| m != widest) {
                    return Err(bad(
                        "multi-tier Clos planes need the same number of links per endpoint".into(),
                    ));
                }
                let (most_up, down) = split_ports(p.radix, p.oversubscription[0], "leaf")?;
                s.endpoints_per_leaf = down / widest;
                if s.endpoints_per_leaf == 0 {
                    return Err(bad(format!(
                        "a leaf with {down} down ports cannot take an endpoint with {widest} links"
                    )));
                }
                let n_groups = e.div_ceil(p.rails);
                let epl = s.endpoints_per_leaf;
                // Rails that fit on one leaf when a rail does not fill it (else 1).
                let fit = if n_groups < epl { epl / n_groups } else { 1 };
                s.leaves_per_block = p.rails.div_ceil(fit);
                s.rails_per_leaf = p.rails.div_ceil(s.leaves_per_block);
                let blocks = n_groups.div_ceil(epl);
                s.n_leaves = blocks.checked_mul(s.leaves_per_block).ok_or_else(|| {
                    Error::TooLarge(format!("{e} endpoints need too many leaves"))
                })?;
                s.leaf_down = s.fullest_leaf_endpoints() * widest;
                let up = up_ports_for(s.leaf_down, p.oversubscription[0]).min(most_up);
                s.leaf_up = up;
                if p.tiers == 2 {
                    // Fewest spines whose ports take every leaf uplink, dividing the uplinks evenly.
                    let need = (s.n_leaves as u64 * up as u64).div_ceil(p.radix as u64);
                    let spines = smallest_divisor_at_least(up, need.min(up as u64) as u32);
                    let width = up / spines;
                    // Each leaf needs a port on every spine: with the fewest spines above,
                    // this fails exactly when there are more leaves than a spine has ports.
                    if s.n_leaves as u64 * width as u64 > p.radix as u64 {
                        let (how, most) = match (p.rails, s.rails_per_leaf) {
                            (1, _) => (
                                format!("{epl} endpoints to a leaf"),
                                format!(" ({} endpoints)", p.radix as u64 * epl as u64),
                            ),
                            (r, 1) => (
                                format!("{r} rails of {n_groups} endpoints, {epl} of one rail to a leaf"),
                                String::new(),
                            ),
                            (r, k) => (
                                format!("{r} rails of {n_groups} endpoints, {k} rails to a leaf"),
                                String::new(),
                            ),
                        };
                        return Err(bad(format!(
                            "{e} endpoints need {} leaves ({how}), more than the {} leaves{most} \
                             a two-tier Clos of {}-port switches holds: use tiers=3 or more planes",
                            s.n_leaves, p.radix, p.radix
                        )));
                    }
                    s.n_spines = spines;
                    s.leaf_spine_width = width;
                    s.spine_down = s.n_leaves * width;
                } else {
                    let (most_spine_up, spine_down) =
                        split_ports(p.radix, p.oversubscription[1], "spine")?;
                    s.leaf_spine_width = 1;
                    s.leaves_per_pod = spine_down;
                    s.n_pods = s.n_leaves.div_ceil(spine_down);
                    s.n_spines = s.n_pods * up;
                    // Pod 0 is the fullest: every pod but the last is full.
                    s.spine_down = s.n_leaves.min(spine_down);
                    let spine_up =
                        up_ports_for(s.spine_down, p.oversubscription[1]).min(most_spine_up);
                    s.spine_up = spine_up;
                    let need = (s.n_pods as u64 * spine_up as u64).div_ceil(p.radix as u64);
                    let cores =
                        smallest_divisor_at_least(spine_up, need.min(spine_up as u64) as u32);
                    s.cores_per_group = cores;
                    s.spine_core_width = spine_up / cores;
                    if s.n_pods as u64 * s.spine_core_width as u64 > p.radix as u64 {
                        return Err(bad(format!(
                            "{e} endpoints need {} pods, more than a three-tier Clos of {}-port \
                             switches holds: use more planes or a higher-radix switch",
                            s.n_pods, p.radix
                        )));
                    }
                    s.n_cores = up * cores;
                }
            }
            t => return Err(bad(format!("tiers must be 1, 2 or 3, got {t}"))),
        }
        let mut base = 0u64;
        for plane in 0..planes {
            s.plane_link_base.push(base as u32);
            base += s.links_in_plane(plane);
        }
        if base > u32::MAX as u64 / 2 {
            return Err(Error::TooLarge(format!(
                "a Clos of {e} endpoints would have {base} links, beyond the 2^31 a fabric holds"
            )));
        }
        s.plane_link_base.push(base as u32);
        Ok(s)
    }

    fn links_in_plane(&self, plane: u32) -> u64 {
        let ep = 2 * self.n_endpoints as u64 * self.endpoint_links[plane as usize] as u64;
        let ls = 2 * self.n_leaves as u64 * self.leaf_up as u64;
        let sc = 2 * self.n_spines as u64 * self.spine_up as u64;
        ep + if self.tiers >= 2 { ls } else { 0 } + if self.tiers == 3 { sc } else { 0 }
    }

    pub fn n_links(&self) -> u32 {
        *self.plane_link_base.last().unwrap()
    }

    pub fn nodes_per_plane(&self) -> u32 {
        self.n_leaves + self.n_spines + self.n_cores
    }

    pub fn n_nodes(&self) -> u32 {
        self.planes * self.nodes_per_plane()
    }

    pub fn n_bundles(&self) -> u32 {
        let ep = if self.endpoint_bundles {
            2 * self.n_endpoints
        } else {
            0
        };
        ep + self.planes * self.bundles_per_plane()
    }

    fn bundles_per_plane(&self) -> u32 {
        match self.tiers {
            1 => 0,
            2 => 2 * self.n_leaves,
            _ => 2 * self.n_leaves + 2 * self.n_pods,
        }
    }

    pub fn has_endpoint_bundles(&self) -> bool {
        self.endpoint_bundles
    }

    /// Links per endpoint over all planes.
    pub fn links_per_endpoint(&self) -> u32 {
        self.endpoint_links.iter().sum()
    }

    /// Endpoints on leaf 0, the fullest leaf: rails `0..rails_per_leaf` of the first block's
    /// groups, the first rails being the ones a partial last group has.
    fn fullest_leaf_endpoints(&self) -> u32 {
        let groups = self
            .n_endpoints
            .div_ceil(self.rails)
            .min(self.endpoints_per_leaf);
        let whole = (self.n_endpoints / self.rails).min(groups);
        let partial = if whole < groups {
            (self.n_endpoints % self.rails).min(self.rails_per_leaf)
        } else {
            0
        };
        whole * self.rails_per_leaf + partial
    }

    // ---- positions -------------------------------------------------------------------------

    pub fn leaf_of(&self, e: u32) -> u32 {
        if self.tiers == 1 {
            return 0;
        }
        let (group, rail) = (e / self.rails, e % self.rails);
        (group / self.endpoints_per_leaf) * self.leaves_per_block + rail / self.rails_per_leaf
    }

    pub fn pod_of_leaf(&self, leaf: u32) -> u32 {
        leaf / self.leaves_per_pod
    }

    /// Node offsets (relative to the instance) of a plane's leaves, spines and cores.
    pub fn leaf_node(&self, plane: u32, leaf: u32) -> u32 {
        plane * self.nodes_per_plane() + leaf
    }
    pub fn spine_node(&self, plane: u32, spine: u32) -> u32 {
        plane * self.nodes_per_plane() + self.n_leaves + spine
    }
    pub fn core_node(&self, plane: u32, core: u32) -> u32 {
        plane * self.nodes_per_plane() + self.n_leaves + self.n_spines + core
    }

    /// Link offsets (relative to the instance); `down` picks the reverse direction.
    pub fn endpoint_link(&self, plane: u32, e: u32, k: u32, down: bool) -> u32 {
        let m = self.endpoint_links[plane as usize];
        self.plane_link_base[plane as usize] + (e * m + k) * 2 + down as u32
    }
    fn leaf_spine_base(&self, plane: u32) -> u32 {
        self.plane_link_base[plane as usize]
            + 2 * self.n_endpoints * self.endpoint_links[plane as usize]
    }
    /// Link between leaf and the spine reached by its up port `q`.
    pub fn leaf_spine_link(&self, plane: u32, leaf: u32, q: u32, down: bool) -> u32 {
        self.leaf_spine_base(plane) + (leaf * self.leaf_up + q) * 2 + down as u32
    }
    fn spine_core_base(&self, plane: u32) -> u32 {
        self.leaf_spine_base(plane) + 2 * self.n_leaves * self.leaf_up
    }
    pub fn spine_core_link(&self, plane: u32, spine: u32, r: u32, down: bool) -> u32 {
        self.spine_core_base(plane) + (spine * self.spine_up + r) * 2 + down as u32
    }

    /// Spine reached from `leaf` by up port `q`.
    pub fn spine_of_port(&self, leaf: u32, q: u32) -> u32 {
        if self.tiers == 2 {
            q / self.leaf_spine_width
        } else {
            self.pod_of_leaf(leaf) * self.leaf_up + q
        }
    }

    /// Core reached from `spine` by up port `r` (tier 3).
    pub fn core_of_port(&self, spine: u32, r: u32) -> u32 {
        let group = spine % self.leaf_up;
        group * self.cores_per_group + r / self.spine_core_width
    }

    /// The wiring: calls `f(src, dst, class)` for every link in link order. Switch ends are
    /// node offsets of the instance; the endpoint end of an endpoint link is the endpoint's
    /// index (the caller knows its node).
    pub fn for_each_link(&self, mut f: impl FnMut(u32, u32, LinkClass)) {
        for plane in 0..self.planes {
            let m = self.endpoint_links[plane as usize];
            for e in 0..self.n_endpoints {
                let leaf = self.leaf_node(plane, self.leaf_of(e));
                for _ in 0..m {
                    f(e, leaf, LinkClass::EndpointUp);
                    f(leaf, e, LinkClass::EndpointDown);
                }
            }
            if self.tiers >= 2 {
                for leaf in 0..self.n_leaves {
                    for q in 0..self.leaf_up {
                        let spine = self.spine_node(plane, self.spine_of_port(leaf, q));
                        let l = self.leaf_node(plane, leaf);
                        f(l, spine, LinkClass::LeafUp);
                        f(spine, l, LinkClass::LeafDown);
                    }
                }
            }
            if self.tiers == 3 {
                for spine in 0..self.n_spines {
                    for r in 0..self.spine_up {
                        let core = self.core_node(plane, self.core_of_port(spine, r));
                        let s = self.spine_node(plane, spine);
                        f(s, core, LinkClass::SpineUp);
                        f(core, s, LinkClass::SpineDown);
                    }
                }
            }
        }
    }

    // ---- bundles ---------------------------------------------------------------------------

    pub fn endpoint_up_bundle(&self, e: u32) -> Option<u32> {
        self.endpoint_bundles.then_some(e)
    }
    pub fn endpoint_down_bundle(&self, e: u32) -> Option<u32> {
        self.endpoint_bundles.then_some(self.n_endpoints + e)
    }
    fn plane_bundle_base(&self, plane: u32) -> u32 {
        let ep = if self.endpoint_bundles {
            2 * self.n_endpoints
        } else {
            0
        };
        ep + plane * self.bundles_per_plane()
    }
    pub fn leaf_up_bundle(&self, plane: u32, leaf: u32) -> u32 {
        self.plane_bundle_base(plane) + leaf
    }
    pub fn leaf_down_bundle(&self, plane: u32, leaf: u32) -> u32 {
        self.plane_bundle_base(plane) + self.n_leaves + leaf
    }
    pub fn pod_up_bundle(&self, plane: u32, pod: u32) -> u32 {
        self.plane_bundle_base(plane) + 2 * self.n_leaves + pod
    }
    pub fn pod_down_bundle(&self, plane: u32, pod: u32) -> u32 {
        self.plane_bundle_base(plane) + 2 * self.n_leaves + self.n_pods + pod
    }

    /// The plane and class of a link offset, and its position inside the block.
    pub fn locate(&self, link: u32) -> (u32, LinkClass, u32) {
        let plane = self.plane_link_base.partition_point(|&b| b <= link) as u32 - 1;
        let ls = self.leaf_spine_base(plane);
        let sc = self.spine_core_base(plane);
        let down = link % 2 == 1; // every block starts at an even offset
        let class = if link < ls {
            (
                LinkClass::EndpointUp,
                (link - self.plane_link_base[plane as usize]) / 2,
            )
        } else if link < sc {
            (LinkClass::LeafUp, (link - ls) / 2)
        } else {
            (LinkClass::SpineUp, (link - sc) / 2)
        };
        let (c, pos) = class;
        (plane, if down { c.reversed() } else { c }, pos)
    }

    /// The bundle a link offset belongs to, if any.
    pub fn bundle_of_link(&self, link: u32) -> Option<u32> {
        let (plane, class, pos) = self.locate(link);
        let m = self.endpoint_links[plane as usize];
        match class {
            LinkClass::EndpointUp => self.endpoint_up_bundle(pos / m),
            LinkClass::EndpointDown => self.endpoint_down_bundle(pos / m),
            LinkClass::LeafUp => Some(self.leaf_up_bundle(plane, pos / self.leaf_up)),
            LinkClass::LeafDown => {
                let leaf = pos / self.leaf_up;
                Some(self.leaf_down_bundle(plane, leaf))
            }
            LinkClass::SpineUp => {
                let spine = pos / self.spine_up;
                Some(self.pod_up_bundle(plane, spine / self.leaf_up))
            }
            LinkClass::SpineDown => {
                let spine = pos / self.spine_up;
                Some(self.pod_down_bundle(plane, spine / self.leaf_up))
            }
        }
    }

    /// Calls `f` with every member link offset of bundle `b`.
    pub fn for_each_member(&self, b: u32, mut f: impl FnMut(u32)) {
        let ep = if self.endpoint_bundles {
            2 * self.n_endpoints
        } else {
            0
        };
        if b < ep {
            let (e, down) = (b % self.n_endpoints, b >= self.n_endpoints);
            for plane in 0..self.planes {
                for k in 0..self.endpoint_links[plane as usize] {
                    f(self.endpoint_link(plane, e, k, down));
                }
            }
            return;
        }
        let per = self.bundles_per_plane();
        let (plane, i) = ((b - ep) / per, (b - ep) % per);
        let l = self.n_leaves;
        if i < 2 * l {
            let (leaf, down) = (i % l, i >= l);
            for q in 0..self.leaf_up {
                f(self.leaf_spine_link(plane, leaf, q, down));
            }
        } else {
            let j = i - 2 * l;
            let (pod, down) = (j % self.n_pods, j >= self.n_pods);
            for spine in pod * self.leaf_up..(pod + 1) * self.leaf_up {
                for r in 0..self.spine_up {
                    f(self.spine_core_link(plane, spine, r, down));
                }
            }
        }
    }
}

/// What a link of a Clos connects, in the up or down direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkClass {
    EndpointUp,
    EndpointDown,
    LeafUp,
    LeafDown,
    SpineUp,
    SpineDown,
}

impl LinkClass {
    fn reversed(self) -> LinkClass {
        match self {
            LinkClass::EndpointUp => LinkClass::EndpointDown,
            LinkClass::EndpointDown => LinkClass::EndpointUp,
            LinkClass::LeafUp => LinkClass::LeafDown,
            LinkClass::LeafDown => LinkClass::LeafUp,
            LinkClass::SpineUp => LinkClass::SpineDown,
            LinkClass::SpineDown => LinkClass::SpineUp,
        }
    }

    pub fn is_up(self) -> bool {
        matches!(
            self,
            LinkClass::EndpointUp | LinkClass::LeafUp | LinkClass::SpineUp
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn try_shape(e: u32, rails: u32, tiers: u32, radix: u32) -> Result<ClosShape> {
        ClosShape::new(&ClosParams {
            n_endpoints: e,
            rails,
            endpoint_links: vec![1],
            tiers,
            radix,
            oversubscription: [1.0, 1.0],
        })
    }

    fn shape(e: u32, rails: u32, tiers: u32, radix: u32) -> ClosShape {
        try_shape(e, rails, tiers, radix).unwrap()
    }

    /// DGX SuperPOD B200 reference architecture: 8 rails, 32 nodes per SU, 64-port switches.
    #[test]
    fn superpod_counts_match_the_reference_architecture() {
        for (sus, tiers, leaves, spines, cores) in [
            (2, 2, 16, 8, 0),
            (4, 2, 32, 16, 0),
            (8, 2, 64, 32, 0),
            (16, 3, 128, 128, 64),
            (32, 3, 256, 256, 128),
            (64, 3, 512, 512, 256),
        ] {
            let s = shape(sus * 256, 8, tiers, 64);
            assert_eq!(
                (s.n_leaves, s.n_spines, s.n_cores),
                (leaves, spines, cores),
                "{sus} SU"
            );
            assert_eq!(
                s.n_leaves * s.leaf_up,
                sus * 256,
                "leaf-spine cables, {sus} SU"
            );
        }
    }

    /// Endpoints on each leaf, by leaf_of.
    fn per_leaf(s: &ClosShape) -> Vec<u32> {
        let mut n = vec![0; s.n_leaves as usize];
        (0..s.n_endpoints).for_each(|e| n[s.leaf_of(e) as usize] += 1);
        n
    }

    /// Where a rail fills its leaves, each rail keeps leaves of its own, as before rails could
    /// share: leaf (D / endpoints_per_leaf) * rails + i.
    #[test]
    fn rails_that_fill_a_leaf_keep_their_own_leaves() {
        for (e, rails, tiers) in [
            (8192, 8, 3),
            (2048, 8, 2),
            (512, 8, 2),
            (256, 8, 2),
            (4608, 72, 3),
        ] {
            let s = shape(e, rails, tiers, 64);
            assert_eq!((s.rails_per_leaf, s.leaves_per_block), (1, rails));
            for x in 0..e {
                let old = (x / rails / s.endpoints_per_leaf) * rails + x % rails;
                assert_eq!(s.leaf_of(x), old, "endpoint {x} of {e}");
            }
        }
    }

    /// Any rails and groups: no leaf is left empty or takes more than its down ports, and rails
    /// share leaves only when each sits whole on one.
    #[test]
    fn every_leaf_holds_whole_rails_within_its_ports() {
        let mut built = 0;
        for radix in [8, 64] {
            for rails in 1..=80 {
                for groups in 1..=40 {
                    let Ok(s) = try_shape(rails * groups, rails, 3, radix) else {
                        assert_eq!(radix, 8); // beyond what three tiers of 8 ports hold
                        continue;
                    };
                    built += 1;
                    let n = per_leaf(&s);
                    let at = (radix, rails, groups);
                    assert!(
                        n.iter().all(|&k| 0 < k && k <= s.endpoints_per_leaf),
                        "{at:?}"
                    );
                    assert!(
                        s.rails_per_leaf == 1 || groups < s.endpoints_per_leaf,
                        "{at:?}"
                    );
                    // Rail i of every group on the same leaf.
                    for e in rails..rails * groups {
                        let (a, b) = (s.leaf_of(e), s.leaf_of(e % rails));
                        assert!(a == b || s.rails_per_leaf == 1, "{at:?}");
                    }
                }
            }
        }
        assert!(built > 3600, "only {built} shapes built");
    }

    /// GB200 SuperPOD SU on Quantum-2: 8 racks of 72 NICs, 32-port leaves: a rail has 8 NICs,
    /// so 4 rails to a leaf, 18 full leaves, 32 x 18 = 576 uplinks. Fewest spines: 9 would
    /// take them, but 32 uplinks split evenly only over a divisor of 32: 16 spines, 2 links
    /// from every leaf (36 of 64 ports).
    #[test]
    fn an_nvl72_su_shares_leaves_between_rails() {
        let s = shape(576, 72, 2, 64);
        assert_eq!((s.rails_per_leaf, s.n_leaves, s.leaf_up), (4, 18, 32));
        assert_eq!((s.n_spines, s.leaf_spine_width, s.n_cores), (16, 2, 0));
        assert_eq!(per_leaf(&s), vec![32; 18]);
        // Rail i of every rack on leaf i / 4.
        for rack in 0..8 {
            for rail in 0..72 {
                assert_eq!(s.leaf_of(rack * 72 + rail), rail / 4);
            }
        }
        // One rack: 72 NICs on 3 leaves of 24 rails; non-blocking takes 24 uplinks a leaf
        // (not half the radix: 8 would be idle), 72 over 2 spines.
        let s = shape(72, 72, 2, 64);
        assert_eq!((s.rails_per_leaf, s.n_leaves, s.leaf_up), (24, 3, 24));
        assert_eq!((s.n_spines, s.leaf_spine_width), (2, 12));
        assert_eq!(per_leaf(&s), vec![24; 3]);
    }

    /// Rails that do not divide the leaves evenly: 9 DGX H100 (8 rails of 9 NICs) fit 3 rails
    /// on a 32-port leaf, so 3 leaves: rails 0-2, 3-5 and 6-7 (27, 27, 18 NICs). 72 rails of 3
    /// fit 10 to a leaf: 8 leaves, so 9 rails each rather than 7 of 10 and one of 2.
    #[test]
    fn rails_share_leaves_in_even_consecutive_blocks() {
        let s = shape(72, 8, 2, 64);
        assert_eq!((s.rails_per_leaf, s.n_leaves), (3, 3));
        assert_eq!(per_leaf(&s), vec![27, 27, 18]);
        assert_eq!(
            (0..8).map(|i| s.leaf_of(8 + i)).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1, 1, 2, 2]
        );
        let s = shape(216, 72, 2, 64);
        assert_eq!((s.rails_per_leaf, s.n_leaves), (9, 8));
        assert_eq!(per_leaf(&s), vec![27; 8]);
    }

    #[test]
    fn a_two_tier_clos_too_small_names_its_leaves() {
        let two_tier = |e, rails| try_shape(e, rails, 2, 64).unwrap_err().to_string();
        // 17 racks: a rail of 17 NICs fills half a leaf, two do not fit on one.
        let msg = two_tier(17 * 72, 72);
        assert!(
            msg.contains(
                "1224 endpoints need 72 leaves (72 rails of 17 endpoints, 32 of one rail to a \
                 leaf), more than the 64 leaves a two-tier Clos of 64-port switches holds"
            ),
            "{msg}"
        );
        let msg = two_tier(2049, 1);
        assert!(
            msg.contains(
                "2049 endpoints need 65 leaves (32 endpoints to a leaf), more than the 64 leaves \
                 (2048 endpoints) a two-tier Clos"
            ),
            "{msg}"
        );
        // 16 groups of 200 rails: 2 rails to a leaf, 100 leaves.
        let msg = two_tier(3200, 200);
        assert!(
            msg.contains("need 100 leaves (200 rails of 16 endpoints, 2 rails to a leaf)"),
            "{msg}"
        );
    }

    #[test]
    fn bundles_partition_the_fabric_links() {
        // The last two share leaves between rails (2 to a leaf), in 2 and 3 tiers.
        for s in [
            shape(30, 2, 2, 8),
            shape(60, 3, 3, 8),
            shape(16, 8, 2, 8),
            shape(48, 24, 3, 8),
        ] {
            assert_eq!(s.rails_per_leaf, if s.rails > 3 { 2 } else { 1 });
            let mut owner = vec![u32::MAX; s.n_links() as usize];
            for b in 0..s.n_bundles() {
                s.for_each_member(b, |l| {
                    assert_eq!(owner[l as usize], u32::MAX);
                    owner[l as usize] = b;
                    assert_eq!(s.bundle_of_link(l), Some(b));
                });
            }
            let fabric_links = owner.iter().filter(|&&b| b != u32::MAX).count();
            // Endpoint links have no bundle with a single uplink; every other link has one.
            assert_eq!(
                fabric_links,
                s.n_links() as usize - 2 * s.n_endpoints as usize
            );
        }
    }

    /// 16 HGX H100 (8 rails of 16 NICs) on 64-port leaves. 2:1 splits a leaf 21 up, 42 down,
    /// but whole rails fill only 32 of the 42: 16 up ports, not 21 (32:21 was about 1.5:1), so
    /// one spine takes the 4 x 16 uplinks. 4:1 (12 up, 48 down) fits 3 rails: leaves of 48,
    /// 48 and 32 NICs, 12 up ports; the last leaf is at 32:12. 3:1 (16 up, 48 down): 3 rails
    /// fit again, 48:16.
    #[test]
    fn up_ports_follow_the_down_ports_in_use() {
        let at = |leaf: f64, spine: f64, e: u32, tiers: u32| {
            ClosShape::new(&ClosParams {
                n_endpoints: e,
                rails: 8,
                endpoint_links: vec![1],
                tiers,
                radix: 64,
                oversubscription: [leaf, spine],
            })
            .unwrap()
        };
        for (over, rails_per_leaf, leaves, down, up, spines) in [
            (1.0, 2, 4, 32, 32, 2),
            (2.0, 2, 4, 32, 16, 1),
            (3.0, 3, 3, 48, 16, 1),
            (4.0, 3, 3, 48, 12, 1),
        ] {
            let s = at(over, 1.0, 128, 2);
            assert_eq!(
                (
                    s.rails_per_leaf,
                    s.n_leaves,
                    s.leaf_down,
                    s.leaf_up,
                    s.n_spines
                ),
                (rails_per_leaf, leaves, down, up, spines),
                "{over}:1"
            );
        }
        // Three tiers, 40 nodes: blocks of 32 and 8 nodes, 16 leaves, all in one pod (a spine
        // has 42 down ports at 2:1): 16 leaves below a spine, so 8 up ports, not 21.
        let s = at(1.0, 2.0, 320, 3);
        assert_eq!((s.n_leaves, s.leaf_down, s.leaf_up), (16, 32, 32));
        assert_eq!((s.n_pods, s.spine_down, s.spine_up), (1, 16, 8));
        assert_eq!((s.n_spines, s.cores_per_group, s.n_cores), (32, 1, 32));
    }

    #[test]
    fn a_huge_oversubscription_is_shown_short() {
        // {} wrote 1e300 with all its 301 digits.
        let e = split_ports(144, 1e300, "leaf").unwrap_err();
        assert_eq!(
            e.message(),
            "a 144-port leaf switch at 1e300:1 has no up ports left"
        );
    }
}
