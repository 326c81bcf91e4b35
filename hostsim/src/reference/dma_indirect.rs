//! DMA_INDIRECT 0xbb (DMA_INDIRECT1D): `n` rows of `elem_size` bytes, the source row
//! picked by a u32 index (gather), the destination row picked by one (scatter), or both.
//!
//! For `k` in order: the source row is `src_start + sidx[k] * elem_size` on an indirect
//! source, else `src_start + k * src_step_elem * elem_size` (likewise the destination);
//! `dst (op)= src` element-wise over `dtype` with the compute op (NONE copies).
//!
//! With a shape register (the walk `[outer][n][inner]` of `validate::dma_indirect_walk`,
//! the struct module's semantics) the loops are `o`, then `k`, then `i`: the indexed
//! element is `start + ((o * extent + idx[k]) * inner + i) * elem_size`, the direct one
//! `start + ((o * n + k) * inner + i) * step_elem * elem_size`; without one
//! `outer = inner = 1` and this is the row loop above.
//!
//! Bounds, per indirect side with its BOUND_CHECK_REG: an index at or past an enabled
//! bound, or at or past the shape's extent along its dim, is out of bounds (the smaller
//! is the bound reported). With `idx_bound_is_err` the instruction fails naming the side,
//! position, value and bound; otherwise position `k` moves nothing and each OOB side is
//! reported (src before dst), raising the notification unless that side's register sets
//! `bc_disable_oob_error_notif`. An in-bounds (or unbounded) index whose row leaves the
//! fabric is a hard error, whatever the other side did. In scatter modes, two non-skipped
//! positions with one destination index fail unless `non_unique_dst_idx`; with it they
//! apply in order (accumulate, or the last copy wins). Positions are checked in order and
//! the first failure is the error.
//!
//! reshape_kind GATHER_TRANSPOSE (validation: source indices only, plain copy): position
//! `r`'s source row is checked as above; its `C = elem_size / dtype size` elements go
//! down column `r` of the destination: element `c` to row `c`, element `r` of it, where
//! row `c` starts `c * dst_step_elem` elements after `dst_start` on HBM, and
//! `c * dst_step_elem` partitions on (same offset) on SBUF/PSUM. Validation put every
//! destination row on the fabric. Rows move in position order, each read when it moves.

use dma::{Addr4, Dtype, Fabric, FabricAddr, Location, Space};
use hashbrown::HashMap;

use super::{addr4_at, row_addr};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::validate::dma_indirect_walk;
use crate::isa::{BoundCheckReg, BoundRegisters, DmaIndirect1d, IndirectWalk, ReshapeKind};

/// Bytes per index (UINT32).
const INDEX_BYTES: u64 = 4;

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("DMA_INDIRECT1D", field)
}

/// The indices of an indirect side and their bound.
struct Indices {
    values: Vec<u32>,
    bound: Option<u64>,
    notify: bool,
}

/// One side of the instruction, decoded for the plan.
struct Side {
    which: IndexSide,
    start_at: FieldPath,
    start: FabricAddr,
    /// Bytes from one row (an index value, or a direct position) to the next: the
    /// walk's `inner` elements of `elem_size` on an indexed side, of `step_elem` elements
    /// on a direct one.
    step: u64,
    /// Bytes of a position's first element, checked on the fabric.
    len: u64,
    /// Bytes from one outer point of the walk to the next, and from one inner point to
    /// the next.
    outer_step: u64,
    inner_step: u64,
    indices: Option<Indices>,
}

/// Where position `k` of one side goes.
enum Row {
    /// The checked row address.
    At(FabricAddr),
    /// An out-of-bounds index under the soft policy.
    Skip(u32),
}

impl Side {
    /// Reads the side's indices (when indirect) and their bound, the smaller of the
    /// register's and the walk's extent.
    fn read(
        fabric: &Fabric,
        regs: &BoundRegisters,
        (which, walk): (IndexSide, &IndirectWalk),
        d: &DmaIndirect1d,
    ) -> Result<Side, Error> {
        let mode = d.flags().indirect_mode()?;
        let (indirect, names, side) = match which {
            IndexSide::Src => (
                mode.gathers(),
                ("src_start_addr", "src_idx_start_addr"),
                d.src(),
            ),
            IndexSide::Dst => (
                mode.scatters(),
                ("dst_start_addr", "dst_idx_start_addr"),
                d.dst(),
            ),
        };
        let n = u64::from(d.src_num_elem());
        let indices = match indirect {
            true => {
                let index = (at(names.1), side.idx_start_addr);
                let mut ix = read_indices(fabric, regs, index, side.bound, n as usize)?;
                ix.bound = walk.bound(ix.bound);
                Some(ix)
            }
            false => None,
        };
        let size = u64::from(d.src_elem_size());
        // A transposed destination's position `r` is column `r`: one element per step.
        let (unit, len) = match (d.reshape_kind()?, which) {
            (ReshapeKind::GatherTranspose, IndexSide::Dst) => {
                let dsize = d.dtype()?.size() as u64;
                (dsize, dsize)
            }
            _ if indirect => (size, size),
            _ => (u64::from(side.step_elem) * size, size),
        };
        // Rows per outer point: the extent (indexed) or the n positions (direct).
        let rows = match (indirect, walk.extent) {
            (true, Some(extent)) => u64::from(extent),
            _ => n,
        };
        // Validation and dma_indirect_walk put the walk on the fabric, so these products
        // stay far below 2^64 (saturation only keeps a broken invariant from panicking).
        let step = walk.inner.saturating_mul(unit);
        Ok(Side {
            which,
            start_at: at(names.0),
            start: side.start_addr,
            step,
            len,
            outer_step: rows.saturating_mul(step),
            inner_step: unit,
            indices,
        })
    }

