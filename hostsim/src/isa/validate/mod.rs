//! The per-generation validity contracts: one function per operand struct, each
//! returning the first rule the instruction breaks on that generation.
//!
//! What every generation shares (seed 000 sections 3 and 8, and the project's limits
//! listed here): the index dtype sets, `num_elem_per_idx` set, at most 4096 indices,
//! DMA_INDIRECT indices in SBUF partition 0, indirect dim X without a shape register (the
//! shape a register holds is checked at run time, [`dma_indirect_walk`]),
//! INDIRECT_COPY only in the Gather sub-mode, CCE_OP 1 rejected, and every address on the
//! generation's fabric (sizes drift: SBUF 192/224/256/256 KiB per partition, HBM
//! 32/96/144/144 GiB).
//!
//! What drifts (seed 000 section 1): on maverick (v5) GATHER may not touch PSUM, and the
//! active-channel check is tile-aware. The seed names the tile-aware check but not its
//! arithmetic, so the rule here is INFERRED: with `inst_flags.TILE` set, each pattern's
//! channel range `[partition, partition + num_active_channels)` must lie inside one
//! 32-partition tile (`partition / 32 == (end - 1) / 32`). TILE on an earlier generation
//! is rejected. Without TILE every generation checks only that the range ends by 128.
//!
//! Validation runs the decode rules again first, so an instruction built from raw bytes
//! by any path is checked whole. Execution may rely on everything checked here.

mod dma_ops;
mod pool_ops;

pub use dma_ops::{
    dma_indirect, dma_indirect_walk, dma_memcpy, embedding_update, MAX_WALK_ELEMENTS,
};
pub use pool_ops::{
    gather, indirect_copy, pool_buffer_load, CORE_PARTITIONS, MAX_INDICES, NUM_ELEM_PER_IDX,
    POOL_BUFFER_MAX_ELEMENTS,
};

use dma::{Addr4, AddressMap, FabricAddr, Generation, Location, Space};

use super::fields::{InstHeader, Tensor4d};
use super::rule::{self, ensure, FieldPath, Rule};
use crate::error::Error;

/// Partitions in SBUF and PSUM, and the maverick tile width.
const PARTITIONS: u32 = dma::generation::PARTITIONS;
const TILE_PARTITIONS: u32 = 32;

/// The active channel count of a POOL instruction (1..=128); TILE only on maverick.
fn active_channels(
    generation: Generation,
    header: InstHeader,
    structure: &'static str,
) -> Result<u32, Error> {
    let n = header.num_active_channels();
    let at = FieldPath::new(structure, "header.num_active_channels");
    ensure((1..=128).contains(&n), at, n, Rule::ActiveChannelCount)?;
    let tile = header.inst_flags().tile();
    let flags = FieldPath::new(structure, "header.inst_flags");
    ensure(
        !tile || generation == Generation::Maverick,
        flags,
        header.inst_flags().bits(),
        Rule::TileFlagGeneration,
    )?;
    Ok(u32::from(n))
}

/// The channel range `[partition, partition + channels)` of one pattern: it ends by 128,
/// and with TILE (maverick, checked by [`active_channels`]) stays inside one tile.
fn channel_range(
    header: InstHeader,
    at: FieldPath,
    partition: u32,
    channels: u32,
) -> Result<(), Error> {
    let end = partition + channels;
    rule::at_most(at, end, PARTITIONS.into(), Rule::ActiveChannelRange)?;
    let same_tile = partition / TILE_PARTITIONS == (end - 1) / TILE_PARTITIONS;
    ensure(
        !header.inst_flags().tile() || same_tile,
        at,
        partition,
        Rule::ActiveChannelTile,
    )
}

/// `len` bytes from `offset` inside `partition` of `space`, on the fabric.
fn partition_span(
    map: &AddressMap,
    at: FieldPath,
    space: Space,
    partition: u32,
    offset: u64,
    len: u64,
) -> Result<(), Error> {
    let loc = Location {
        space,
        partition,
        offset,
    };
    let start = map.fabric_addr(loc).map_err(rule::dma_at(at))?;
    map.check_range(start, len)
        .map(drop)
        .map_err(rule::dma_at(at))
}

