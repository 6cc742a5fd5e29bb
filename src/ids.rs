//! Dense typed ids. Each is an index into a Vec, validated where it is built.

macro_rules! dense_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

dense_id!(
    /// A node of a topology (GPU, NIC, switch chip, switch).
    NodeId
);
dense_id!(
    /// A directed link of a topology.
    LinkId
);
dense_id!(
    /// An activity of a scenario: a flow or a delay. Flows and delays share one id space.
    ActivityId
);
