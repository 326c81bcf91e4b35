//! POOL_BUFFER_LOAD 0x67 and GATHER 0x68 (S4D4_GT) on the DGE route.
//!
//! The DGE has no Pool_Buffer. POOL_BUFFER_LOAD loads the [`CoreState`] windows exactly as
//! the reference does (the state every route must agree on) and records, per channel,
//! where its window lies in SBUF: the address of element 0 and the byte stride between
//! elements. A window must therefore be affine in the element index (contiguous, or one
//! stride once its dimensions merge); any other pattern is refused
//! ([`Error::DgeWindowPattern`]).
//!
//! GATHER is one request per active channel `k` (each channel has its own indices, and a
//! DGE indirection takes one index vector): the source is the recorded window, indexed by
//! the channel's TENSOR4D of u8/u16/u32 indices (read through the IVP gather of that
//! width, through the pattern) with the window's `start_index` as the bias and its length
//! as the bound, so `(index - start_index) < len` (wrapping) is the hit test. A miss
//! writes the immediate (the fill policy's FILL descriptors) under IMMEDIATE_WRITE and is
//! skipped silently under SKIP_WRITE; a channel without a window misses every index. The
//! destination is the channel's dst TENSOR4D. With `free_pool_buffer` the windows (and
//! their records) are released afterwards.
//!
//! Limits by design (the reference's result is out of the DGE's reach): the window is read
//! from SBUF at GATHER time, so a window whose SBUF bytes changed since the LOAD is
//! refused ([`Error::DgeWindowOverwritten`]); a window loaded by another route has no
//! record and is refused ([`Error::DgeWindowUnrecorded`]); a gather whose destination
//! overlaps its own window is refused by the DGE (`dge::Error::SourceOverlapsDestination`).

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::pattern::ByteDim;
use dge::{IndexDtype, IndexLayout, Request};
use dma::{AddressMap, Dtype, Fabric, FabricAddr, Location};

use super::{channel_addr, flat_pattern, tensor_dims, DgeOutcome, Lowered};
use crate::core_state::{CoreState, Window, POOL_CHANNELS};
use crate::error::Error;
use crate::isa::rule::{FieldPath, Rule};
use crate::isa::{IndexMissBehavior, PoolBufferLoad, S4d4Gt, Tensor4d};

/// Where one channel's window lies in SBUF, and the window as loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WindowSource {
    /// Element 0.
    addr: FabricAddr,
    /// Bytes from one element to the next.
    stride: i64,
    window: Window,
}

/// The recorded window source of every channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WindowSources(Vec<Option<WindowSource>>);

impl Default for WindowSources {
    fn default() -> Self {
        WindowSources(vec![None; POOL_CHANNELS as usize])
    }
}

impl WindowSources {
    /// Channel `channel`'s record, if it is the record of `window`.
    fn matching(&self, channel: u32, window: &Window) -> Option<&WindowSource> {
        let source = self.0.get(channel as usize)?.as_ref()?;
        (source.window == *window).then_some(source)
    }

    fn set(&mut self, channel: u32, source: Option<WindowSource>) {
        if let Some(slot) = self.0.get_mut(channel as usize) {
            *slot = source;
        }
    }
}

/// The element stride (in elements) of a TENSOR4D whose element `e` lies at `e * stride`,
/// or `None` when its elements are not affine in the element index.
fn affine_stride(t: &Tensor4d) -> Option<i64> {
    let [n0, n1, n2, n3] = t.num_elem().map(i64::from);
    let [s0, s1, s2, s3] = t.step_elem().map(i64::from);
    let (mut stride, mut e) = (0i64, 0i64);
    for c3 in 0..n3 {
        for c2 in 0..n2 {
            for c1 in 0..n1 {
                for c0 in 0..n0 {
                    let off = c3 * s3 + c2 * s2 + c1 * s1 + c0 * s0;
                    if e == 1 {
                        stride = off;
                    }
                    if off != e * stride {
                        return None;
                    }
                    e += 1;
                }
            }
        }
    }
    Some(stride)
}

