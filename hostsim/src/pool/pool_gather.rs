//! POOL_BUFFER_LOAD 0x67 and GATHER 0x68 (S4D4_GT, `pool_gather`) on the IVP core: the
//! Pool_Buffer window of each channel, the vector hit test and the miss policy.
//!
//! # pool_buffer_load
//!
//! Per active channel, the `src_mem_pattern` elements are gathered 32 at a time with the
//! gather of their width (NX8U, NX16, N_2X32) and scattered densely into the window image;
//! the windows of all channels replace the old ones only when every channel has loaded.
//!
//! # pool_gather, per 32-index block of a channel
//!
//! 1. The indices are gathered with the NX8U / NX16 (u8, u16: one 32-lane op) or N_2X32
//!    (u32: two 16-lane ops) gather and widened to 32-bit lanes.
//! 2. [`PoolBuffer::hit_test`]: `off = subn_2x32(index, start_index)` (wrapping) and
//!    `hit = ltun_2x32(off, window length)`, i.e. `(index & !511) == start_index` with
//!    `off` below the loaded count; a channel without a window misses every index.
//! 3. The window elements of the hit lanes are gathered from the window (predicated by
//!    `hit`, so a miss lane is never read and drains 0).
//! 4. IMMEDIATE_WRITE: `mov2nx8t(gathered, immediate, hit)` fills the misses and every
//!    lane is scattered; SKIP_WRITE: only the hit lanes are scattered (a masked scatter),
//!    so a miss leaves its destination element untouched.
//!
//! Every read (indices, windows) sees the fabric as it was before the instruction; the
//! scatters land in staged copies of each channel's destination span, committed after
//! the last channel (fail closed), in channel order. Then `free_pool_buffer` releases the
//! windows of the channels read.

use dma::{Dtype, Fabric};
use ivp::{alu, MemTable, VBool, VecReg, Width};

use super::cost::{PoolCost, Work, POOL_CORES};
use super::port::{FabricPort, SlicePort, StagedWrites};
use super::vector::{
    half_pred, wide_lanes, wide_mask, width_of, Lanes, Pattern, VectorCore, Wide, BLOCK,
};
use crate::core_state::{Outcome, PoolBuffers, Window};
use crate::error::Error;
use crate::isa::rule::FieldPath;
use crate::isa::{IndexMissBehavior, PoolBufferLoad, S4d4Gt};

/// One channel's Pool_Buffer as the gather sees it: its window, if loaded.
#[derive(Clone, Copy, Debug)]
pub struct PoolBuffer<'a> {
    window: Option<&'a Window>,
}

impl<'a> PoolBuffer<'a> {
    /// The buffer of a channel holding `window`.
    pub fn new(window: Option<&'a Window>) -> PoolBuffer<'a> {
        PoolBuffer { window }
    }

    /// The hit lanes among `live` of the 32 indices `index`, and each lane's offset in
    /// the window (`index - start_index`, wrapping), by `subn_2x32` and `ltun_2x32`.
    pub fn hit_test(&self, index: &Wide, live: u32) -> (u32, Wide) {
        let Some(w) = self.window else {
            return (0, [VecReg::ZERO; 2]);
        };
        let (start, len) = (alu::movva32(w.start_index()), alu::movva32(w.len()));
        let offs: Wide = std::array::from_fn(|h| alu::subn_2x32(&index[h], &start));
        let hit: [VBool; 2] =
            std::array::from_fn(|h| alu::andb(alu::ltun_2x32(&offs[h], &len), half_pred(live, h)));
        (wide_mask(hit), offs)
    }

    /// The window as a read-only port at address 0 (empty without a window).
    pub fn port(&self) -> SlicePort<'a> {
        SlicePort(self.window.map_or(&[], Window::bytes))
    }
}

/// The gather width of an element or index dtype.
fn width(dtype: Dtype) -> Width {
    // Validation refused 8-byte dtypes (Rule::PoolElementDtype): 1, 2 or 4 bytes here.
    width_of(dtype.size()).unwrap_or(Width::N2x32)
}