    /// The element at outer point `o` and inner point `i` of the position whose first
    /// element is `first` (on the fabric: `dma_indirect_walk` checked the whole walk).
    fn element(&self, first: FabricAddr, o: u64, i: u64) -> Result<FabricAddr, Error> {
        let outer = o.checked_mul(self.outer_step);
        let inner = i.checked_mul(self.inner_step);
        let off = outer.zip(inner).and_then(|(a, b)| a.checked_add(b));
        let addr = off.and_then(|off| first.checked_add(off));
        let overflow = dma::Error::AddressOverflow {
            addr: first.0,
            len: self.len,
        };
        Ok(addr.ok_or(overflow)?)
    }

    /// Position `k`'s index value, on an indexed side.
    fn value(&self, k: u32) -> Option<u32> {
        let ix = self.indices.as_ref()?;
        ix.values.get(k as usize).copied()
    }

    /// Position `k`'s row of `size` bytes: checked, skipped, or the error.
    fn row(&self, fabric: &Fabric, k: u32, size: u64, hard: bool) -> Result<Row, Error> {
        let Some(ix) = &self.indices else {
            // k < 4096 and k * step is inside the run validation put on the fabric.
            let Some(addr) = self
                .start
                .checked_add(u64::from(k).saturating_mul(self.step))
            else {
                let overflow = dma::Error::AddressOverflow {
                    addr: self.start.0,
                    len: self.len,
                };
                return Err(dma_at(self.start_at)(overflow));
            };
            fabric
                .check(addr, self.len)
                .map_err(dma_at(self.start_at))?;
            return Ok(Row::At(addr));
        };
        let value = ix.values.get(k as usize).copied().unwrap_or(0);
        match ix.bound {
            Some(bound) if u64::from(value) >= bound && hard => Err(Error::IndexOutOfBounds {
                side: self.which,
                position: k,
                value,
                bound,
            }),
            Some(bound) if u64::from(value) >= bound => Ok(Row::Skip(value)),
            _ => {
                let wild = |source| Error::IndexAddress {
                    side: self.which,
                    position: k,
                    value,
                    source,
                };
                let addr = row_addr(self.start, value.into(), self.step);
                let overflow = dma::Error::AddressOverflow {
                    addr: self.start.0,
                    len: size,
                };
                let addr = addr.map_err(|_| overflow).map_err(wild)?;
                fabric.check(addr, size).map_err(wild)?;
                Ok(Row::At(addr))
            }
        }
    }
}

/// `n` u32 indices at `index` (an ADDR4) and the bound `bc` names.
fn read_indices(
    fabric: &Fabric,
    regs: &BoundRegisters,
    (index_at, index): (FieldPath, Addr4),
    bc: BoundCheckReg,
    n: usize,
) -> Result<Indices, Error> {
    let addr = addr4_at(fabric, index_at, index, (0, 0), n as u64 * INDEX_BYTES)?;
    let mut values = vec![0u32; n];
    fabric.read_indices(addr, Dtype::U32, &mut values)?;
    Ok(Indices {
        values,
        bound: regs.bound(bc)?,
        notify: !bc.bc_disable_oob_error_notif(),
    })
}

/// One moving position: its first element on each side, its number and its index
/// values (for the sanitizer's notes).
struct Move {
    from: FabricAddr,
    to: FabricAddr,
    position: u32,
    values: [Option<i64>; 2],
}

impl Move {
    /// Notes on `fabric`'s access log that the accesses after serve this position.
    fn note(&self, fabric: &Fabric) {
        fabric.note(u64::from(self.position), self.values);
    }
}

/// The checked moves of the instruction and its report.
struct Plan {
    moves: Vec<Move>,
    outcome: Outcome,
}

