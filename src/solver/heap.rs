//! An indexed 4-ary min-heap of constraints keyed by saturation level, ties broken by id.
//! Keys move both ways in place (sift up or down), so no stale entries pile up.

const ABSENT: u32 = u32::MAX;
/// Children per node: a 4-ary heap is shallower and scans siblings in one cache line.
const ARITY: usize = 4;

#[derive(Debug, Default, Clone)]
pub struct IndexedHeap {
    items: Vec<(f64, u32)>,
    /// Position of each id in `items`, or ABSENT.
    pos: Vec<u32>,
}

impl IndexedHeap {
    pub fn with_ids(n_ids: usize) -> Self {
        IndexedHeap {
            items: Vec::new(),
            pos: vec![ABSENT; n_ids],
        }
    }

    /// Grows the id range to at least `n_ids`.
    pub fn ensure_ids(&mut self, n_ids: usize) {
        if self.pos.len() < n_ids {
            self.pos.resize(n_ids, ABSENT);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn peek(&self) -> Option<(f64, u32)> {
        self.items.first().copied()
    }

    pub fn contains(&self, id: u32) -> bool {
        self.pos[id as usize] != ABSENT
    }

    /// The key of `id`, if present.
    #[inline]
    pub fn key(&self, id: u32) -> Option<f64> {
        let p = self.pos[id as usize];
        (p != ABSENT).then(|| self.items[p as usize].0)
    }

    /// Inserts `id` with `key`, or moves it to `key` if present.
    pub fn set(&mut self, id: u32, key: f64) {
        let p = self.pos[id as usize];
        if p == ABSENT {
            // The hole is a new last slot (filled by the sift).
            self.items.push((key, id));
            self.sift_up(self.items.len() - 1, (key, id));
        } else {
            let i = p as usize;
            if key < self.items[i].0 {
                self.sift_up(i, (key, id));
            } else {
                self.sift_down(i, (key, id));
            }
        }
    }

    pub fn remove(&mut self, id: u32) {
        // An empty heap (often the rate caps) need not read `pos`, a likely cache miss.
        if self.items.is_empty() {
            return;
        }
        let p = self.pos[id as usize];
        if p == ABSENT {
            return;
        }
        let i = p as usize;
        self.pos[id as usize] = ABSENT;
        let last = self.items.pop().expect("a present id");
        // The last item fills the hole at `i`, moving up or down from there.
        if i < self.items.len() {
            if i > 0 && Self::less(last, self.items[(i - 1) / ARITY]) {
                self.sift_up(i, last);
            } else {
                self.sift_down(i, last);
            }
        }
    }

    pub fn clear(&mut self) {
        for &(_, id) in &self.items {
            self.pos[id as usize] = ABSENT;
        }
        self.items.clear();
    }

    /// Inserts many absent ids at once in O(n) (bottom-up heap construction).
    pub fn extend(&mut self, entries: impl IntoIterator<Item = (u32, f64)>) {
        for (id, key) in entries {
            debug_assert_eq!(self.pos[id as usize], ABSENT);
            self.pos[id as usize] = self.items.len() as u32;
            self.items.push((key, id));
        }
        self.heapify();
    }

    /// Sets many keys at once (as `set` each): where they are a large share of the heap,
    /// in place and one O(n) rebuild instead of a sift each.
    pub fn set_many(&mut self, entries: &[(u32, f64)]) {
        if entries.len() * 4 < self.items.len() {
            for &(id, key) in entries {
                self.set(id, key);
            }
            return;
        }
        for &(id, key) in entries {
            match self.pos[id as usize] {
                ABSENT => {
                    self.pos[id as usize] = self.items.len() as u32;
                    self.items.push((key, id));
                }
                p => self.items[p as usize].0 = key,
            }
        }
        self.heapify();
    }

    /// Removes every id whose key is at most `bound`, appending them to `out` in no set
    /// order. Beyond the first few, they are found by a walk that stops below any larger
    /// key, and a large share of the heap (a collective's flows finishing together) is
    /// removed in one pass and a rebuild instead of a sift each.
    pub fn take_at_most(&mut self, bound: f64, out: &mut Vec<u32>) {
        self.take_at_most_keyed(bound, out, None);
    }

    /// As `take_at_most`, also appending each taken id's key to `keys` (in `out`'s order).
    pub fn take_at_most_keyed(
        &mut self,
        bound: f64,
        out: &mut Vec<u32>,
        mut keys: Option<&mut Vec<f64>>,
    ) {
        // Mostly one or a few.
        for _ in 0..64 {
            match self.peek() {
                Some((key, id)) if key <= bound => {
                    self.remove(id);
                    out.push(id);
                    if let Some(k) = keys.as_deref_mut() {
                        k.push(key);
                    }
                }
                _ => return,
            }
        }
        let first = out.len();
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            if i < self.items.len() && self.items[i].0 <= bound {
                out.push(self.items[i].1);
                if let Some(k) = keys.as_deref_mut() {
                    k.push(self.items[i].0);
                }
                stack.extend((ARITY * i + 1..).take(ARITY));
            }
        }
        let taken = out.len() - first;
        if taken * 8 < self.items.len() {
            for &id in &out[first..] {
                self.remove(id);
            }
            return;
        }
        for &id in &out[first..] {
            self.pos[id as usize] = ABSENT;
        }
        let pos = &self.pos;
        self.items.retain(|&(_, id)| pos[id as usize] != ABSENT);
        for i in 0..self.items.len() {
            self.pos[self.items[i].1 as usize] = i as u32;
        }
        self.heapify();
    }

    fn heapify(&mut self) {
        let n = self.items.len();
        if n > 1 {
            for i in (0..n / ARITY + 1).rev() {
                self.sift_down(i, self.items[i]);
            }
        }
    }

    /// The heap's order: by key, ties by id (so that callers choosing as it would agree).
    #[inline]
    pub fn less(a: (f64, u32), b: (f64, u32)) -> bool {
        a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
    }

    #[inline]
    fn place(&mut self, i: usize, item: (f64, u32)) {
        self.items[i] = item;
        self.pos[item.1 as usize] = i as u32;
    }

    /// Puts `item` in the hole at `i` or above it, shifting parents down into the hole.
    fn sift_up(&mut self, mut i: usize, item: (f64, u32)) {
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if Self::less(item, self.items[parent]) {
                let p = self.items[parent];
                self.place(i, p);
                i = parent;
            } else {
                break;
            }
        }
        self.place(i, item);
    }