/// POOL_BUFFER_LOAD: loads every active channel's window, then installs them all.
pub fn pool_buffer_load(
    fabric: &Fabric,
    buffers: &mut PoolBuffers,
    p: &PoolBufferLoad,
) -> Result<(Outcome, PoolCost), Error> {
    let dtype = p.dtype()?;
    let at = FieldPath::new("POOL_BUFFER_LOAD", "src_mem_pattern");
    let src = Pattern::new(at, &p.src_mem_pattern());
    let channels = u32::from(p.header().num_active_channels());
    let mut core = VectorCore::new();
    let mut windows = Vec::with_capacity(channels as usize);
    for k in 0..channels {
        let channel = src.partition(k)?;
        buffers.window(channel)?;
        let bytes = load_channel(&mut core, fabric, &src, k, dtype)?;
        windows.push((channel, Window::new(p.start_index(), dtype, bytes)?));
    }
    // Every channel number was checked by `buffers.window` above.
    for (channel, window) in windows {
        buffers.load(channel, window)?;
    }
    let per_channel = Work {
        vectors: src.len().div_ceil(BLOCK) as u64,
        bytes: (src.len() * dtype.size()) as u64,
    };
    let work = Work::per_channel(per_channel, channels.into());
    let cost = PoolCost::estimate("pool_buffer_load", POOL_CORES, work);
    Ok((Outcome::default(), cost))
}

/// Channel `k`'s window image: the pattern's elements gathered and scattered densely.
fn load_channel(
    core: &mut VectorCore,
    fabric: &Fabric,
    src: &Pattern,
    k: u32,
    dtype: Dtype,
) -> Result<Vec<u8>, Error> {
    let size = dtype.size();
    let base = src.base(fabric.map(), k, size)?;
    let mut reads = FabricPort::new(fabric);
    reads.stage(base, src.span_bytes(size))?;
    let mut image = MemTable::zeroed(src.len() * size);
    for (b, lanes) in src.blocks(base.0).enumerate() {
        let values = core.gather(&reads, width(dtype), &lanes);
        let dense = Lanes {
            base: 0,
            offs: std::array::from_fn(|i| (b * BLOCK + i) as u32),
            live: lanes.live,
        };
        core.scatter(&mut image, width(dtype), &dense, &values);
    }
    dead_stores("pool_buffer_load", core.fence(&mut image))?;
    Ok(image.into_bytes())
}

/// Refused stores mean a kernel wrote outside what it staged: an error, nothing written.
fn dead_stores(kernel: &'static str, dead: u32) -> Result<(), Error> {
    match dead {
        0 => Ok(()),
        lanes => Err(Error::PoolDeadStores { kernel, lanes }),
    }
}

/// The decoded operands of one GATHER.
struct GatherOps {
    idx: Pattern,
    dst: Pattern,
    in_dtype: Dtype,
    out_dtype: Dtype,
    miss: IndexMissBehavior,
    /// The immediate in every 32-bit lane (validation: it fits out_dtype).
    fill: VecReg,
}

impl GatherOps {
    fn new(g: &S4d4Gt) -> Result<GatherOps, Error> {
        let at = |field| FieldPath::new("S4D4_GT", field);
        let out_dtype = g.out_dtype()?;
        Ok(GatherOps {
            idx: Pattern::new(at("src_mem_pattern"), &g.src_mem_pattern()),
            dst: Pattern::new(at("dst_mem_pattern"), &g.dst_mem_pattern()),
            in_dtype: g.in_dtype()?,
            out_dtype,
            miss: g.index_miss_behavior()?,
            fill: alu::movva32(g.immediate()),
        })
    }
}