/// DMA_INDIRECT: checks the walk, plans every position, then moves the elements in walk
/// order.
pub(super) fn dma_indirect(
    fabric: &mut Fabric,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<Outcome, Error> {
    let dtype = d.dtype()?;
    let size = u64::from(d.src_elem_size());
    let walk = dma_indirect_walk(fabric.map(), regs, d)?;
    let (mut plan, sides) = plan(fabric, regs, d, &walk)?;
    match d.reshape_kind()? {
        ReshapeKind::Rows => move_elements(fabric, &plan.moves, &sides, &walk, d)?,
        ReshapeKind::GatherTranspose => {
            let step = u32::from(d.dst_step_elem());
            for m in &plan.moves {
                m.note(fabric);
                write_column(fabric, m.from, (m.to, step), size, dtype.size())?;
            }
        }
    }
    let elements = plan.moves.len() as u64 * walk.per_position();
    plan.outcome.bytes_written = elements * size;
    Ok(plan.outcome)
}

/// The walk's elements in order (`o`, then the moving positions, then `i`), each
/// `dst (op)= src` over the dtype as it moves.
fn move_elements(
    fabric: &mut Fabric,
    moves: &[Move],
    [src, dst]: &[Side; 2],
    walk: &IndirectWalk,
    d: &DmaIndirect1d,
) -> Result<(), Error> {
    let (dtype, op) = (d.dtype()?, d.compute_op()?);
    let size = u64::from(d.src_elem_size());
    for o in 0..walk.outer {
        for m in moves {
            m.note(fabric);
            for i in 0..walk.inner {
                let (from, to) = (src.element(m.from, o, i)?, dst.element(m.to, o, i)?);
                fabric.reduce(from, to, size, dtype, op)?;
            }
        }
    }
    Ok(())
}

/// Gather-transpose: the `size`-byte row at `src` written down `column` (its element in
/// destination row 0), element `c` of `esize` bytes into row `c`, `c * step` rows on.
fn write_column(
    fabric: &mut Fabric,
    src: FabricAddr,
    (column, step): (FabricAddr, u32),
    size: u64,
    esize: usize,
) -> Result<(), Error> {
    let mut row = vec![0u8; size as usize];
    fabric.read(src, &mut row)?;
    let start = fabric.map().locate(column)?;
    for (c, element) in (0u32..).zip(row.chunks_exact(esize)) {
        let at = match start.space {
            Space::Hbm => row_addr(column, u64::from(c * step), esize as u64)?,
            _ => {
                let partition = start.partition + c * step;
                fabric.map().fabric_addr(Location { partition, ..start })?
            }
        };
        fabric.write(at, element)?;
    }
    Ok(())
}

/// Resolves both sides of every position, applying the OOB and duplicate rules.
fn plan(
    fabric: &Fabric,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
    walk: &IndirectWalk,
) -> Result<(Plan, [Side; 2]), Error> {
    let flags = d.flags();
    let (hard, unique) = (flags.idx_bound_is_err(), !flags.non_unique_dst_idx());
    let src = Side::read(fabric, regs, (IndexSide::Src, walk), d)?;
    let dst = Side::read(fabric, regs, (IndexSide::Dst, walk), d)?;
    let size = u64::from(d.src_elem_size());
    let n = u32::from(d.src_num_elem());
    let mut plan = Plan {
        moves: Vec::with_capacity(n as usize),
        outcome: Outcome::default(),
    };
    let mut first_use: HashMap<u32, u32> = HashMap::new();
    for k in 0..n {
        let rows = (
            src.row(fabric, k, size, hard)?,
            dst.row(fabric, k, size, hard)?,
        );
        let (from, to) = match rows {
            (Row::At(from), Row::At(to)) => (from, to),
            (s, t) => {
                report_skips(&mut plan.outcome, k, [(&src, s), (&dst, t)]);
                continue;
            }
        };
        if let (Some(ix), true) = (&dst.indices, unique) {
            let value = ix.values.get(k as usize).copied().unwrap_or(0);
            if let Some(&first) = first_use.get(&value) {
                return Err(Error::DuplicateDestination {
                    value,
                    first,
                    second: k,
                });
            }
            first_use.insert(value, k);
        }
        let values = [&src, &dst].map(|side| side.value(k).map(i64::from));
        plan.moves.push(Move {
            from,
            to,
            position: k,
            values,
        });
    }
    Ok((plan, [src, dst]))
}

/// Records the skipped sides of position `k` (src first) and the notification.
fn report_skips(outcome: &mut Outcome, k: u32, rows: [(&Side, Row); 2]) {
    for (side, row) in rows {
        if let Row::Skip(value) = row {
            outcome.skipped.push(SkippedIndex {
                side: side.which,
                position: k,
                value,
            });
            let notify = side.indices.as_ref().is_some_and(|ix| ix.notify);
            outcome.oob_notification |= notify;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    crate::test_support::dma_indirect::dma_indirect_cases!(route());
}
