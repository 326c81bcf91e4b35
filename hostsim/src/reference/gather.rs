//! POOL_BUFFER_LOAD 0x67 and GATHER 0x68 (S4D4_GT): the within-partition gather from the
//! Pool_Buffer.
//!
//! POOL_BUFFER_LOAD reads its pattern in every active channel into that channel's
//! [`Window`]. GATHER widens each index of its index pattern to u32 and hit-tests it
//! against the channel's window: `index - start_index` (wrapping) below the window
//! length is a hit and copies that window element's bytes (no cast; the out_dtype size
//! must equal the window dtype's); a miss writes the `immediate` (IMMEDIATE_WRITE) or
//! leaves the destination (SKIP_WRITE); a channel with no window misses every index.
//! With `free_pool_buffer` the channels' windows are released afterwards.

use dma::{Dtype, Fabric, FabricAddr};

use super::{low_bytes, Pattern};
use crate::core_state::{Outcome, PoolBuffers, Window};
use crate::error::Error;
use crate::isa::rule::FieldPath;
use crate::isa::{IndexMissBehavior, PoolBufferLoad, S4d4Gt};

/// POOL_BUFFER_LOAD: builds every channel's window, then installs them all.
pub(super) fn pool_buffer_load(
    fabric: &Fabric,
    buffers: &mut PoolBuffers,
    p: &PoolBufferLoad,
) -> Result<Outcome, Error> {
    let dtype = p.dtype()?;
    let size = dtype.size();
    let at = FieldPath::new("POOL_BUFFER_LOAD", "src_mem_pattern");
    let src = Pattern::new(at, &p.src_mem_pattern(), size)?;
    let channels = u32::from(p.header().num_active_channels());
    let mut windows = Vec::with_capacity(channels as usize);
    for k in 0..channels {
        let mut bytes = vec![0; src.len() * size];
        for (slot, addr) in bytes.chunks_exact_mut(size).zip(src.addrs(fabric, k)) {
            fabric.read(addr?, slot)?;
        }
        windows.push((
            src.partition(k),
            Window::new(p.start_index(), dtype, bytes)?,
        ));
    }
    // Every channel's pattern had an address in partition `c`, so each `c` is < 128.
    for (channel, window) in windows {
        buffers.load(channel, window)?;
    }
    Ok(Outcome::default())
}

/// The destination stores a GATHER makes, in order: `addrs[i]` receives the `i`-th
/// `size`-byte chunk of `values`.
struct Stores {
    addrs: Vec<FabricAddr>,
    values: Vec<u8>,
}

/// GATHER: plans every store of every channel, writes them, then frees the windows.
pub(super) fn gather(
    fabric: &mut Fabric,
    buffers: &mut PoolBuffers,
    g: &S4d4Gt,
) -> Result<Outcome, Error> {
    let at = |field| FieldPath::new("S4D4_GT", field);
    let (in_dtype, out_dtype) = (g.in_dtype()?, g.out_dtype()?);
    let idx = Pattern::new(at("src_mem_pattern"), &g.src_mem_pattern(), in_dtype.size())?;
    let dst = Pattern::new(
        at("dst_mem_pattern"),
        &g.dst_mem_pattern(),
        out_dtype.size(),
    )?;
    let channels = u32::from(g.header().num_active_channels());
    let mut stores = Stores {
        addrs: Vec::new(),
        values: Vec::new(),
    };
    for k in 0..channels {
        let window = buffers.window(idx.partition(k))?;
        check_window(window, idx.partition(k), out_dtype)?;
        plan_channel(fabric, g, (&idx, &dst, k), window, &mut stores)?;
    }
    super::write_each(fabric, &stores.addrs, &stores.values, out_dtype.size())?;
    if g.free_pool_buffer() {
        // The plan resolved every channel's window, so every channel number exists.
        for k in 0..channels {
            buffers.free(idx.partition(k))?;
        }
    }
    Ok(Outcome {
        bytes_written: stores.values.len() as u64,
        ..Outcome::default()
    })
}