/// GATHER: runs every channel against its window, commits, then frees the windows.
pub fn pool_gather(
    fabric: &mut Fabric,
    buffers: &mut PoolBuffers,
    g: &S4d4Gt,
) -> Result<(Outcome, PoolCost), Error> {
    let ops = GatherOps::new(g)?;
    let channels = u32::from(g.header().num_active_channels());
    let mut core = VectorCore::new();
    let mut writes = StagedWrites::new();
    let mut written = 0u64;
    for k in 0..channels {
        let channel = ops.idx.partition(k)?;
        let window = buffers.window(channel)?;
        check_window(window, channel, ops.out_dtype)?;
        let buffer = PoolBuffer::new(window);
        let (w, bytes) = gather_channel(&mut core, fabric, &ops, k, buffer)?;
        writes.append(w);
        written += bytes;
    }
    writes.commit(fabric)?;
    if g.free_pool_buffer() {
        // Every channel number was resolved by `buffers.window` above.
        for k in 0..channels {
            buffers.free(ops.idx.partition(k)?)?;
        }
    }
    let per_channel = Work {
        vectors: ops.idx.len().div_ceil(BLOCK) as u64,
        bytes: (ops.idx.len() * (ops.in_dtype.size() + ops.out_dtype.size())) as u64,
    };
    let work = Work::per_channel(per_channel, channels.into());
    let outcome = Outcome {
        bytes_written: written,
        ..Outcome::default()
    };
    Ok((outcome, PoolCost::estimate("pool_gather", POOL_CORES, work)))
}

/// The window is drained with the gather of its own width and scattered with
/// out_dtype's: the two must be one width (GATHER copies bytes, no cast).
fn check_window(window: Option<&Window>, channel: u32, out: Dtype) -> Result<(), Error> {
    let Some(w) = window else { return Ok(()) };
    if width(w.dtype()) == width(out) {
        return Ok(());
    }
    Err(Error::GatherWindowDtype {
        channel,
        out,
        out_size: out.size(),
        window: w.dtype(),
        window_size: w.dtype().size(),
    })
}