/// The element stride of `p`'s window, or the DGE route's refusal of a window not affine
/// in the element index ([`Error::DgeWindowPattern`]), which needs no fabric.
pub(super) fn window_stride(p: &PoolBufferLoad) -> Result<i64, Error> {
    let field = FieldPath::new("POOL_BUFFER_LOAD", "src_mem_pattern");
    affine_stride(&p.src_mem_pattern()).ok_or(Error::DgeWindowPattern { field })
}

/// POOL_BUFFER_LOAD: every channel's window read and recorded, then installed.
pub(super) fn pool_buffer_load(
    fabric: &Fabric,
    state: &mut CoreState,
    sources: &mut WindowSources,
    p: &PoolBufferLoad,
) -> Result<DgeOutcome, Error> {
    let (dtype, t) = (p.dtype()?, p.src_mem_pattern());
    let stride = window_stride(p)?;
    let (space, partition, offset) = t.start_addr().decode()?;
    let size = dtype.size() as i64;
    let mut loaded = Vec::new();
    for k in 0..u32::from(p.header().num_active_channels()) {
        let loc = Location {
            space,
            partition: partition + k,
            offset: u64::from(offset),
        };
        let addr = fabric.map().fabric_addr(loc)?;
        let bytes = read_window(fabric, addr, stride * size, t.element_count(), dtype)?;
        let window = Window::new(p.start_index(), dtype, bytes)?;
        let source = WindowSource {
            addr,
            stride: stride * size,
            window,
        };
        loaded.push((partition + k, source));
    }
    // Validation proved every channel is below 128: loading cannot fail half way.
    for (channel, source) in loaded {
        state.pool_buffers.load(channel, source.window.clone())?;
        sources.set(channel, Some(source));
    }
    Ok(DgeOutcome {
        outcome: Default::default(),
        replays: Vec::new(),
        dge_instructions: 0,
    })
}

/// The `count` elements of `dtype` at `addr`, `stride` bytes apart.
fn read_window(
    fabric: &Fabric,
    addr: FabricAddr,
    stride: i64,
    count: u64,
    dtype: Dtype,
) -> Result<Vec<u8>, Error> {
    let size = dtype.size();
    let mut bytes = vec![0u8; count as usize * size];
    if stride == size as i64 {
        fabric.read(addr, &mut bytes)?;
        return Ok(bytes);
    }
    for (e, slot) in (0i64..).zip(bytes.chunks_exact_mut(size)) {
        let at = addr
            .checked_offset(e * stride)
            .ok_or(dma::Error::AddressOverflow {
                addr: addr.0,
                len: size as u64,
            })?;
        fabric.read(at, slot)?;
    }
    Ok(bytes)
}

/// GATHER: the reference's window checks in channel order, then one request per channel
/// that writes anything.
pub(super) fn lower(
    fabric: &Fabric,
    state: &CoreState,
    sources: &WindowSources,
    g: &S4d4Gt,
) -> Result<Lowered, Error> {
    let map = fabric.map();
    let out_dtype = g.out_dtype()?;
    let (_, p_idx, _) = g.src_mem_pattern().start_addr().decode()?;
    let mut requests = Vec::new();
    for k in 0..u32::from(g.header().num_active_channels()) {
        let channel = p_idx + k;
        let window = state.pool_buffers.window(channel)?;
        let source = match window {
            None => None,
            Some(w) if w.dtype().size() != out_dtype.size() => {
                return Err(Error::GatherWindowDtype {
                    channel,
                    out: out_dtype,
                    out_size: out_dtype.size(),
                    window: w.dtype(),
                    window_size: w.dtype().size(),
                })
            }
            Some(w) => Some(unchanged(fabric, channel, sources, w)?),
        };
        requests.extend(channel_request(map, g, k, source)?);
    }
    Ok(Lowered::pool(requests))
}

