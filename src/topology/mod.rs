//! Topologies: nodes and directed links with capacities and latencies.
//! Generic graphs come from plain edge arrays; structured generators build on the same type.

pub mod clos;
pub mod fabric;
pub mod generators;
pub mod roles;

use crate::error::{check_capacity, check_non_negative, Error, Result};
use crate::ids::{LinkId, NodeId};

/// A directed graph of links. Immutable once built; adjacency is kept in compressed rows
/// ordered by link id, so every traversal is deterministic.
#[derive(Debug, Clone)]
pub struct Topology {
    n_nodes: u32,
    link_src: Vec<u32>,
    link_dst: Vec<u32>,
    capacity_Bps: Vec<f64>,
    latency_s: Vec<f64>,
    out_offsets: Vec<usize>,
    out_links: Vec<u32>,
    in_offsets: Vec<usize>,
    in_links: Vec<u32>,
}

impl Topology {
    /// Builds a topology of `n_nodes` nodes and one directed link per index of the arrays.
    pub fn from_links(
        n_nodes: usize,
        src: Vec<u32>,
        dst: Vec<u32>,
        capacity_Bps: Vec<f64>,
        latency_s: Vec<f64>,
    ) -> Result<Topology> {
        let n = src.len();
        if dst.len() != n || capacity_Bps.len() != n || latency_s.len() != n {
            return Err(Error::InvalidArgument(format!(
                "src, dst, capacity_Bps and latency_s must have one length, got {}, {}, {} and {}",
                n,
                dst.len(),
                capacity_Bps.len(),
                latency_s.len()
            )));
        }
        if n_nodes > u32::MAX as usize - 1 || n > u32::MAX as usize - 1 {
            return Err(Error::TooLarge(format!(
                "{n_nodes} nodes and {n} links exceed the 2^32 - 1 ids a topology can hold"
            )));
        }
        // Offsets and adjacency in both directions, plus the link arrays already held.
        crate::memory::check_fits(
            &format!("a topology of {n_nodes} nodes and {n} links"),
            16.0 * n_nodes as f64 + 16.0 * n as f64,
        )?;
        for l in 0..n {
            for (what, node) in [("src", src[l]), ("dst", dst[l])] {
                if node as usize >= n_nodes {
                    return Err(Error::UnknownNode(format!(
                        "link {l}: {what} node {node} does not exist (n_nodes = {n_nodes})"
                    )));
                }
            }
            if src[l] == dst[l] {
                return Err(Error::SameEndpoints(format!(
                    "link {l} goes from node {} to itself",
                    src[l]
                )));
            }
            check_capacity(format_args!("capacity_Bps of link {l}"), capacity_Bps[l])?;
            check_non_negative(format_args!("latency_s of link {l}"), latency_s[l])?;
        }
        let (out_offsets, out_links) = rows(n_nodes, &src);
        let (in_offsets, in_links) = rows(n_nodes, &dst);
        Ok(Topology {
            n_nodes: n_nodes as u32,
            link_src: src,
            link_dst: dst,
            capacity_Bps,
            latency_s,
            out_offsets,
            out_links,
            in_offsets,
            in_links,
        })
    }

    pub fn n_nodes(&self) -> usize {
        self.n_nodes as usize
    }

    pub fn n_links(&self) -> usize {
        self.link_src.len()
    }

    pub fn link_src(&self) -> &[u32] {
        &self.link_src
    }

    pub fn link_dst(&self) -> &[u32] {
        &self.link_dst
    }

    pub fn capacity_Bps(&self) -> &[f64] {
        &self.capacity_Bps
    }

    pub fn latency_s(&self) -> &[f64] {
        &self.latency_s
    }

    /// Links leaving `node`, in increasing id order.
    pub fn out_links(&self, node: NodeId) -> &[u32] {
        &self.out_links[self.out_offsets[node.index()]..self.out_offsets[node.index() + 1]]
    }

    /// Links entering `node`, in increasing id order.
    pub fn in_links(&self, node: NodeId) -> &[u32] {
        &self.in_links[self.in_offsets[node.index()]..self.in_offsets[node.index() + 1]]
    }

    /// Validates a node id named `what` (e.g. "src").
    pub fn node(&self, what: &str, id: i64) -> Result<NodeId> {
        if id < 0 || id >= self.n_nodes as i64 {
            return Err(Error::UnknownNode(format!(
                "{what} node {id} does not exist: node ids run from 0 to {}",
                self.n_nodes as i64 - 1
            )));
        }
        Ok(NodeId(id as u32))
    }

    /// Validates a link id.
    pub fn link(&self, id: i64) -> Result<LinkId> {
        if id < 0 || id >= self.n_links() as i64 {
            return Err(Error::UnknownLink(format!(
                "link {id} does not exist: link ids run from 0 to {}",
                self.n_links() as i64 - 1
            )));
        }
        Ok(LinkId(id as u32))
    }
}

/// Compressed rows of link ids grouped by `key[link]`, ids ascending within a row.
fn rows(n_nodes: usize, key: &[u32]) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = vec![0usize; n_nodes + 1];
    for &k in key {
        offsets[k as usize + 1] += 1;
    }
    for i in 0..n_nodes {
        offsets[i + 1] += offsets[i];
    }
    let mut cursor = offsets.clone();
    let mut links = vec![0u32; key.len()];
    for (l, &k) in key.iter().enumerate() {
        links[cursor[k as usize]] = l as u32;
        cursor[k as usize] += 1;
    }
    (offsets, links)
}