/// Channel `k`: the staged destination stores and the bytes they write.
fn gather_channel(
    core: &mut VectorCore,
    fabric: &Fabric,
    ops: &GatherOps,
    k: u32,
    buffer: PoolBuffer<'_>,
) -> Result<(StagedWrites, u64), Error> {
    let (in_size, out_size) = (ops.in_dtype.size(), ops.out_dtype.size());
    let idx_base = ops.idx.base(fabric.map(), k, in_size)?;
    let dst_base = ops.dst.base(fabric.map(), k, out_size)?;
    let mut reads = FabricPort::new(fabric);
    reads.stage(idx_base, ops.idx.span_bytes(in_size))?;
    let mut writes = FabricPort::new(fabric);
    writes.stage(dst_base, ops.dst.span_bytes(out_size))?;
    let window = buffer.port();
    let out_width = width(ops.out_dtype);
    let mut stores = 0u64;
    let blocks = ops.idx.blocks(idx_base.0).zip(ops.dst.blocks(dst_base.0));
    for (idx_lanes, dst_lanes) in blocks {
        let index = core.gather(&reads, width(ops.in_dtype), &idx_lanes);
        let (hit, offs) = buffer.hit_test(&index, idx_lanes.live);
        let at_hits = Lanes {
            base: 0,
            offs: wide_lanes(&offs),
            live: hit,
        };
        let mut values = core.gather(&window, out_width, &at_hits);
        let write = match ops.miss {
            IndexMissBehavior::ImmediateWrite => {
                values = std::array::from_fn(|h| {
                    alu::mov2nx8t(&values[h], &ops.fill, half_pred(hit, h))
                });
                idx_lanes.live
            }
            IndexMissBehavior::SkipWrite => hit,
        };
        core.scatter(&mut writes, out_width, &dst_lanes.with_live(write), &values);
        stores += u64::from(write.count_ones());
    }
    dead_stores("pool_gather", core.fence(&mut writes))?;
    Ok((writes.into_writes(), stores * out_size as u64))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::error::Error;
    use crate::isa::{IndexMissBehavior, PoolBufferLoad, S4d4Gt, Tensor4d};
    use dma::{Dtype, Element, Fabric};
    use proptest::prelude::*;

    const DATA: u32 = 0x100;
    const IDX: u32 = 0x2000;
    const DST: u32 = 0x4000;

    /// Loads `data` from partitions `p..p + channels` into the Pool_Buffer with window
    /// start `start`; channel `p + c` holds `data[i] + 100 c`.
    fn load<E: Element + Into<u32> + TryFrom<u32>>(
        f: &mut Fabric,
        s: &mut CoreState,
        (p, channels): (u32, u8),
        start: u32,
        data: &[E],
    ) {
        for c in 0..u32::from(channels) {
            let shifted: Vec<E> = data
                .iter()
                .map(|&v| E::try_from(v.into() + 100 * c).ok().unwrap())
                .collect();
            put(f, sbuf_at(p + c, DATA), &shifted);
        }
        let t = Tensor4d::contiguous(sbuf(p, DATA), data.len() as u16);
        let l = PoolBufferLoad::new(t, E::DTYPE, channels).with_start_index(start);
        let (out, cost) = run_cost(f, s, l);
        assert_eq!(out.bytes_written, 0);
        assert_eq!(cost.kernel, "pool_buffer_load");
    }

    /// A GATHER of `n` contiguous indices at IDX into contiguous `out` at DST.
    fn gather(p: u32, n: u16, (in_dtype, out): (Dtype, Dtype), channels: u8) -> S4d4Gt {
        let src = Tensor4d::contiguous(sbuf(p, IDX), n);
        let dst = Tensor4d::contiguous(sbuf(p, DST), n);
        S4d4Gt::new(src, dst, in_dtype, out, channels)
    }

    /// Window of 8 u16 at start 512 (values 10..18), six u32 indices, dst prefilled.
    fn window_512() -> (Fabric, CoreState) {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load::<u16>(
            &mut f,
            &mut s,
            (0, 1),
            512,
            &[10, 11, 12, 13, 14, 15, 16, 17],
        );
        put::<u32>(&mut f, sbuf_at(0, IDX), &[512, 519, 520, 3, 515, 1024]);
        put::<u16>(&mut f, sbuf_at(0, DST), &[0xaaaa; 6]);
        (f, s)
    }

    const U32_U16: (Dtype, Dtype) = (Dtype::U32, Dtype::U16);

    #[test]
    fn hits_copy_and_misses_write_immediate_zero() {
        let (mut f, mut s) = window_512();
        let (out, cost) = run_cost(&mut f, &mut s, gather(0, 6, U32_U16, 1));
        // 519 is the last loaded element; 520 is inside the 512 block but not loaded.
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [10, 17, 0, 0, 13, 0]);
        assert_eq!(out.bytes_written, 12);
        assert!(out.skipped.is_empty() && !out.oob_notification);
        assert!(s.pool_buffers.window(0).unwrap().is_some());
        assert_eq!(
            (cost.kernel, cost.vectors, cost.bytes),
            ("pool_gather", 1, 36)
        );
    }

    #[test]
    fn a_non_zero_immediate_fills_misses() {
        let (mut f, mut s) = window_512();
        run(
            &mut f,
            &mut s,
            gather(0, 6, U32_U16, 1).with_immediate(0x7ff),
        );
        let got = get::<u16>(&f, sbuf_at(0, DST), 6);
        assert_eq!(got, [10, 17, 0x7ff, 0x7ff, 13, 0x7ff]);
    }

    #[test]
    fn skip_write_leaves_misses_untouched() {
        let (mut f, mut s) = window_512();
        let g = gather(0, 6, U32_U16, 1).with_index_miss_behavior(IndexMissBehavior::SkipWrite);
        let out = run(&mut f, &mut s, g);
        let got = get::<u16>(&f, sbuf_at(0, DST), 6);
        assert_eq!(got, [10, 17, 0xaaaa, 0xaaaa, 13, 0xaaaa]);
        assert_eq!(out.bytes_written, 6);
    }

    #[test]
    fn every_index_dtype_reads_the_same_indices() {
        let ids = [3u32, 0, 7, 9, 250, 1];
        let expect = [13u32, 10, 17, 0, 0, 11];
        for in_dtype in [Dtype::U8, Dtype::U16, Dtype::U32] {
            let (mut f, mut s) = (fabric(), CoreState::new());
            load::<u32>(&mut f, &mut s, (0, 1), 0, &[10, 11, 12, 13, 14, 15, 16, 17]);
            match in_dtype {
                Dtype::U8 => put(&mut f, sbuf_at(0, IDX), &ids.map(|v| v as u8)),
                Dtype::U16 => put(&mut f, sbuf_at(0, IDX), &ids.map(|v| v as u16)),
                _ => put(&mut f, sbuf_at(0, IDX), &ids),
            }
            run(&mut f, &mut s, gather(0, 6, (in_dtype, Dtype::F32), 1));
            let got = get::<u32>(&f, sbuf_at(0, DST), 6);
            assert_eq!(got, expect, "{in_dtype:?}");
        }
    }

    #[test]
    fn byte_elements_and_many_blocks() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        let data: Vec<u8> = (0..200).collect();
        load::<u8>(&mut f, &mut s, (0, 1), 1024, &data);
        // 70 indices (three 32-index blocks): 1024 + 3i for i < 70, some past 200 loaded
        let ids: Vec<u16> = (0..70).map(|i| 1024 + 3 * i).collect();
        put(&mut f, sbuf_at(0, IDX), &ids);
        run(
            &mut f,
            &mut s,
            gather(0, 70, (Dtype::U16, Dtype::I8), 1).with_immediate(0xee),
        );
        let got = get::<u8>(&f, sbuf_at(0, DST), 70);
        let expect: Vec<u8> = (0..70)
            .map(|i| if 3 * i < 200 { 3 * i as u8 } else { 0xee })
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn channels_use_their_own_windows_and_free_releases_them() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load::<u16>(&mut f, &mut s, (4, 3), 0, &[1, 2, 3]);
        for c in 0..3 {
            put::<u32>(&mut f, sbuf_at(4 + c, IDX), &[2, 0, 5]);
        }
        let g = gather(4, 3, U32_U16, 3).with_free_pool_buffer(true);
        let out = run(&mut f, &mut s, g);
        for c in 0..3u16 {
            let got = get::<u16>(&f, sbuf_at(4 + u32::from(c), DST), 3);
            assert_eq!(got, [3 + 100 * c, 1 + 100 * c, 0]);
        }
        assert_eq!(out.bytes_written, 18);
        assert_eq!(s.pool_buffers.loaded().count(), 0);
        // without a window every index misses: IMMEDIATE_WRITE fills everything
        run(&mut f, &mut s, gather(4, 3, U32_U16, 1).with_immediate(9));
        assert_eq!(get::<u16>(&f, sbuf_at(4, DST), 3), [9, 9, 9]);
    }

    #[test]
    fn strided_patterns_and_a_repeated_destination() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load::<u16>(&mut f, &mut s, (0, 1), 0, &[50, 51, 52, 53]);
        // indices every other u16 at IDX: [3, 1, 0, 2]
        put::<u16>(&mut f, sbuf_at(0, IDX), &[3, 99, 1, 99, 0, 99, 2, 99]);
        put::<u16>(&mut f, sbuf_at(0, DST), &[0; 4]);
        let src = Tensor4d::new(sbuf(0, IDX), [2, 0, 0, 0], [4, 1, 1, 1]);
        // dst walks backwards from element 3: 3, 2, 1, 0
        let dst = Tensor4d::new(sbuf(0, DST + 6), [-1, 0, 0, 0], [4, 1, 1, 1]);
        run(
            &mut f,
            &mut s,
            S4d4Gt::new(src, dst, Dtype::U16, Dtype::U16, 1),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 4), [52, 50, 51, 53]);
        // every element to one destination (step 0): the last index wins
        let dst = Tensor4d::new(sbuf(0, DST), [0, 0, 0, 0], [4, 1, 1, 1]);
        run(
            &mut f,
            &mut s,
            S4d4Gt::new(src, dst, Dtype::U16, Dtype::U16, 1),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 1), [52]);
    }

    #[test]
    fn far_index_elements_take_several_gather_passes() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load::<u32>(&mut f, &mut s, (0, 1), 0, &[7, 8, 9]);
        // u8 indices spanning 80001 bytes (more than a 16-bit offset): 0, 30000, 60000,
        // then 20000, 50000, 80000
        let src = Tensor4d::new(sbuf(0, 0), [30000, 20000, 0, 0], [3, 2, 1, 1]);
        for (i, v) in [
            (0u32, 2u8),
            (30000, 1),
            (60000, 0),
            (20000, 2),
            (50000, 5),
            (80000, 1),
        ] {
            put(&mut f, sbuf_at(0, i), &[v]);
        }
        let dst = Tensor4d::contiguous(sbuf(0, 0x2_0000), 6);
        run(
            &mut f,
            &mut s,
            S4d4Gt::new(src, dst, Dtype::U8, Dtype::U32, 1),
        );
        let got = get::<u32>(&f, sbuf_at(0, 0x2_0000), 6);
        assert_eq!(got, [9, 8, 7, 9, 0, 8]);
    }

    #[test]
    fn a_window_of_another_size_fails_closed() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load::<u16>(&mut f, &mut s, (0, 2), 0, &[1, 2]);
        load::<u32>(&mut f, &mut s, (1, 1), 0, &[1, 2]);
        put::<u32>(&mut f, sbuf_at(0, IDX), &[0, 1]);
        let g = gather(0, 2, U32_U16, 2).with_free_pool_buffer(true);
        let e = fails_closed(&mut f, &mut s, g);
        assert!(
            matches!(
                e,
                Error::GatherWindowDtype {
                    channel: 1,
                    out_size: 2,
                    window_size: 4,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn pool_buffer_load_reads_strided_patterns() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        let row: Vec<u16> = (0..40).collect();
        put(&mut f, sbuf_at(2, DATA), &row);
        // 2 x 3 elements: rows 10 elements apart, every other element
        let t = Tensor4d::new(sbuf(2, DATA), [2, 10, 0, 0], [3, 2, 1, 1]);
        run(
            &mut f,
            &mut s,
            PoolBufferLoad::new(t, Dtype::Bf16, 1).with_start_index(2048),
        );
        let w = s.pool_buffers.window(2).unwrap().unwrap();
        let expect: Vec<u8> = [0u16, 2, 4, 10, 12, 14]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            (w.start_index(), w.dtype(), w.bytes()),
            (2048, Dtype::Bf16, &expect[..])
        );
    }

    #[test]
    fn a_full_window_of_512() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        let data: Vec<u16> = (0..512).map(|i| 3 * i).collect();
        load::<u16>(&mut f, &mut s, (0, 1), 512, &data);
        let ids: Vec<u32> = (0..100).map(|i| 512 + 5 * i + 1).collect();
        put(&mut f, sbuf_at(0, IDX), &ids);
        run(&mut f, &mut s, gather(0, 100, U32_U16, 1));
        let expect: Vec<u16> = (0..100).map(|i| 3 * (5 * i + 1)).collect();
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 100), expect);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Both miss policies against the closed form, random windows and indices.
        #[test]
        fn matches_the_closed_form(
            start in 0u32..4,
            len in 0usize..40,
            ids in prop::collection::vec(0u32..2600, 1..80),
            skip in any::<bool>(),
            imm in any::<u16>(),
        ) {
            let (mut f, mut s) = (fabric(), CoreState::new());
            let start = start * 512;
            let data: Vec<u16> = (0..len as u16).map(|i| 1000 + i).collect();
            if len > 0 {
                load::<u16>(&mut f, &mut s, (0, 1), start, &data);
            }
            put(&mut f, sbuf_at(0, IDX), &ids);
            put(&mut f, sbuf_at(0, DST), &vec![0x5555u16; ids.len()]);
            let miss = if skip { IndexMissBehavior::SkipWrite } else { IndexMissBehavior::ImmediateWrite };
            let g = gather(0, ids.len() as u16, U32_U16, 1)
                .with_index_miss_behavior(miss)
                .with_immediate(imm.into());
            let out = run(&mut f, &mut s, g);
            let expect: Vec<u16> = ids
                .iter()
                .map(|&i| match data.get(i.wrapping_sub(start) as usize) {
                    Some(&v) => v,
                    None if skip => 0x5555,
                    None => imm,
                })
                .collect();
            prop_assert_eq!(get::<u16>(&f, sbuf_at(0, DST), ids.len()), expect);
            let hits = ids.iter().filter(|&&i| (i.wrapping_sub(start) as usize) < len).count();
            let stores = if skip { hits } else { ids.len() };
            prop_assert_eq!(out.bytes_written, 2 * stores as u64);
        }
    }
}
