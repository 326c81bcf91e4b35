//! INDIRECT_COPY 0xe7 (S4D4_IC, NKI `local_gather`), Gather sub-mode.
//!
//! The active channels form cores of 16 partitions. Core `c` reads its `n = num_elem / E`
//! u16 indices column-major from its 16-partition index block (index `j` at partition
//! `16c + j % 16`, byte `2 * (j / 16)` past `index_addr`), and every partition `q` of the
//! core writes, for each `j`, the run of `E` elements of its own source row starting at
//! element `index[j]`: element `index[j] + t` where it is below `src_buffer_size`, else 0.
//! Indices are element offsets (DESIGN.md: the NKI reference wins over the seed's
//! pseudocode). The `num_elem` outputs of a partition go to the dst TENSOR4D, in element
//! order. Each operand uses partition `its ADDR4 partition + 16c + r` (see
//! [`crate::core_state`]).

use dma::Fabric;

use super::{addr4_at, Pattern};
use crate::core_state::Outcome;
use crate::error::Error;
use crate::isa::rule::FieldPath;
use crate::isa::validate::CORE_PARTITIONS;
use crate::isa::{Indirect, S4d4Ic};

/// The geometry of one INDIRECT_COPY, in elements and bytes.
struct Geometry {
    /// Elements per index (`src_num_elem_per_idx`, E).
    per: usize,
    /// Outputs per partition (`src.i.p.num_elem`).
    total: usize,
    /// Element bytes (`in_dtype == out_dtype`).
    size: usize,
    /// Elements in each source row (`src_buffer_size`).
    buffer: u64,
}

/// INDIRECT_COPY: reads every index and source run into the outputs, then writes them.
pub(super) fn indirect_copy(fabric: &mut Fabric, ic: &S4d4Ic) -> Result<Outcome, Error> {
    let src = ic.src().indirect();
    let geo = Geometry {
        per: usize::from(ic.src_num_elem_per_idx()),
        total: usize::from(src.num_elem()),
        size: ic.in_dtype()?.size(),
        buffer: u64::from(ic.src_buffer_size()),
    };
    let channels = u32::from(ic.header().num_active_channels());
    let out = read_outputs(fabric, &src, &geo, channels)?;
    let dst_at = FieldPath::new("S4D4_IC", "dst.t");
    let dst = Pattern::new(dst_at, &ic.dst().tensor(), geo.size)?;
    // every address is found (or refused) before anything is written
    let addrs = dst.all_addrs(fabric, channels)?;
    // Validation proved total >= 1 and size >= 1, so the chunk lengths are non-zero.
    let rows = out.chunks_exact(geo.total * geo.size);
    for (addrs, row) in addrs.chunks(dst.len().max(1)).zip(rows) {
        super::write_each(fabric, addrs, row, geo.size)?;
    }
    Ok(Outcome {
        bytes_written: out.len() as u64,
        ..Outcome::default()
    })
}

/// The bytes every active channel writes, channel after channel (`total` elements each).
fn read_outputs(
    fabric: &Fabric,
    src: &Indirect,
    geo: &Geometry,
    channels: u32,
) -> Result<Vec<u8>, Error> {
    let row_bytes = geo.total * geo.size;
    let core_bytes = row_bytes * CORE_PARTITIONS as usize;
    let mut out = vec![0; row_bytes * channels as usize];
    let mut ids = vec![0u16; geo.total / geo.per];
    // Validation proved channels is a multiple of 16 and per, total, size >= 1.
    for (c, core) in (0u32..).zip(out.chunks_exact_mut(core_bytes)) {
        read_index_block(fabric, src, c, &mut ids)?;
        for (r, row) in (0u32..).zip(core.chunks_exact_mut(row_bytes)) {
            let q = c * CORE_PARTITIONS + r;
            for (run, &id) in row.chunks_exact_mut(geo.per * geo.size).zip(&ids) {
                read_run(fabric, src, geo, (q, u64::from(id)), run)?;
            }
        }
    }
    Ok(out)
}

/// Core `c`'s indices: index `j` at partition `16c + j % 16`, byte `2 * (j / 16)`.
fn read_index_block(fabric: &Fabric, src: &Indirect, c: u32, ids: &mut [u16]) -> Result<(), Error> {
    let at = FieldPath::new("S4D4_IC", "src.i.p.index_addr");
    for (j, id) in (0u32..).zip(ids.iter_mut()) {
        let k = c * CORE_PARTITIONS + j % CORE_PARTITIONS;
        let offset = 2 * u64::from(j / CORE_PARTITIONS);
        let addr = addr4_at(fabric, at, src.index_addr(), (k, offset), 2)?;
        let mut bytes = [0u8; 2];
        fabric.read(addr, &mut bytes)?;
        *id = u16::from_le_bytes(bytes);
    }
    Ok(())
}

/// Fills `run` (E elements) from channel `q`'s source row at element `id`: the part
/// below `src_buffer_size` is read, the rest stays 0 (`run` arrives zeroed).
fn read_run(
    fabric: &Fabric,
    src: &Indirect,
    geo: &Geometry,
    (q, id): (u32, u64),
    run: &mut [u8],
) -> Result<(), Error> {
    let inside = geo.buffer.saturating_sub(id).min(geo.per as u64) as usize;
    let Some(head) = run.get_mut(..inside * geo.size) else {
        return Ok(());
    };
    if head.is_empty() {
        return Ok(());
    }
    let at = FieldPath::new("S4D4_IC", "src.i.p.data_addr");
    let size = geo.size as u64;
    let addr = addr4_at(
        fabric,
        at,
        src.data_addr(),
        (q, id * size),
        head.len() as u64,
    )?;
    fabric.read(addr, head)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    crate::test_support::indirect_copy::indirect_copy_cases!(route());
}