/// `len` bytes from an ADDR4, on the fabric; returns the decoded (space, partition).
fn addr4_span(
    map: &AddressMap,
    at: FieldPath,
    addr: Addr4,
    len: u64,
) -> Result<(Space, u32), Error> {
    let (space, partition, offset) = rule::addr4(at, addr)?;
    partition_span(map, at, space, partition, offset.into(), len)?;
    Ok((space, partition))
}

/// Every byte a TENSOR4D of `elem_size`-byte elements touches, inside its start partition.
/// Returns the decoded (space, partition). `at` names the pattern; counts are checked
/// non-zero first.
fn tensor_span(
    map: &AddressMap,
    at: FieldPath,
    t: &Tensor4d,
    elem_size: usize,
) -> Result<(Space, u32), Error> {
    for n in t.num_elem() {
        rule::nonzero(at, n)?;
    }
    let (space, partition, offset) = rule::addr4(at, t.start_addr())?;
    let esz = elem_size as i64;
    let (lo, hi) = t.extent_elems();
    // |lo|, |hi| < 2^33 and esz <= 4, so these products cannot overflow i64.
    let first = i64::from(offset) + lo * esz;
    ensure(first >= 0, at, offset, Rule::PatternBelowPartition)?;
    let len = (hi - lo + 1) * esz;
    partition_span(map, at, space, partition, first as u64, len as u64)?;
    Ok((space, partition))
}

/// Bytes a strided run touches: `sum((n_d - 1) * step_d) + 1` elements of `elem_size`
/// bytes (counts at least 1). Wide enough that no u16/u32 field combination overflows.
fn run_bytes(dims: &[(u16, u16)], elem_size: u32) -> u128 {
    let reach: u128 = dims
        .iter()
        .map(|(n, step)| u128::from(n.saturating_sub(1)) * u128::from(*step))
        .sum();
    (reach + 1) * u128::from(elem_size)
}

/// `len` bytes from a fabric address, inside one region.
fn fabric_span(map: &AddressMap, at: FieldPath, addr: FabricAddr, len: u128) -> Result<(), Error> {
    let len = u64::try_from(len).map_err(|_| Error::Field {
        field: at,
        source: dma::Error::AddressOverflow {
            addr: addr.0,
            len: u64::MAX,
        },
    })?;
    map.check_range(addr, len)
        .map(drop)
        .map_err(rule::dma_at(at))
}

/// Test support: asserts `r` fails with `rule` on `field` holding `value`.
#[cfg(test)]
pub(crate) fn assert_rule(r: Result<(), Error>, field: &str, value: u64, rule: Rule) {
    match r {
        Err(Error::InvalidField {
            field: f,
            value: v,
            rule: got,
        }) => assert_eq!((f.to_string().as_str(), v, got), (field, value, rule)),
        other => panic!("expected {field} = {value} to break {rule:?}, got {other:?}"),
    }
}