    /// Puts `item` in the hole at `i` or below it, shifting the smallest child up into the
    /// hole.
    fn sift_down(&mut self, mut i: usize, item: (f64, u32)) {
        let n = self.items.len();
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let mut m = first;
            for c in first + 1..(first + ARITY).min(n) {
                if Self::less(self.items[c], self.items[m]) {
                    m = c;
                }
            }
            if Self::less(self.items[m], item) {
                let child = self.items[m];
                self.place(i, child);
                i = m;
            } else {
                break;
            }
        }
        self.place(i, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Heap order (no child less than its parent) and `pos` naming every item's place, and
    /// nothing else.
    fn assert_consistent(heap: &IndexedHeap) {
        for (i, &item) in heap.items.iter().enumerate() {
            assert_eq!(heap.pos[item.1 as usize], i as u32, "pos of id {}", item.1);
            if i > 0 {
                let parent = heap.items[(i - 1) / ARITY];
                assert!(
                    !IndexedHeap::less(item, parent),
                    "{item:?} under {parent:?}"
                );
            }
        }
        let n_present = heap.pos.iter().filter(|&&p| p != ABSENT).count();
        assert_eq!(n_present, heap.items.len());
    }

    #[test]
    fn pops_in_key_then_id_order_under_random_updates() {
        let mut rng = Rng::new(3);
        let n = 200;
        let mut heap = IndexedHeap::with_ids(n);
        let mut truth: Vec<Option<f64>> = vec![None; n];
        for _ in 0..5000 {
            let id = rng.below(n as u64) as u32;
            if rng.below(4) == 0 {
                heap.remove(id);
                truth[id as usize] = None;
            } else {
                // Few distinct keys so ties are exercised.
                let key = rng.below(20) as f64;
                heap.set(id, key);
                truth[id as usize] = Some(key);
            }
            assert_consistent(&heap);
            let expect = truth
                .iter()
                .enumerate()
                .filter_map(|(i, k)| k.map(|k| (k, i as u32)))
                .min_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
            assert_eq!(heap.peek(), expect);
        }
        heap.clear();
        assert!(heap.is_empty());
        assert!((0..n as u32).all(|i| !heap.contains(i)));
    }

    #[test]
    fn set_many_matches_setting_each_whether_it_rebuilds_or_sifts() {
        let mut rng = Rng::new(11);
        for round in 0..200 {
            let n = 1 + rng.below(300) as usize;
            let mut heap = IndexedHeap::with_ids(n);
            let mut truth: Vec<Option<f64>> = vec![None; n];
            for (id, known) in truth.iter_mut().enumerate() {
                if rng.below(3) > 0 {
                    let key = rng.below(40) as f64;
                    heap.set(id as u32, key);
                    *known = Some(key);
                }
            }
            // Odd rounds update a few ids (sifted), even rounds most of them (rebuilt);
            // absent ids are inserted either way.
            let share = if round % 2 == 0 { 1 } else { 10 };
            let mut entries = Vec::new();
            for (id, known) in truth.iter_mut().enumerate() {
                if rng.below(share) == 0 {
                    let key = rng.below(40) as f64;
                    entries.push((id as u32, key));
                    *known = Some(key);
                }
            }
            heap.set_many(&entries);
            assert_consistent(&heap);
            let mut expect: Vec<(f64, u32)> = (truth.iter().enumerate())
                .filter_map(|(id, known)| known.map(|k| (k, id as u32)))
                .collect();
            expect.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let mut popped = Vec::new();
            while let Some((k, id)) = heap.peek() {
                heap.remove(id);
                popped.push((k, id));
            }
            assert_eq!(popped, expect);
        }
    }

    #[test]
    fn takes_every_key_up_to_a_bound_and_keeps_the_rest_in_order() {
        let mut rng = Rng::new(5);
        for round in 0..200 {
            let n = 1 + rng.below(300) as usize;
            let mut heap = IndexedHeap::with_ids(n);
            let keys: Vec<f64> = (0..n).map(|_| rng.below(50) as f64).collect();
            for (i, &k) in keys.iter().enumerate() {
                heap.set(i as u32, k);
            }
            // Small bounds take a few (removed one by one), large ones most (rebuilt).
            let bound = if round % 2 == 0 {
                rng.below(5) as f64
            } else {
                rng.below(50) as f64
            };
            let mut taken = vec![7u32]; // appended after what is there
            heap.take_at_most(bound, &mut taken);
            assert_consistent(&heap);
            taken[1..].sort_unstable();
            let expect: Vec<u32> = (0..n as u32)
                .filter(|&i| keys[i as usize] <= bound)
                .collect();
            assert_eq!(taken[0], 7);
            assert_eq!(&taken[1..], &expect[..]);
            let mut rest = Vec::new();
            while let Some((k, id)) = heap.peek() {
                assert_eq!(keys[id as usize], k);
                heap.remove(id);
                assert_consistent(&heap);
                rest.push((k, id));
            }
            let mut sorted = rest.clone();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            assert_eq!(rest, sorted);
            assert_eq!(rest.len() + expect.len(), n);
        }
    }
}