/// Channel `channel`'s recorded window source, still holding the bytes its LOAD read:
/// the DGE reads the window from SBUF at GATHER time, so a source overwritten since the
/// LOAD is refused ([`Error::DgeWindowOverwritten`]) rather than gathered from.
fn unchanged<'a>(
    fabric: &Fabric,
    channel: u32,
    sources: &'a WindowSources,
    window: &Window,
) -> Result<&'a WindowSource, Error> {
    let source = sources
        .matching(channel, window)
        .ok_or(Error::DgeWindowUnrecorded { channel })?;
    let count = (window.bytes().len() / window.dtype().size()) as u64;
    let now = read_window(fabric, source.addr, source.stride, count, window.dtype())?;
    match now == window.bytes() {
        true => Ok(source),
        false => Err(Error::DgeWindowOverwritten { channel }),
    }
}

/// Channel `k`'s request (`None` when it writes nothing: SKIP_WRITE without a window).
fn channel_request(
    map: &AddressMap,
    g: &S4d4Gt,
    k: u32,
    source: Option<&WindowSource>,
) -> Result<Option<Request>, Error> {
    let (in_dtype, out_dtype) = (g.in_dtype()?, g.out_dtype()?);
    let (idx, dst) = (g.src_mem_pattern(), g.dst_mem_pattern());
    let miss = g.index_miss_behavior()?;
    let dst_addr = channel_addr(map, dst.start_addr(), k)?;
    let size = out_dtype.size() as i64;
    let (start, stride, bound, bias) = match (source, miss) {
        (Some(s), _) => (s.addr, s.stride, s.window.len(), s.window.start_index()),
        (None, IndexMissBehavior::SkipWrite) => return Ok(None),
        // no window: every index misses (bound 0); the start is never read
        (None, IndexMissBehavior::ImmediateWrite) => (dst_addr, size, 0, 0),
    };
    let (src, front) = flat_pattern(map, start, out_dtype, &[(1, idx.element_count() as u32)]);
    let (dst, _) = flat_pattern(map, dst_addr, out_dtype, &tensor_dims(&dst));
    let mut req = Request::new(Kind::Indirect, src, dst, out_dtype);
    req.src_indirection = Some(Indirection {
        dim: front,
        indices: channel_addr(map, idx.start_addr(), k)?,
        // |stride| <= 2^15 elements of at most 4 bytes: it fits.
        step: stride as i32,
        bound: Some(u64::from(bound)),
        policy: match miss {
            IndexMissBehavior::ImmediateWrite => OobPolicy::Fill {
                value: g.immediate(),
            },
            IndexMissBehavior::SkipWrite => OobPolicy::SoftSkipSilent,
        },
    });
    req.src_index = index_layout(&idx, in_dtype, bias)?;
    Ok(Some(req))
}

/// The index TENSOR4D as an index layout over bytes, biased by `bias`.
fn index_layout(t: &Tensor4d, dtype: Dtype, bias: u32) -> Result<IndexLayout, Error> {
    let index = IndexDtype::from_dtype(dtype).ok_or(Error::InvalidField {
        field: FieldPath::new("S4D4_GT", "in_dtype"),
        value: u64::from(dtype.code()),
        rule: Rule::GatherIndexDtype,
    })?;
    let size = dtype.size() as i64;
    let dims = tensor_dims(t).map(|(step, count)| ByteDim {
        step: step * size,
        count: u64::from(count),
    });
    Ok(IndexLayout {
        dtype: index,
        pattern: Some(dims.into_iter().collect()),
        bias,
    })
}

