//! A running sum that carries its own rounding error.

/// A compensated sum (Neumaier's, with Knuth's TwoSum for each step). The filling adds every flow's coefficient to a constraint and
/// takes each back as the flow freezes; a plain float sum then keeps the rounding of the big
/// terms, so 1 + 1e-15 - 1 is 1.1e-15 (10% off) and a million thirds leave a 1e-6 relative
/// error in what remains. Here what remains is right to about one rounding of itself.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompensatedSum {
    sum: f64,
    error: f64,
}

impl CompensatedSum {
    pub fn new(x: f64) -> Self {
        CompensatedSum { sum: x, error: 0.0 }
    }

    #[inline]
    pub fn add(&mut self, x: f64) {
        // Knuth's TwoSum: the rounding t loses, exactly, with no branch.
        let t = self.sum + x;
        let x_part = t - self.sum;
        self.error += (self.sum - (t - x_part)) + (x - x_part);
        self.sum = t;
    }

    /// Adds the product `a * b` exactly (its rounding, from an FMA, goes to the error term):
    /// a rest left beside a flow of coefficient k != 1 then keeps its own precision. With
    /// `a` = +-1, the usual coefficient, the product is exact and the FMA (a libm call where
    /// the build does not target FMA hardware) is skipped.
    #[inline]
    pub fn add_product(&mut self, a: f64, b: f64) {
        let p = a * b;
        if a.abs() != 1.0 {
            self.error += a.mul_add(b, -p);
        }
        self.add(p);
    }

    /// Subtracts another compensated sum, keeping its error term too.
    #[inline]
    pub fn subtract(&mut self, other: CompensatedSum) {
        self.add(-other.sum);
        self.error -= other.error;
    }

    #[inline]
    pub fn value(self) -> f64 {
        self.sum + self.error
    }
}

#[cfg(test)]
mod tests {
    use super::CompensatedSum;

    #[test]
    fn small_remainders_survive_large_terms() {
        let mut s = CompensatedSum::new(1.0);
        s.add(1e-15);
        s.add(-1.0);
        assert_eq!(s.value(), 1e-15);
        let mut thirds = CompensatedSum::default();
        for _ in 0..1_000_000 {
            thirds.add(1.0 / 3.0);
        }
        for _ in 0..999_999 {
            thirds.add(-1.0 / 3.0);
        }
        assert_eq!(thirds.value(), 1.0 / 3.0);
    }
}