/// Test support: asserts `r` fails with a fabric error on `field`.
#[cfg(test)]
pub(crate) fn assert_fabric(r: Result<(), Error>, field: &str) {
    match r {
        Err(Error::Field { field: f, .. }) => assert_eq!(f.to_string(), field),
        other => panic!("expected a fabric error on {field}, got {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::fields::InstFlags;
    use crate::isa::opcode::Opcode;

    const AT: FieldPath = FieldPath::new("T", "p");

    #[test]
    fn channel_count_and_tile_generation() {
        let h = |f, n| InstHeader::new(Opcode::Gather, f, n);
        assert_eq!(
            active_channels(Generation::Sunda, h(InstFlags::NONE, 128), "T").unwrap(),
            128
        );
        assert_rule(
            active_channels(Generation::Sunda, h(InstFlags::NONE, 0), "T").map(drop),
            "T.header.num_active_channels",
            0,
            Rule::ActiveChannelCount,
        );
        assert_rule(
            active_channels(Generation::Sunda, h(InstFlags::NONE, 129), "T").map(drop),
            "T.header.num_active_channels",
            129,
            Rule::ActiveChannelCount,
        );
        for g in [Generation::Sunda, Generation::Cayman, Generation::Mariana] {
            assert_rule(
                active_channels(g, h(InstFlags::TILE, 8), "T").map(drop),
                "T.header.inst_flags",
                1,
                Rule::TileFlagGeneration,
            );
        }
        assert_eq!(
            active_channels(Generation::Maverick, h(InstFlags::TILE, 8), "T").unwrap(),
            8
        );
    }

    #[test]
    fn channel_range_edges() {
        let plain = InstHeader::new(Opcode::Gather, InstFlags::NONE, 1);
        let tile = InstHeader::new(Opcode::Gather, InstFlags::TILE, 1);
        assert!(channel_range(plain, AT, 120, 8).is_ok());
        assert_rule(
            channel_range(plain, AT, 121, 8),
            "T.p",
            129,
            Rule::ActiveChannelRange,
        );
        assert!(channel_range(plain, AT, 16, 32).is_ok());
        // tile-aware: [32, 64) is one tile, [16, 48) crosses 32, [63, 65) crosses 64
        assert!(channel_range(tile, AT, 32, 32).is_ok());
        assert_rule(
            channel_range(tile, AT, 16, 32),
            "T.p",
            16,
            Rule::ActiveChannelTile,
        );
        assert_rule(
            channel_range(tile, AT, 63, 2),
            "T.p",
            63,
            Rule::ActiveChannelTile,
        );
        assert!(channel_range(tile, AT, 100, 28).is_ok());
    }

    #[test]
    fn tensor_span_edges() {
        let m = AddressMap::new(Generation::Sunda);
        let last = 192 * 1024 - 4;
        let at = |o| Addr4::encode(Space::Sbuf, 5, o).unwrap();
        // the last f32 of the partition is fine, one more element is not
        assert!(tensor_span(&m, AT, &Tensor4d::contiguous(at(last), 1), 4).is_ok());
        assert_fabric(
            tensor_span(&m, AT, &Tensor4d::contiguous(at(last), 2), 4).map(drop),
            "T.p",
        );
        // negative steps: 3 elements back from offset 8 (f32) reach offset -4
        let back = Tensor4d::new(at(8), [-1, 0, 0, 0], [4, 1, 1, 1]);
        assert_rule(
            tensor_span(&m, AT, &back, 4).map(drop),
            "T.p",
            8,
            Rule::PatternBelowPartition,
        );
        let back = Tensor4d::new(at(12), [-1, 0, 0, 0], [4, 1, 1, 1]);
        assert_eq!(tensor_span(&m, AT, &back, 4).unwrap(), (Space::Sbuf, 5));
        let empty = Tensor4d::new(at(0), [1, 1, 1, 1], [4, 0, 1, 1]);
        assert_rule(
            tensor_span(&m, AT, &empty, 4).map(drop),
            "T.p",
            0,
            Rule::NonZero,
        );
        // an offset past the v2 partition but inside the v3 one
        let t = Tensor4d::contiguous(at(200 * 1024), 1);
        assert_fabric(tensor_span(&m, AT, &t, 1).map(drop), "T.p");
        assert!(tensor_span(&AddressMap::new(Generation::Cayman), AT, &t, 1).is_ok());
    }

    #[test]
    fn run_bytes_and_fabric_span() {
        assert_eq!(run_bytes(&[(4, 2)], 8), 56);
        assert_eq!(run_bytes(&[(3, 1), (2, 10)], 4), 52);
        assert_eq!(run_bytes(&[(0, 5)], 4), 4);
        let m = AddressMap::new(Generation::Sunda);
        assert!(fabric_span(&m, AT, FabricAddr(0), 32 << 30).is_ok());
        assert_fabric(fabric_span(&m, AT, FabricAddr(1), 32 << 30), "T.p");
        assert_fabric(fabric_span(&m, AT, FabricAddr(0), 1 << 70), "T.p");
    }
}