/// After a GATHER with `free_pool_buffer`: every active channel's window and record
/// released.
pub(super) fn release(
    state: &mut CoreState,
    sources: &mut WindowSources,
    g: &S4d4Gt,
) -> Result<(), Error> {
    if !g.free_pool_buffer() {
        return Ok(());
    }
    let (_, p_idx, _) = g.src_mem_pattern().start_addr().decode()?;
    for k in 0..u32::from(g.header().num_active_channels()) {
        state.pool_buffers.free(p_idx + k)?;
        sources.set(p_idx + k, None);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::DgeRoute;
    use crate::core_state::CoreState;
    use crate::error::Error;
    use crate::isa::rule::FieldPath;
    use crate::isa::{IndexMissBehavior, PoolBufferLoad, S4d4Gt, Tensor4d};
    use crate::reference;
    use dma::{Dtype, Fabric, Generation};
    use proptest::prelude::*;

    const DATA: u32 = 0x1000;
    const IDX: u32 = 0x4000;
    const DST: u32 = 0x8000;

    fn load(p: u32, n: u16, dtype: Dtype, channels: u8, start: u32) -> PoolBufferLoad {
        PoolBufferLoad::new(Tensor4d::contiguous(sbuf(p, DATA), n), dtype, channels)
            .with_start_index(start)
    }

    fn gather(p: u32, n: u16, in_dtype: Dtype, out: Dtype, channels: u8) -> S4d4Gt {
        let src = Tensor4d::contiguous(sbuf(p, IDX), n);
        let dst = Tensor4d::contiguous(sbuf(p, DST), n);
        S4d4Gt::new(src, dst, in_dtype, out, channels)
    }

    #[test]
    fn hits_misses_and_free() {
        let mut f = Fabric::new(Generation::Cayman);
        let mut s = CoreState::new();
        let mut route = DgeRoute::new();
        put::<u16>(&mut f, sbuf_at(0, DATA), &[10, 11, 12, 13, 14, 15, 16, 17]);
        put::<u32>(&mut f, sbuf_at(0, IDX), &[512, 519, 520, 3, 515, 1024]);
        put::<u16>(&mut f, sbuf_at(0, DST), &[0xaaaa; 6]);
        compare_with(
            &mut route,
            &mut f,
            &mut s,
            load(0, 8, Dtype::U16, 1, 512).into(),
        )
        .unwrap();
        let g = gather(0, 6, Dtype::U32, Dtype::U16, 1).with_immediate(0x7ff);
        let out = compare_with(&mut route, &mut f, &mut s, g.into()).unwrap();
        assert_eq!(
            get::<u16>(&f, sbuf_at(0, DST), 6),
            [10, 17, 0x7ff, 0x7ff, 13, 0x7ff]
        );
        assert_eq!(out.bytes_written, 12);
        let g = gather(0, 6, Dtype::U32, Dtype::U16, 1)
            .with_index_miss_behavior(IndexMissBehavior::SkipWrite)
            .with_free_pool_buffer(true);
        put::<u16>(&mut f, sbuf_at(0, DST), &[0xaaaa; 6]);
        let out = compare_with(&mut route, &mut f, &mut s, g.into()).unwrap();
        assert_eq!(
            get::<u16>(&f, sbuf_at(0, DST), 6),
            [10, 17, 0xaaaa, 0xaaaa, 13, 0xaaaa]
        );
        assert_eq!((out.bytes_written, s.clone()), (6, CoreState::new()));
        // no window left: every index misses
        let g = gather(0, 6, Dtype::U32, Dtype::U16, 1).with_immediate(1);
        compare_with(&mut route, &mut f, &mut s, g.into()).unwrap();
        assert_eq!(get::<u16>(&f, sbuf_at(0, DST), 6), [1; 6]);
    }

    #[test]
    fn windows_the_dge_cannot_read_are_refused() {
        let mut f = Fabric::new(Generation::Cayman);
        let mut s = CoreState::new();
        let mut route = DgeRoute::new();
        // elements 0, 1, 8, 9: not one stride
        let t = Tensor4d::new(sbuf(0, DATA), [1, 8, 0, 0], [2, 2, 1, 1]);
        let l = PoolBufferLoad::new(t, Dtype::U8, 1);
        let digest = f.digest();
        let e = route
            .execute(&mut f, &mut s, &l.into(), engine())
            .unwrap_err();
        let field = FieldPath::new("POOL_BUFFER_LOAD", "src_mem_pattern");
        assert!(
            matches!(e, Error::DgeWindowPattern { field: f } if f == field),
            "{e}"
        );
        assert!(super::super::by_design(&e));
        assert_eq!((f.digest(), &s), (digest, &CoreState::new()));
        // a window loaded by the reference has no SBUF record
        reference::execute(&mut f, &mut s, &load(0, 4, Dtype::U8, 1, 0).into()).unwrap();
        let g = gather(0, 4, Dtype::U8, Dtype::U8, 1);
        let e = route
            .execute(&mut f, &mut s, &g.into(), engine())
            .unwrap_err();
        assert!(
            matches!(e, Error::DgeWindowUnrecorded { channel: 0 }),
            "{e}"
        );
        // a window dtype of another size: the reference's error
        let e = compare_with(
            &mut route,
            &mut f,
            &mut s,
            gather(0, 4, Dtype::U8, Dtype::F32, 1).into(),
        );
        assert!(matches!(
            e,
            Err(Error::GatherWindowDtype { channel: 0, .. })
        ));
    }

    #[test]
    fn a_window_overwritten_after_its_load_is_refused() {
        let mut f = Fabric::new(Generation::Cayman);
        let mut s = CoreState::new();
        let mut route = DgeRoute::new();
        put::<u8>(&mut f, sbuf_at(0, DATA), &[5, 6, 7]);
        put::<u8>(&mut f, sbuf_at(0, IDX), &[2, 0]);
        route
            .execute(
                &mut f,
                &mut s,
                &load(0, 3, Dtype::U8, 1, 0).into(),
                engine(),
            )
            .unwrap();
        put::<u8>(&mut f, sbuf_at(0, DATA + 1), &[60]);
        let g = gather(0, 2, Dtype::U8, Dtype::U8, 1);
        let mut reference_fabric = f.clone();
        reference::execute(&mut reference_fabric, &mut s.clone(), &g.into()).unwrap();
        assert_eq!(get::<u8>(&reference_fabric, sbuf_at(0, DST), 2), [7, 5]);
        let (digest, before) = (f.digest(), s.clone());
        let e = route
            .execute(&mut f, &mut s, &g.into(), engine())
            .unwrap_err();
        assert!(
            matches!(e, Error::DgeWindowOverwritten { channel: 0 }),
            "{e}"
        );
        assert!(super::super::by_design(&e));
        assert_eq!((f.digest(), &s), (digest, &before));
        // written back as loaded, the window is gathered
        put::<u8>(&mut f, sbuf_at(0, DATA + 1), &[6]);
        route.execute(&mut f, &mut s, &g.into(), engine()).unwrap();
        assert_eq!(get::<u8>(&f, sbuf_at(0, DST), 2), [7, 5]);
    }

    #[test]
    fn affine_windows() {
        let t = |s, n| Tensor4d::new(sbuf(0, 0), s, n);
        assert_eq!(
            super::affine_stride(&t([1, 4, 0, 0], [4, 2, 1, 1])),
            Some(1)
        );
        assert_eq!(
            super::affine_stride(&t([-3, 0, 0, 0], [5, 1, 1, 1])),
            Some(-3)
        );
        assert_eq!(super::affine_stride(&t([2, 5, 0, 0], [2, 2, 1, 1])), None);
        assert_eq!(
            super::affine_stride(&t([7, 0, 0, 0], [1, 1, 1, 1])),
            Some(0)
        );
    }

    /// Channel 1 writes where channel 0's window lies (partition 1) when the destination
    /// starts one partition below the indices: a write after a read, replayed in order.
    /// One partition above, channel 1 would read what channel 0 wrote: refused.
    #[test]
    fn channels_that_touch_each_other_replay_in_order_or_are_refused() {
        let mut f = Fabric::new(Generation::Cayman);
        let (mut s, mut route) = (CoreState::new(), DgeRoute::new());
        for q in 0..3 {
            fill_random(&mut f, sbuf_at(q, DATA), 64, u64::from(q));
            put::<u16>(&mut f, sbuf_at(q, IDX), &[3, 0, 1, 2]);
        }
        compare_with(
            &mut route,
            &mut f,
            &mut s,
            load(0, 4, Dtype::U32, 3, 0).into(),
        )
        .unwrap();
        let idx = Tensor4d::contiguous(sbuf(1, IDX), 4);
        let g = S4d4Gt::new(
            idx,
            Tensor4d::contiguous(sbuf(0, DATA), 4),
            Dtype::U16,
            Dtype::U32,
            2,
        );
        let out = route
            .execute(&mut f.clone(), &mut s.clone(), &g.into(), engine())
            .unwrap();
        assert_eq!(out.replays.len(), 2, "one replay per channel, in order");
        compare_with(&mut route, &mut f, &mut s, g.into()).unwrap();
        // the gather wrote over the windows: load them again as they now are
        let reload = load(0, 4, Dtype::U32, 3, 0);
        compare_with(&mut route, &mut f, &mut s, reload.into()).unwrap();
        let idx = Tensor4d::contiguous(sbuf(0, IDX), 4);
        let g = S4d4Gt::new(
            idx,
            Tensor4d::contiguous(sbuf(1, DATA), 4),
            Dtype::U16,
            Dtype::U32,
            2,
        );
        let digest = f.digest();
        let e = route
            .execute(&mut f, &mut s, &g.into(), engine())
            .unwrap_err();
        // channel 1's first window read that channel 0 wrote: element 3 of partition 1's
        // window (its index 3 is the first to read a written element)
        let lo = sbuf_at(1, DATA).0 + 12;
        let exact = dge::Error::SourceOverlapsDestination { lo, hi: lo + 4 };
        assert!(matches!(&e, Error::Dge(d) if *d == exact), "{e}");
        assert!(super::super::by_design(&e));
        assert_eq!(f.digest(), digest);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        /// LOAD then GATHER (twice, the second after an optional free) with random windows
        /// (dtype, length, start, contiguous or strided), index dtypes and patterns,
        /// hits and misses, both miss behaviours and several channels: the DGE route and
        /// the reference agree on fabric, state and outcome.
        #[test]
        fn load_and_gather_match_the_reference(
            dtype in prop::sample::select(vec![Dtype::U8, Dtype::Bf16, Dtype::F32]),
            in_dtype in prop::sample::select(vec![Dtype::U8, Dtype::U16, Dtype::U32]),
            len in 1u16..40,
            wstride in 1i16..3,
            start in prop::sample::select(vec![0u32, 512, 1024]),
            raw in prop::collection::vec(0u32..60, 1..48),
            istride in 1i16..3,
            channels in 1u8..4,
            p in 0u32..3,
            skip in any::<bool>(),
            free in any::<bool>(),
            imm in any::<u8>(),
        ) {
            let mut f = Fabric::new(Generation::Cayman);
            let (mut s, mut route) = (CoreState::new(), DgeRoute::new());
            let n = raw.len() as u16;
            for c in 0..u32::from(channels) {
                fill_random(&mut f, sbuf_at(p + c, DATA), 512, u64::from(c));
                fill_random(&mut f, sbuf_at(p + c, DST), 512, u64::from(c) + 9);
                let idx: Vec<u32> = raw.iter().map(|&v| (v + start + c).saturating_sub(8)).collect();
                for (k, v) in idx.iter().enumerate() {
                    let at = sbuf_at(p + c, IDX + (k as u32) * istride as u32 * in_dtype.size() as u32);
                    f.write(at, &v.to_le_bytes()[..in_dtype.size()]).unwrap();
                }
            }
            let window = Tensor4d::new(sbuf(p, DATA), [wstride, 0, 0, 0], [len, 1, 1, 1]);
            let l = PoolBufferLoad::new(window, dtype, channels).with_start_index(start);
            compare_with(&mut route, &mut f, &mut s, l.into()).unwrap();
            let src = Tensor4d::new(sbuf(p, IDX), [istride, 0, 0, 0], [n, 1, 1, 1]);
            let dst = Tensor4d::new(sbuf(p, DST + 2 * u32::from(n) * 4), [-1, 0, 0, 0], [n, 1, 1, 1]);
            let miss = if skip { IndexMissBehavior::SkipWrite } else { IndexMissBehavior::ImmediateWrite };
            let g = S4d4Gt::new(src, dst, in_dtype, dtype, channels)
                .with_index_miss_behavior(miss)
                .with_immediate(u32::from(imm))
                .with_free_pool_buffer(free);
            compare_with(&mut route, &mut f, &mut s, g.into()).unwrap();
            compare_with(&mut route, &mut f, &mut s, g.with_free_pool_buffer(true).into()).unwrap();
            prop_assert_eq!(&s, &CoreState::new());
        }
    }
}
