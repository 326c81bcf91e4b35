//! The Batman reshape: the firmware's codename for the transform that simplifies a 5-D
//! pattern right before the descriptor loop (seed 000 section 6).
//!
//! It logs the 5-D shape (`num_elem=[..x5] step_elem=[..x5]`, outer unit dimensions
//! padded), drops unit dimensions, merges each dimension into its inner neighbour when the
//! two are contiguous (`outer.step == inner.step * inner.count`), and keeps the shared
//! indirection dimension as it is: never dropped, never merged, its position in the
//! reshaped pattern reported as `shared_indirection_dim`. Along that dimension the index
//! tensor is read with the step replaced by `sizeof(u32) = 4` ([`INDEX_READ_STEP`]).
//!
//! "Bringing the indirection dimension into position" is read here as re-indexing it in the
//! reshaped shape, not as reordering: reordering would change element order, which the
//! source and destination share. The SBUF/PSUM partition dimension never merges: runs never
//! cross a partition.

use crate::pattern::{ByteDim, BytePattern, MAX_DIMS};
use smallvec::SmallVec;
use tracing::trace;

/// Bytes between consecutive indices in the index tensor (`sizeof(uint32_t)`).
pub const INDEX_READ_STEP: i64 = 4;

/// A pattern after the Batman reshape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshaped {
    pub start: u64,
    pub elem_size: u32,
    /// Dimensions, outermost first, unit dimensions dropped and contiguous ones merged.
    /// The indirection dimension's step is the data step the pattern declared; addresses
    /// along it come from the indices instead.
    pub dims: SmallVec<[ByteDim; MAX_DIMS]>,
    /// Position of the shared indirection dimension in `dims`.
    pub indirect_dim: Option<usize>,
    /// Position of the SBUF/PSUM partition dimension in `dims`, if it was kept.
    pub partition_dim: Option<usize>,
}

/// Reshapes `p`; `indirect_dim` is the indirection dimension in `p`'s own dims and
/// `partition_dim` whether `p`'s outermost dimension steps in partitions.
pub fn batman_reshape(
    p: &BytePattern,
    indirect_dim: Option<usize>,
    partition_dim: bool,
    side: &'static str,
) -> Reshaped {
    log_shape(p, side);
    // (dim, role): the indirection and partition dims are pinned and never merge.
    let mut kept: SmallVec<[(ByteDim, Role); MAX_DIMS]> = SmallVec::new();
    for (i, d) in p.dims.iter().enumerate() {
        let role = match (indirect_dim == Some(i), partition_dim && i == 0) {
            (true, _) => Role::Indirect,
            (false, true) => Role::Partition,
            _ => Role::Free,
        };
        if d.count > 1 || role == Role::Indirect {
            kept.push((*d, role));
        }
    }
    let mut merged: SmallVec<[(ByteDim, Role); MAX_DIMS]> = SmallVec::new();
    for (d, role) in kept.into_iter().rev() {
        match merged.last_mut() {
            Some((inner, Role::Free))
                if role == Role::Free
                    && inner.step.checked_mul(inner.count as i64) == Some(d.step) =>
            {
                inner.count *= d.count;
            }
            _ => merged.push((d, role)),
        }
    }
    merged.reverse();
    let shared = merged.iter().position(|m| m.1 == Role::Indirect);
    if let Some(dim) = shared {
        trace!(
            side,
            shared_indirection_dim = dim,
            "shared_indirection_dim in Batman"
        );
        trace!(
            side,
            shared_indirection_dim = dim,
            step = INDEX_READ_STEP,
            "replacing step with sizeof(uint32_t)"
        );
    }
    Reshaped {
        start: p.start,
        elem_size: p.elem_size,
        partition_dim: merged.iter().position(|m| m.1 == Role::Partition),
        dims: merged.into_iter().map(|m| m.0).collect(),
        indirect_dim: shared,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Free,
    Indirect,
    Partition,
}

fn log_shape(p: &BytePattern, side: &'static str) {
    let pad = MAX_DIMS.saturating_sub(p.dims.len());
    let num: Vec<u64> = std::iter::repeat_n(1, pad)
        .chain(p.dims.iter().map(|d| d.count))
        .collect();
    let step: Vec<i64> = std::iter::repeat_n(0, pad)
        .chain(p.elem_steps.iter().copied())
        .collect();
    trace!(side, num_elem = ?num, step_elem = ?step, "Tensor shape before Batman");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::AccessPattern;
    use dma::addr::SBUF_BASE;
    use dma::{AddressMap, FabricAddr, Generation};

    fn reshape(start: u64, es: u32, dims: &[(i64, u32)], ind: Option<usize>) -> Reshaped {
        let m = AddressMap::new(Generation::Mariana);
        let p = AccessPattern::new(FabricAddr(start), es, dims)
            .validate(&m, "source")
            .unwrap();
        batman_reshape(&p, ind, start >= SBUF_BASE, "source")
    }

    fn dims(r: &Reshaped) -> Vec<(i64, u64)> {
        r.dims.iter().map(|d| (d.step, d.count)).collect()
    }

    #[test]
    fn contiguous_rows_merge_into_one_dimension() {
        let r = reshape(0, 4, &[(64, 10), (1, 64)], None);
        assert_eq!(dims(&r), vec![(4, 640)]);
        assert_eq!(r.indirect_dim, None);
    }

    #[test]
    fn unit_dims_drop_but_the_indirection_dim_stays() {
        let r = reshape(0, 4, &[(1, 1), (64, 1), (0, 1), (1, 64)], Some(1));
        assert_eq!(dims(&r), vec![(256, 1), (4, 64)]);
        assert_eq!(r.indirect_dim, Some(0));
    }

    #[test]
    fn indirection_dim_never_merges() {
        let r = reshape(0, 4, &[(64, 10), (1, 64)], Some(0));
        assert_eq!(dims(&r), vec![(256, 10), (4, 64)]);
        assert_eq!(r.indirect_dim, Some(0));
    }

    #[test]
    fn non_contiguous_dims_stay() {
        let r = reshape(0, 2, &[(100, 3), (2, 8), (1, 2)], None);
        // (2,8) with inner (1,2): 2*2 bytes * ... step 4 == 2 bytes * 2 -> merge into (2, 16)
        assert_eq!(dims(&r), vec![(200, 3), (2, 16)]);
    }

    #[test]
    fn partition_dim_never_merges_even_when_the_map_is_contiguous() {
        // v4 partitions are 256 KiB, exactly the stride: still two dimensions.
        let r = reshape(SBUF_BASE, 4, &[(1, 2), (1, 65536)], None);
        assert_eq!(dims(&r), vec![(0x4_0000, 2), (4, 65536)]);
    }
}
