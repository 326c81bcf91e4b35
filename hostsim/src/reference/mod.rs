//! # The closed-form reference semantics
//!
//! Plain loops that apply each instruction's semantics (seed 000 section 7 with the
//! binding decisions of the design's "Semantic decisions") directly to the fabric. This
//! is the route the POOL kernels and the DGE + DMA engine are compared against bit for
//! bit, so it shares nothing with them but
//! the fabric's bounds-checked access path and the dtype arithmetic
//! ([`dma::compute::apply`], reached through [`Fabric::reduce`]).
//!
//! [`execute`] validates the instruction for the fabric's generation, then hands it to
//! one datapath, each in its own file:
//!
//! - `gather`: POOL_BUFFER_LOAD 0x67 and GATHER 0x68 (the Pool_Buffer, hit or miss);
//! - `indirect_copy`: INDIRECT_COPY 0xe7 (`local_gather`, 8 cores x 16 partitions);
//! - `dma_indirect`: DMA_INDIRECT 0xbb (gather, scatter or both; OOB policies);
//! - `embedding`: PSEUDO_EMBEDDING_UPDATE 0xca (the memory effect of EMBEDDING_UPDATE);
//! - `direct2d`: DMA_MEMCPY 0xb8 (DMA_DIRECT2D);
//! - `ap_dma`: the access-pattern DMAs of the software DGE ([`ap_dma`]).
//!
//! # Fail closed
//!
//! Every datapath runs in two phases. The *plan* reads what it needs and checks every
//! address with the fabric's range check, every index under a hard-error policy and
//! every duplicate rule; the *commit* then writes. An instruction that fails leaves the
//! fabric and the [`CoreState`] exactly as they were.
//!
//! # Readings where the contract is silent (shared with the other routes)
//!
//! - POOL instructions (0x67, 0x68, 0xe7) read every input (indices, Pool_Buffer, source
//!   rows) before writing any destination element; destination elements are then written
//!   in channel order, element order, so a pattern that visits one element twice keeps
//!   the last value.
//! - DMA instructions (0xbb, 0xca, 0xb8) read their index tensors first, then move
//!   element by element in order: each element's source is read when it moves, so a
//!   later element sees an earlier one's write (duplicates accumulate, `np.add.at`).
//! - Channel numbering follows [`crate::core_state`]: active channel `k` uses partition
//!   `P + k` of each pattern, `P` being that pattern's own ADDR4 partition.
//! - DMA_INDIRECT checks position by position, src side before dst side; the first
//!   failure (hard OOB, an index row off the fabric, a duplicate) is the error.
//! - DMA_INDIRECT with a shape register walks the 4-D tensor it gives along its gather or
//!   scatter dim (`dma_indirect`'s module docs); without one, row `idx` is at
//!   `start + idx * elem_size`.

mod ap_dma;
mod direct2d;
mod dma_indirect;
mod embedding;
mod gather;
mod indirect_copy;
#[cfg(test)]
mod test_support;

pub use ap_dma::ap_dma;

use dma::{Addr4, Fabric, FabricAddr, Location, Space};

use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath, Rule};
use crate::isa::{Instruction, Tensor4d};

/// Runs `inst` on `fabric` with the reference semantics, updating `state` (the
/// Pool_Buffers; the registers are only read). Validates `inst` for the fabric's
/// generation first; on any error nothing is written.
pub fn execute(
    fabric: &mut Fabric,
    state: &mut CoreState,
    inst: &Instruction,
) -> Result<Outcome, Error> {
    let _span = tracing::debug_span!("reference", opcode = inst.opcode().code()).entered();
    inst.validate(fabric.generation())?;
    match inst {
        Instruction::PoolBufferLoad(p) => {
            gather::pool_buffer_load(fabric, &mut state.pool_buffers, p)
        }
        Instruction::Gather(g) => gather::gather(fabric, &mut state.pool_buffers, g),
        Instruction::IndirectCopy(ic) => indirect_copy::indirect_copy(fabric, ic),
        Instruction::DmaIndirect(d) => dma_indirect::dma_indirect(fabric, &state.regs, d),
        Instruction::PseudoEmbeddingUpdate(e) => embedding::embedding_update(fabric, e),
        Instruction::DmaMemcpy(d) => direct2d::dma_memcpy(fabric, d),
    }
}

/// A TENSOR4D operand of a POOL instruction, decoded once: where it starts, its element
/// size, and the element offsets (in elements, relative to the start) in element order.
struct Pattern {
    at: FieldPath,
    space: Space,
    partition: u32,
    offset: u64,
    elem_size: u64,
    elems: Vec<i64>,
}