/// A loaded window must hold elements of the out_dtype's size (bytes are copied).
fn check_window(window: Option<&Window>, channel: u32, out: Dtype) -> Result<(), Error> {
    match window {
        Some(w) if w.dtype().size() != out.size() => Err(Error::GatherWindowDtype {
            channel,
            out,
            out_size: out.size(),
            window: w.dtype(),
            window_size: w.dtype().size(),
        }),
        _ => Ok(()),
    }
}

/// Reads channel `k`'s indices and adds the stores they make.
fn plan_channel(
    fabric: &Fabric,
    g: &S4d4Gt,
    (idx, dst, k): (&Pattern, &Pattern, u32),
    window: Option<&Window>,
    stores: &mut Stores,
) -> Result<(), Error> {
    let (in_dtype, miss) = (g.in_dtype()?, g.index_miss_behavior()?);
    let size = g.out_dtype()?.size();
    let immediate = g.immediate().to_le_bytes();
    let fill = low_bytes(&immediate, size);
    for (index_addr, dst_addr) in idx.addrs(fabric, k).zip(dst.addrs(fabric, k)) {
        let (index_addr, dst_addr) = (index_addr?, dst_addr?);
        let index = read_index(fabric, index_addr, in_dtype)?;
        let hit = window.and_then(|w| w.element(index.wrapping_sub(w.start_index())));
        let value = match (hit, miss) {
            (Some(bytes), _) => bytes,
            (None, IndexMissBehavior::ImmediateWrite) => fill,
            (None, IndexMissBehavior::SkipWrite) => continue,
        };
        stores.addrs.push(dst_addr);
        stores.values.extend_from_slice(value);
    }
    Ok(())
}

