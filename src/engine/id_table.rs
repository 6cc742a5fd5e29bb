//! Fixed-length tables indexed by flow or constraint ids, read without bounds checks in
//! release builds.
//!
//! The engine's hot loops index a dozen per-flow and per-constraint tables by ids read from
//! other tables, so the compiler cannot prove them in range; dropping the checks (and the
//! panic paths that keep the loops from being optimised as a whole) made runs of 1e4 and
//! 1e5 staggered flows about 8% faster (fat_tree_run, same-day medians). Every id is proven
//! in range once, when the run is built:
//! activity ids are `0..n` by construction, and `Sim::new` and `disruption::Schedule`
//! reject any usage entry naming a constraint past the last one. A table's length is fixed
//! at creation (there is no push), so that proof holds for the whole run. Debug builds,
//! which run the Rust test suite, still check every access.

use std::ops::{Deref, DerefMut, Index, IndexMut};

#[derive(Debug, Clone)]
pub(crate) struct IdTable<T>(Box<[T]>);

impl<T: Clone> IdTable<T> {
    /// `n` copies of `value`.
    pub fn filled(value: T, n: usize) -> Self {
        IdTable(vec![value; n].into_boxed_slice())
    }
}

impl<T> FromIterator<T> for IdTable<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        IdTable(items.into_iter().collect())
    }
}

impl<T> From<Vec<T>> for IdTable<T> {
    fn from(items: Vec<T>) -> Self {
        IdTable(items.into_boxed_slice())
    }
}

impl<T> Deref for IdTable<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> DerefMut for IdTable<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T> Index<usize> for IdTable<T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, id: usize) -> &T {
        debug_assert!(id < self.0.len(), "id {id} of a table of {}", self.0.len());
        // SAFETY: ids are checked in range when the run is built (module docs), and the
        // length never changes.
        unsafe { self.0.get_unchecked(id) }
    }
}

impl<T> IndexMut<usize> for IdTable<T> {
    #[inline(always)]
    fn index_mut(&mut self, id: usize) -> &mut T {
        debug_assert!(id < self.0.len(), "id {id} of a table of {}", self.0.len());
        // SAFETY: as for `index`.
        unsafe { self.0.get_unchecked_mut(id) }
    }
}

#[cfg(test)]
mod tests {
    use super::IdTable;

    #[test]
    fn reads_and_writes_by_id() {
        let mut t = IdTable::filled(0u32, 3);
        t[2] = 7;
        assert_eq!(*t, [0, 0, 7]);
        assert_eq!(t[2], 7);
    }

    /// The Rust tests run in debug builds, where an id out of range must still be caught.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "id 3 of a table of 3")]
    fn debug_builds_check_ids() {
        let t = IdTable::filled(0u32, 3);
        let _ = t[3];
    }
}