impl Pattern {
    /// Decodes `t` (elements of `elem_size` bytes), named `at` in errors.
    fn new(at: FieldPath, t: &Tensor4d, elem_size: usize) -> Result<Pattern, Error> {
        let (space, partition, offset) = t.start_addr().decode().map_err(dma_at(at))?;
        Ok(Pattern {
            at,
            space,
            partition,
            offset: u64::from(offset),
            elem_size: elem_size as u64,
            elems: element_offsets(t),
        })
    }

    /// The partition active channel `k` uses.
    fn partition(&self, k: u32) -> u32 {
        // Validation proved partition + num_active_channels <= 128.
        self.partition.saturating_add(k)
    }

    /// Elements the pattern visits.
    fn len(&self) -> usize {
        self.elems.len()
    }

    /// The fabric addresses of active channel `k`'s elements, in element order, each
    /// range-checked for one element.
    fn addrs<'a>(
        &'a self,
        fabric: &'a Fabric,
        k: u32,
    ) -> impl Iterator<Item = Result<FabricAddr, Error>> + 'a {
        self.elems.iter().map(move |&rel| self.addr(fabric, k, rel))
    }

    /// The checked fabric address of the element `rel` elements from the start.
    fn addr(&self, fabric: &Fabric, k: u32, rel: i64) -> Result<FabricAddr, Error> {
        // |rel| < 2^33 and elem_size <= 4: the product fits in i64.
        let byte = self.offset.checked_add_signed(rel * self.elem_size as i64);
        let offset = byte.ok_or(Error::InvalidField {
            field: self.at,
            value: self.offset,
            rule: Rule::PatternBelowPartition,
        })?;
        let loc = Location {
            space: self.space,
            partition: self.partition(k),
            offset,
        };
        located(fabric, self.at, loc, self.elem_size)
    }

    /// Every element address of active channels `0..channels`, channel after channel
    /// (each channel's [`Pattern::len`] of them); the first that fails is the error.
    fn all_addrs(&self, fabric: &Fabric, channels: u32) -> Result<Vec<FabricAddr>, Error> {
        (0..channels).flat_map(|k| self.addrs(fabric, k)).collect()
    }
}

/// The element offsets of a TENSOR4D in element order: dim 3 outermost, dim 0 innermost,
/// offset `sum(step_elem[d] * c[d])`. Exact in i64 (|step| < 2^15, counts < 2^16).
fn element_offsets(t: &Tensor4d) -> Vec<i64> {
    let [n0, n1, n2, n3] = t.num_elem().map(i64::from);
    let [s0, s1, s2, s3] = t.step_elem().map(i64::from);
    let mut out = Vec::with_capacity(usize::try_from(t.element_count()).unwrap_or(0));
    for c3 in 0..n3 {
        for c2 in 0..n2 {
            for c1 in 0..n1 {
                let base = c3 * s3 + c2 * s2 + c1 * s1;
                out.extend((0..n0).map(|c0| base + c0 * s0));
            }
        }
    }
    out
}

/// The fabric address of `loc`, with `len` bytes from it range-checked; `at` names the
/// field the location came from.
fn located(fabric: &Fabric, at: FieldPath, loc: Location, len: u64) -> Result<FabricAddr, Error> {
    let addr = fabric.map().fabric_addr(loc).map_err(dma_at(at))?;
    fabric.check(addr, len).map_err(dma_at(at))?;
    Ok(addr)
}

/// The checked address of `len` bytes at `offset` bytes past the ADDR4 `base`, in
/// partition `partition(base) + k` (the partition-relative form of an on-core operand).
fn addr4_at(
    fabric: &Fabric,
    at: FieldPath,
    base: Addr4,
    (k, offset): (u32, u64),
    len: u64,
) -> Result<FabricAddr, Error> {
    let (space, partition, start) = base.decode().map_err(dma_at(at))?;
    // Saturation leaves the partition or the offset out of range: `located` rejects it.
    let loc = Location {
        space,
        partition: partition.saturating_add(k),
        offset: u64::from(start).saturating_add(offset),
    };
    located(fabric, at, loc, len)
}

/// The first `size` bytes of the little-endian `bits`: an immediate validation proved to
/// fit a `size`-byte dtype, as that element (`size` is at most 4, so the whole image is
/// never the answer).
fn low_bytes(bits: &[u8; 4], size: usize) -> &[u8] {
    bits.get(..size).unwrap_or(bits)
}

/// `base + index * size` as a fabric address, or the overflow error.
fn row_addr(base: FabricAddr, index: u64, size: u64) -> Result<FabricAddr, dma::Error> {
    index
        .checked_mul(size)
        .and_then(|off| base.checked_add(off))
        .ok_or(dma::Error::AddressOverflow {
            addr: base.0,
            len: size,
        })
}