/// One little-endian index of `dtype` (u8, u16 or u32, as validation proved), widened.
fn read_index(fabric: &Fabric, addr: FabricAddr, dtype: Dtype) -> Result<u32, Error> {
    let mut raw = [0u8; 4];
    let low = raw.get_mut(..dtype.size()).unwrap_or_default();
    fabric.read(addr, low)?;
    Ok(u32::from_le_bytes(raw))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::error::Error;
    use crate::isa::{IndexMissBehavior, PoolBufferLoad, Rule, S4d4Gt, Tensor4d};
    use dma::Dtype;
    use proptest::prelude::*;

    const DATA: u32 = 0x100;
    const DST: u32 = 0x400;

    /// Loads `data` (u16) from partitions `p..p + channels` at DATA into the Pool_Buffer
    /// with window start `start`; channel `p + c` gets `data` plus `100 * c`.
    fn load(
        f: &mut dma::Fabric,
        s: &mut CoreState,
        p: u32,
        channels: u8,
        start: u32,
        data: &[u16],
    ) {
        for c in 0..u32::from(channels) {
            let shifted: Vec<u16> = data.iter().map(|v| v + 100 * c as u16).collect();
            put(f, sbuf_at(p + c, DATA), &shifted);
        }
        let t = Tensor4d::contiguous(sbuf(p, DATA), data.len() as u16);
        let l = PoolBufferLoad::new(t, Dtype::U16, channels).with_start_index(start);
        assert_eq!(run(f, s, l).bytes_written, 0);
    }

    /// A GATHER of `n` indices (`in_dtype`, at byte 0) into u16 at DST, partitions `p..`.
    fn gather(p: u32, n: u16, in_dtype: Dtype, channels: u8) -> S4d4Gt {
        let src = Tensor4d::contiguous(sbuf(p, 0), n);
        let dst = Tensor4d::contiguous(sbuf(p, DST), n);
        S4d4Gt::new(src, dst, in_dtype, Dtype::U16, channels)
    }

    /// u32 indices against a window of 8 elements at start_index 512 (values 10..18).
    fn window_512() -> (dma::Fabric, CoreState) {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load(&mut f, &mut s, 0, 1, 512, &[10, 11, 12, 13, 14, 15, 16, 17]);
        put::<u32>(&mut f, sbuf_at(0, 0), &[512, 519, 520, 3, 515, 1024]);
        put::<u16>(&mut f, sbuf_at(0, DST), &[0xaaaa; 6]);
        (f, s)
    }

    #[test]
    fn hits_and_immediate_zero_misses() {
        let (mut f, mut s) = window_512();
        let out = run(&mut f, &mut s, gather(0, 6, Dtype::U32, 1));
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [10, 17, 0, 0, 13, 0]);
        assert_eq!(out.bytes_written, 12);
        assert!(out.skipped.is_empty() && !out.oob_notification);
        assert!(
            s.pool_buffers.window(0).unwrap().is_some(),
            "kept without free"
        );
    }

    #[test]
    fn non_zero_immediate_fills_misses() {
        let (mut f, mut s) = window_512();
        let g = gather(0, 6, Dtype::U32, 1).with_immediate(0x7ff);
        run(&mut f, &mut s, g);
        assert_eq!(
            get::<u16>(&f, sbuf_at(0, DST), 6),
            [10, 17, 0x7ff, 0x7ff, 13, 0x7ff]
        );
    }

    #[test]
    fn skip_write_leaves_misses() {
        let (mut f, mut s) = window_512();
        let g = gather(0, 6, Dtype::U32, 1).with_index_miss_behavior(IndexMissBehavior::SkipWrite);
        let out = run(&mut f, &mut s, g);
        assert_eq!(
            get::<u16>(&f, sbuf_at(0, DST), 6),
            [10, 17, 0xaaaa, 0xaaaa, 13, 0xaaaa]
        );
        assert_eq!(out.bytes_written, 6);
    }

    #[test]
    fn u8_and_u16_indices_on_several_channels() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load(&mut f, &mut s, 2, 2, 0, &[5, 6, 7, 8]);
        put::<u8>(&mut f, sbuf_at(2, 0), &[3, 0, 4, 255]);
        put::<u8>(&mut f, sbuf_at(3, 0), &[1, 1, 9, 2]);
        run(&mut f, &mut s, gather(2, 4, Dtype::U8, 2));
        assert_eq!(get::<u16>(&f, sbuf_at(2, DST), 4), [8, 5, 0, 0]);
        assert_eq!(get::<u16>(&f, sbuf_at(3, DST), 4), [106, 106, 0, 107]);
        put::<u16>(&mut f, sbuf_at(2, 0), &[2, 512, 65535, 1]);
        put::<u16>(&mut f, sbuf_at(3, 0), &[3, 3, 0, 4]);
        run(
            &mut f,
            &mut s,
            gather(2, 4, Dtype::U16, 2).with_immediate(9),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(2, DST), 4), [7, 9, 9, 6]);
        assert_eq!(get::<u16>(&f, sbuf_at(3, DST), 4), [108, 108, 105, 9]);
        let loaded: Vec<u32> = s.pool_buffers.loaded().map(|(c, _)| c).collect();
        assert_eq!(loaded, [2, 3]);
    }

    #[test]
    fn strided_patterns_follow_element_order() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        load(&mut f, &mut s, 0, 1, 0, &[40, 41, 42, 43]);
        put::<u32>(&mut f, sbuf_at(0, 0), &[3, 9, 2, 9, 1, 9, 0]);
        // Indices at elements 0, 2, 4, 6 (a 2 x 2 pattern, steps 2 and 4).
        let src = Tensor4d::new(sbuf(0, 0), [2, 4, 0, 0], [2, 2, 1, 1]);
        // Destination in reverse: elements 3, 2, 1, 0.
        let dst = Tensor4d::new(sbuf(0, DST + 6), [-1, -2, 0, 0], [2, 2, 1, 1]);
        run(
            &mut f,
            &mut s,
            S4d4Gt::new(src, dst, Dtype::U32, Dtype::U16, 1),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 4), [40, 41, 42, 43]);
    }

    #[test]
    fn free_pool_buffer_releases_the_window() {
        let (mut f, mut s) = window_512();
        run(
            &mut f,
            &mut s,
            gather(0, 6, Dtype::U32, 1).with_free_pool_buffer(true),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [10, 17, 0, 0, 13, 0]);
        assert_eq!(s.pool_buffers.window(0).unwrap(), None);
        // Without a window every index misses.
        run(
            &mut f,
            &mut s,
            gather(0, 6, Dtype::U32, 1).with_immediate(1),
        );
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [1; 6]);
        assert_eq!(s, CoreState::new());
    }

    #[test]
    fn a_new_load_replaces_the_window() {
        let (mut f, mut s) = window_512();
        load(&mut f, &mut s, 0, 1, 1024, &[70, 71]);
        run(&mut f, &mut s, gather(0, 6, Dtype::U32, 1));
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [0, 0, 0, 0, 0, 70]);
        let w = s.pool_buffers.window(0).unwrap().unwrap();
        assert_eq!(
            (w.start_index(), w.len(), w.bytes()),
            (1024, 2, &[70, 0, 71, 0][..])
        );
    }

    #[test]
    fn more_than_512_elements_are_rejected() {
        let (mut f, mut s) = (fabric(), CoreState::new());
        let t = Tensor4d::new(sbuf(0, 0), [1, 0, 0, 0], [513, 1, 1, 1]);
        let l = PoolBufferLoad::new(t, Dtype::U8, 1);
        let e = fails_closed(&mut f, &mut s, l);
        assert_eq!(e.rule(), Some(Rule::PoolBufferCapacity), "{e}");
        let ok = PoolBufferLoad::new(
            Tensor4d::new(sbuf(0, 0), [1, 0, 0, 0], [256, 2, 1, 1]),
            Dtype::U8,
            1,
        );
        assert_eq!(run(&mut f, &mut s, ok), Default::default());
        assert_eq!(s.pool_buffers.window(0).unwrap().unwrap().len(), 512);
    }

    #[test]
    fn window_dtype_size_must_match() {
        let (mut f, mut s) = window_512();
        let src = Tensor4d::contiguous(sbuf(0, 0), 6);
        let dst = Tensor4d::contiguous(sbuf(0, DST), 6);
        let g = S4d4Gt::new(src, dst, Dtype::U32, Dtype::F32, 1).with_free_pool_buffer(true);
        let e = fails_closed(&mut f, &mut s, g);
        assert!(
            matches!(
                e,
                Error::GatherWindowDtype {
                    channel: 0,
                    out: Dtype::F32,
                    window: Dtype::U16,
                    ..
                }
            ),
            "{e}"
        );
        // Same size, other dtype: bytes are copied.
        let g = S4d4Gt::new(src, dst, Dtype::U32, Dtype::Bf16, 1);
        run(&mut f, &mut s, g);
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 2), [10, 17]);
    }

    #[test]
    fn invalid_instructions_fail_closed() {
        let (mut f, mut s) = window_512();
        let e = fails_closed(
            &mut f,
            &mut s,
            gather(0, 6, Dtype::F32, 1).with_free_pool_buffer(true),
        );
        assert_eq!(e.rule(), Some(Rule::GatherIndexDtype));
        let e = fails_closed(
            &mut f,
            &mut s,
            gather(0, 6, Dtype::U32, 1).with_immediate(0x1_0000),
        );
        assert_eq!(e.rule(), Some(Rule::ImmediateWidth));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The hit test equals the seed's form: `(i & !511) == start && (i & 511) < len`.
        #[test]
        fn hit_test_matches_the_aligned_form(
            start in (0u32..4).prop_map(|b| b * 512),
            len in 0usize..=12,
            indices in prop::collection::vec(prop_oneof![0u32..2100, any::<u32>()], 1..40),
            skip in any::<bool>(),
        ) {
            let (mut f, mut s) = (fabric(), CoreState::new());
            let data: Vec<u16> = (0..len as u16).map(|v| 1000 + v).collect();
            if len > 0 {
                load(&mut f, &mut s, 0, 1, start, &data);
            }
            put::<u32>(&mut f, sbuf_at(0, 0), &indices);
            put::<u16>(&mut f, sbuf_at(0, DST), &vec![0xbeef; indices.len()]);
            let miss = if skip { IndexMissBehavior::SkipWrite } else { IndexMissBehavior::ImmediateWrite };
            let g = gather(0, indices.len() as u16, Dtype::U32, 1)
                .with_index_miss_behavior(miss)
                .with_immediate(0x1234);
            run(&mut f, &mut s, g);
            let expected: Vec<u16> = indices
                .iter()
                .map(|&i| {
                    let off = (i & 511) as usize;
                    if (i & !511) == start && off < len {
                        1000 + off as u16
                    } else if skip {
                        0xbeef
                    } else {
                        0x1234
                    }
                })
                .collect();
            prop_assert_eq!(get::<u16>(&f, sbuf_at(0, DST), indices.len()), expected);
        }
    }
}
