//! Meters: weighted sums of constraint loads whose peak and busy time a run reports. A link
//! used both on its own and through a bundle is loaded by two constraints at once; its peak
//! is the peak of their sum, which the constraints' own peaks (reached at different times)
//! cannot give.

use crate::error::{shown, Error, Result};

/// Meter m is the sum of weight x load over `terms[offsets[m]..offsets[m + 1]]`, each term a
/// (constraint, weight).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meters {
    offsets: Vec<usize>,
    terms: Vec<(u32, f64)>,
}

impl Meters {
    /// Adds a meter over `terms`; returns its index.
    pub fn push(&mut self, terms: impl IntoIterator<Item = (u32, f64)>) -> usize {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.terms.extend(terms);
        self.offsets.push(self.terms.len());
        self.offsets.len() - 2
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn terms(&self, m: usize) -> &[(u32, f64)] {
        &self.terms[self.offsets[m]..self.offsets[m + 1]]
    }
}

/// The meters' state during a run.
pub(crate) struct MeterRun<'a> {
    meters: &'a Meters,
    /// The meters constraint c is a term of: `of[of_offsets[c]..of_offsets[c + 1]]`.
    of_offsets: Vec<usize>,
    of: Vec<u32>,
    load_Bps: Vec<f64>,
    since_s: Vec<f64>,
    pub busy_s: Vec<f64>,
    pub peak_Bps: Vec<f64>,
    /// Meters with a term whose load changed this instant (`is_touched` flags them).
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl<'a> MeterRun<'a> {
    pub fn new(meters: &'a Meters, n_constraints: usize) -> Result<Self> {
        let n = meters.len();
        let mut of_offsets = vec![0usize; if n > 0 { n_constraints + 1 } else { 0 }];
        for (m, &(c, weight)) in (0..n).flat_map(|m| meters.terms(m).iter().map(move |t| (m, t))) {
            if c as usize >= n_constraints || !(weight.is_finite() && weight >= 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "meter {m} has term ({c}, {}): expected a constraint below \
                     {n_constraints} and a finite weight >= 0",
                    shown(weight)
                )));
            }
            of_offsets[c as usize + 1] += 1;
        }
        for c in 1..of_offsets.len() {
            of_offsets[c] += of_offsets[c - 1];
        }
        let mut of = vec![0u32; of_offsets.last().copied().unwrap_or(0)];
        let mut cursor = of_offsets.clone();
        for m in 0..n {
            for &(c, _) in meters.terms(m) {
                of[cursor[c as usize]] = m as u32;
                cursor[c as usize] += 1;
            }
        }
        Ok(MeterRun {
            meters,
            of_offsets,
            of,
            load_Bps: vec![0.0; n],
            since_s: vec![0.0; n],
            busy_s: vec![0.0; n],
            peak_Bps: vec![0.0; n],
            touched: Vec::new(),
            is_touched: vec![false; n],
        })
    }

    /// The load of constraint `c` changes in this instant.
    #[inline]
    pub fn touch(&mut self, c: u32) {
        if self.of_offsets.is_empty() {
            return;
        }
        let c = c as usize;
        for &m in &self.of[self.of_offsets[c]..self.of_offsets[c + 1]] {
            if !self.is_touched[m as usize] {
                self.is_touched[m as usize] = true;
                self.touched.push(m);
            }
        }
    }

    /// Every load of the instant at `now_s` is in: the touched meters take their new sums.
    pub fn close_instant(&mut self, now_s: f64, load_Bps: impl Fn(u32) -> f64) {
        for &m in &self.touched {
            let m = m as usize;
            self.is_touched[m] = false;
            if self.load_Bps[m] > 0.0 {
                self.busy_s[m] += now_s - self.since_s[m];
            }
            self.since_s[m] = now_s;
            let sum: f64 = self
                .meters
                .terms(m)
                .iter()
                .map(|&(c, weight)| weight * load_Bps(c))
                .sum();
            self.load_Bps[m] = sum;
            self.peak_Bps[m] = self.peak_Bps[m].max(sum);
        }
        self.touched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_weight_is_shown_short() {
        // {} wrote -1e300 with all its 301 digits.
        let mut meters = Meters::default();
        meters.push([(0, -1e300)]);
        let e = MeterRun::new(&meters, 1).err().unwrap();
        assert_eq!(
            e.message(),
            "meter 0 has term (0, -1e300): expected a constraint below 1 and a finite weight >= 0"
        );
    }
}