/// Writes `values` (`size` bytes each) at `addrs` in order, as one write per element
/// would: a run of consecutive addresses is one write, and a run whose write is refused
/// (it leaves the fabric as it was) is written element by element, so an error is the
/// one its first refused element gives.
fn write_each(
    fabric: &mut Fabric,
    addrs: &[FabricAddr],
    values: &[u8],
    size: usize,
) -> Result<(), Error> {
    let mut rest = addrs.iter().zip(values.chunks_exact(size)).peekable();
    let mut start = 0;
    while let Some((&first, _)) = rest.next() {
        let mut n = 1;
        while rest
            .next_if(|(a, _)| first.0.checked_add((n * size) as u64) == Some(a.0))
            .is_some()
        {
            n += 1;
        }
        let run = &values[start * size..(start + n) * size];
        if fabric.write(first, run).is_err() {
            for (k, value) in run.chunks_exact(size).enumerate() {
                fabric.write(addrs[start + k], value)?;
            }
        }
        start += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Runs written whole leave what one write per element leaves, and fail alike.
        #[test]
        fn write_each_is_one_write_per_element(
            steps in proptest::collection::vec((0..3u64, any::<bool>()), 1..40),
            size in prop_oneof![Just(1usize), Just(2), Just(4)],
            near_end in any::<bool>(),
        ) {
            let g = dma::Generation::Cayman;
            let base = match near_end {
                true => g.hbm_bytes() - 40,
                false => 0x1000,
            };
            // mostly consecutive addresses, with repeats and jumps
            let mut at = base;
            let addrs: Vec<FabricAddr> = steps
                .iter()
                .map(|&(jump, back)| {
                    at = match (jump, back) {
                        (0, true) => at,
                        (0, false) => at + size as u64,
                        (j, _) => at + j * 7,
                    };
                    FabricAddr(at)
                })
                .collect();
            let values: Vec<u8> = (0..addrs.len() * size).map(|i| i as u8 ^ 0x5a).collect();
            let (mut runs, mut each) = (Fabric::new(g), Fabric::new(g));
            let got = write_each(&mut runs, &addrs, &values, size);
            let mut want = Ok(());
            for (a, v) in addrs.iter().zip(values.chunks_exact(size)) {
                if let Err(e) = each.write(*a, v) {
                    want = Err(Error::from(e));
                    break;
                }
            }
            prop_assert_eq!(got.map_err(|e| e.to_string()), want.map_err(|e| e.to_string()));
            prop_assert_eq!(runs.first_difference(&each), None);
        }
    }

    #[test]
    fn element_order_is_dim0_innermost() {
        let a = Addr4::encode(Space::Sbuf, 0, 0).unwrap();
        let t = Tensor4d::new(a, [1, 10, 100, -1], [2, 2, 1, 2]);
        assert_eq!(element_offsets(&t), vec![0, 1, 10, 11, -1, 0, 9, 10]);
    }

    #[test]
    fn pattern_addresses_follow_the_channel() {
        let fabric = Fabric::new(dma::Generation::Sunda);
        let a = Addr4::encode(Space::Sbuf, 3, 8).unwrap();
        let at = FieldPath::new("T", "p");
        let p = Pattern::new(at, &Tensor4d::new(a, [2, 0, 0, 0], [3, 1, 1, 1]), 4).unwrap();
        let sbuf = dma::addr::SBUF_BASE;
        let stride = dma::addr::SBUF_STRIDE;
        let ch0: Vec<_> = p.addrs(&fabric, 0).map(Result::unwrap).collect();
        let p3 = sbuf + 3 * stride;
        assert_eq!(ch0, [8, 16, 24].map(|o| FabricAddr(p3 + o)));
        let ch2: Vec<_> = p.addrs(&fabric, 2).map(Result::unwrap).collect();
        assert_eq!(ch2[1], FabricAddr(sbuf + 5 * stride + 16));
        let all = p.all_addrs(&fabric, 125).unwrap();
        assert_eq!((all.len(), &all[6..9]), (375, &ch2[..]));
        assert!(p.all_addrs(&fabric, 126).is_err());
        let below = Pattern::new(at, &Tensor4d::new(a, [-4, 0, 0, 0], [2, 1, 1, 1]), 4).unwrap();
        let e = below.addrs(&fabric, 0).nth(1).unwrap().unwrap_err();
        assert_eq!(e.rule(), Some(Rule::PatternBelowPartition));
    }

    #[test]
    fn row_addresses_are_checked() {
        assert_eq!(row_addr(FabricAddr(8), 3, 4).unwrap(), FabricAddr(20));
        assert!(matches!(
            row_addr(FabricAddr(u64::MAX - 3), 1, 4),
            Err(dma::Error::AddressOverflow { .. })
        ));
    }
}
