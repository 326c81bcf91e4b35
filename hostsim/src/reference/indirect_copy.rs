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
    dst.check(fabric, channels)?;
    let mut addrs = Vec::with_capacity(dst.len());
    // Validation proved total >= 1 and size >= 1, so the chunk lengths are non-zero.
    for (k, row) in (0..channels).zip(out.chunks_exact(geo.total * geo.size)) {
        addrs.clear();
        for addr in dst.addrs(fabric, k) {
            addrs.push(addr?);
        }
        for (addr, value) in addrs.iter().zip(row.chunks_exact(geo.size)) {
            fabric.write(*addr, value)?;
        }
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
    use crate::core_state::CoreState;
    use crate::isa::{Indirect, Rule, S4d4Ic, Tensor4d};
    use dma::{Dtype, Fabric};

    const DATA: u32 = 0x100;
    const DST: u32 = 0x800;

    /// Source rows (u16) in partitions `0..channels`: element `e` of partition `q` is
    /// `q * 100 + e`, `len` elements; destinations prefilled with 0xffff.
    fn rows(f: &mut Fabric, channels: u32, len: u16, outputs: usize) {
        for q in 0..channels {
            let row: Vec<u16> = (0..len).map(|e| q as u16 * 100 + e).collect();
            put(f, sbuf_at(q, DATA), &row);
            put(f, sbuf_at(q, DST), &vec![0xffffu16; outputs]);
        }
    }

    /// Index `j` of core `c` written column-major into the block at partition `base`.
    fn indices(f: &mut Fabric, base: u32, c: u32, ids: &[u16]) {
        for (j, id) in ids.iter().enumerate() {
            let j = j as u32;
            put(f, sbuf_at(base + 16 * c + j % 16, 2 * (j / 16)), &[*id]);
        }
    }

    fn copy(index_partition: u32, num_elem: u16, per: u8, size: u32, channels: u8) -> S4d4Ic {
        let src = Indirect::new(sbuf(index_partition, 0), sbuf(0, DATA), num_elem);
        let dst = Tensor4d::contiguous(sbuf(0, DST), num_elem);
        S4d4Ic::gather(src, dst, Dtype::U16, per, size, channels)
    }

    #[test]
    fn one_element_per_index_column_major() {
        let mut f = fabric();
        rows(&mut f, 16, 64, 18);
        // j = 0..16 in column 0 (partitions 64..80), j = 16, 17 in column 1.
        let ids: Vec<u16> = (0..16).map(|r| 2 * r).chain([63, 64]).collect();
        indices(&mut f, 64, 0, &ids);
        let out = run(&mut f, &mut CoreState::new(), copy(64, 18, 1, 64, 16));
        let mut p3: Vec<u16> = (0..16).map(|j| 300 + 2 * j).collect();
        p3.extend([363, 0]);
        assert_eq!(get::<u16>(&f, sbuf_at(3, DST), 18), p3);
        assert_eq!(
            get::<u16>(&f, sbuf_at(15, DST), 4),
            [1500, 1502, 1504, 1506]
        );
        assert_eq!(get::<u16>(&f, sbuf_at(15, DST + 32), 2), [1563, 0]);
        assert_eq!(out.bytes_written, 16 * 18 * 2);
        assert!(out.skipped.is_empty());
    }

    #[test]
    fn runs_of_four_zero_past_the_buffer_end() {
        let mut f = fabric();
        rows(&mut f, 16, 10, 12);
        indices(&mut f, 0, 0, &[0, 8, 10]);
        run(&mut f, &mut CoreState::new(), copy(0, 12, 4, 10, 16));
        for q in [0u16, 7, 15] {
            let d = q * 100;
            let expected = [d, d + 1, d + 2, d + 3, d + 8, d + 9, 0, 0, 0, 0, 0, 0];
            assert_eq!(
                get::<u16>(&f, sbuf_at(u32::from(q), DST), 12),
                expected,
                "partition {q}"
            );
        }
    }

    #[test]
    fn each_core_reads_its_own_index_block() {
        let mut f = fabric();
        rows(&mut f, 32, 16, 4);
        indices(&mut f, 96, 0, &[1, 5]);
        indices(&mut f, 96, 1, &[7, 15]);
        let out = run(&mut f, &mut CoreState::new(), copy(96, 4, 2, 16, 32));
        assert_eq!(get::<u16>(&f, sbuf_at(2, DST), 4), [201, 202, 205, 206]);
        assert_eq!(get::<u16>(&f, sbuf_at(17, DST), 4), [1707, 1708, 1715, 0]);
        assert_eq!(out.bytes_written, 32 * 4 * 2);
    }

    #[test]
    fn strided_destination_in_element_order() {
        let mut f = fabric();
        rows(&mut f, 16, 8, 8);
        indices(&mut f, 32, 0, &[6, 2]);
        let src = Indirect::new(sbuf(32, 0), sbuf(0, DATA), 4);
        // dst elements 0, 2, 4, 6.
        let dst = Tensor4d::new(sbuf(0, DST), [2, 0, 0, 0], [4, 1, 1, 1]);
        run(
            &mut f,
            &mut CoreState::new(),
            S4d4Ic::gather(src, dst, Dtype::U16, 2, 8, 16),
        );
        assert_eq!(
            get::<u16>(&f, sbuf_at(1, DST), 8),
            [106, 0xffff, 107, 0xffff, 102, 0xffff, 103, 0xffff]
        );
    }

    #[test]
    fn invalid_copies_fail_closed() {
        let mut f = fabric();
        rows(&mut f, 16, 8, 8);
        let mut s = CoreState::new();
        let e = fails_closed(&mut f, &mut s, copy(0, 6, 3, 8, 16));
        assert_eq!(e.rule(), Some(Rule::NumElemPerIdx));
        let e = fails_closed(&mut f, &mut s, copy(0, 8, 2, 8, 8));
        assert_eq!(e.rule(), Some(Rule::IndirectCopyCoreChannels));
    }
}
