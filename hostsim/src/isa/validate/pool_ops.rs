//! Validity of the POOL-engine instructions: POOL_BUFFER_LOAD 0x67, GATHER 0x68 and
//! INDIRECT_COPY 0xe7.

use dma::{AddressMap, Dtype, Generation, Space};

use super::{active_channels, addr4_span, channel_range, tensor_span};
use crate::error::Error;
use crate::isa::fields::IcMode;
use crate::isa::rule::{self, ensure, FieldPath, Rule};
use crate::isa::structs::{Operand, PoolBufferLoad, S4d4Gt, S4d4Ic};

/// Pool_Buffer capacity per channel (POOL_BUFFER_MAX_ELEMENTS).
pub const POOL_BUFFER_MAX_ELEMENTS: u64 = 512;
/// Indices per instruction (the one limit the DGE enforces too).
pub const MAX_INDICES: u64 = dge::indirection::MAX_INDICES as u64;
/// INDIRECT_COPY row widths.
pub const NUM_ELEM_PER_IDX: [u8; 6] = [1, 2, 4, 8, 16, 32];
/// Partitions per GpSimd core (INDIRECT_COPY runs 8 cores of 16 partitions).
pub const CORE_PARTITIONS: u32 = 16;

/// POOL_BUFFER_LOAD: at most 512 elements per channel, a 512-aligned window start, the
/// pattern on the fabric for every active channel.
pub fn pool_buffer_load(generation: Generation, p: &PoolBufferLoad) -> Result<(), Error> {
    p.check_decode()?;
    let at = PoolBufferLoad::at;
    let channels = active_channels(generation, p.header(), PoolBufferLoad::NAME)?;
    let t = p.src_mem_pattern();
    let count = t.element_count();
    let capacity = POOL_BUFFER_MAX_ELEMENTS;
    rule::at_most(
        at("src_mem_pattern.num_elem"),
        count,
        capacity,
        Rule::PoolBufferCapacity,
    )?;
    let start = p.start_index();
    let aligned = u64::from(start).is_multiple_of(capacity);
    ensure(
        aligned,
        at("start_index"),
        start,
        Rule::PoolBufferStartAlign,
    )?;
    let dtype = p.dtype()?;
    pool_element(at("dtype"), dtype)?;
    let map = AddressMap::new(generation);
    let (_, partition) = tensor_span(&map, at("src_mem_pattern"), &t, dtype.size())?;
    channel_range(
        p.header(),
        at("src_mem_pattern.start_addr"),
        partition,
        channels,
    )
}

/// GATHER: index dtype u8/u16/u32, equal src/dst counts, at most 4096 indices per channel,
/// an immediate that fits `out_dtype`, both patterns on the fabric for every channel, and
/// on maverick neither pattern in PSUM.
pub fn gather(generation: Generation, g: &S4d4Gt) -> Result<(), Error> {
    g.check_decode()?;
    let at = S4d4Gt::at;
    let channels = active_channels(generation, g.header(), S4d4Gt::NAME)?;
    let in_dtype = g.in_dtype()?;
    let index_ok = matches!(in_dtype, Dtype::U8 | Dtype::U16 | Dtype::U32);
    ensure(
        index_ok,
        at("in_dtype"),
        in_dtype.code(),
        Rule::GatherIndexDtype,
    )?;
    let out_dtype = g.out_dtype()?;
    pool_element(at("out_dtype"), out_dtype)?;
    let imm = u64::from(g.immediate());
    ensure(
        imm.checked_shr(8 * out_dtype.size() as u32).unwrap_or(0) == 0,
        at("immediate"),
        imm,
        Rule::ImmediateWidth,
    )?;
    let count = g.src_mem_pattern().element_count();
    let dst_count = g.dst_mem_pattern().element_count();
    rule::equal(
        at("dst_mem_pattern.num_elem"),
        dst_count,
        count,
        Rule::GatherElementCount,
    )?;
    rule::at_most(
        at("src_mem_pattern.num_elem"),
        count,
        MAX_INDICES,
        Rule::IndexCount,
    )?;
    gather_patterns(generation, g, channels, [in_dtype.size(), out_dtype.size()])
}

/// A POOL instruction's element dtype: 1, 2 or 4 bytes, the IVP lane widths (seed 000:
/// the POOL kernels size elements 1/2/4 from the dtype enum).
fn pool_element(at: FieldPath, dtype: Dtype) -> Result<(), Error> {
    let ok = dtype.size() <= 4;
    ensure(ok, at, dtype.code(), Rule::PoolElementDtype)
}

/// Both GATHER patterns on the fabric for every channel (`sizes`: index and element
/// bytes), neither in PSUM on maverick.
fn gather_patterns(
    generation: Generation,
    g: &S4d4Gt,
    channels: u32,
    sizes: [usize; 2],
) -> Result<(), Error> {
    let at = S4d4Gt::at;
    let map = AddressMap::new(generation);
    let patterns = [
        ("src_mem_pattern", g.src_mem_pattern()),
        ("dst_mem_pattern", g.dst_mem_pattern()),
    ];
    for ((name, t), size) in patterns.into_iter().zip(sizes) {
        let (space, partition) = tensor_span(&map, at(name), &t, size)?;
        let psum_ok = space != Space::Psum || generation != Generation::Maverick;
        ensure(psum_ok, at(name), t.start_addr().0, Rule::GatherPsum)?;
        channel_range(g.header(), at(name), partition, channels)?;
    }
    Ok(())
}

/// INDIRECT_COPY: the Gather sub-mode only (dst fields 0, no cast, u16 indices), a row
/// width in {1,2,4,8,16,32} dividing `num_elem`, at most 4096 indices, whole cores, index
/// and data tensors in SBUF, and every tensor on the fabric for every channel.
///
/// Footprints: per partition, the index block is `ceil(indices / 16)` u16 (each core's
/// 16 x K block is read partition-first), the source row `src_buffer_size` elements, and
/// the dst pattern `num_elem` elements.
pub fn indirect_copy(generation: Generation, ic: &S4d4Ic) -> Result<(), Error> {
    ic.check_decode()?;
    let at = S4d4Ic::at;
    let channels = active_channels(generation, ic.header(), S4d4Ic::NAME)?;
    let whole_cores = channels.is_multiple_of(CORE_PARTITIONS);
    let channels_at = at("header.num_active_channels");
    ensure(
        whole_cores,
        channels_at,
        channels,
        Rule::IndirectCopyCoreChannels,
    )?;
    gather_sub_mode(ic)?;
    let indices = index_count(ic)?;
    let size = ic.src_buffer_size();
    rule::nonzero(at("src_buffer_size"), size)?;
    let map = AddressMap::new(generation);
    let esz = ic.in_dtype()?.size();
    let p = ic.src().indirect();
    let index_bytes = indices.div_ceil(u64::from(CORE_PARTITIONS)) * 2;
    let sbuf = [
        ("src.i.p.index_addr", p.index_addr(), index_bytes),
        (
            "src.i.p.data_addr",
            p.data_addr(),
            u64::from(size) * esz as u64,
        ),
    ];
    for (name, addr, len) in sbuf {
        let (space, partition) = addr4_span(&map, at(name), addr, len)?;
        ensure(
            space == Space::Sbuf,
            at(name),
            addr.0,
            Rule::IndirectCopySbuf,
        )?;
        channel_range(ic.header(), at(name), partition, channels)?;
    }
    let dst = ic.dst().tensor();
    let n = u64::from(p.num_elem());
    rule::equal(
        at("dst.t.num_elem"),
        dst.element_count(),
        n,
        Rule::IndirectCopyDstCount,
    )?;
    let (_, partition) = tensor_span(&map, at("dst.t"), &dst, esz)?;
    channel_range(ic.header(), at("dst.t.start_addr"), partition, channels)
}

/// The Gather sub-mode's fixed fields: mode 0, dst fields 0, `in == out`, u16 indices.
fn gather_sub_mode(ic: &S4d4Ic) -> Result<(), Error> {
    let at = S4d4Ic::at;
    let mode = ic.mode()?.code();
    rule::equal(
        at("mode"),
        mode,
        IcMode::Gather.code(),
        Rule::IndirectCopyMode,
    )?;
    let zero = Rule::IndirectCopyDstFieldsZero;
    rule::equal(
        at("dst_num_elem_per_idx"),
        ic.dst_num_elem_per_idx(),
        0,
        zero,
    )?;
    rule::equal(at("dst_buffer_size"), ic.dst_buffer_size(), 0, zero)?;
    pool_element(at("in_dtype"), ic.in_dtype()?)?;
    let (out, input) = (ic.out_dtype()?.code(), ic.in_dtype()?.code());
    rule::equal(at("out_dtype"), out, input, Rule::IndirectCopyNoCast)?;
    let index = ic.index_dtype()?.code();
    rule::equal(
        at("index_dtype"),
        index,
        Dtype::U16.code(),
        Rule::IndirectCopyIndexDtype,
    )
}

/// `num_elem / src_num_elem_per_idx`, after checking the width set, divisibility and
/// the 4096 limit.
fn index_count(ic: &S4d4Ic) -> Result<u64, Error> {
    let at: fn(&'static str) -> FieldPath = S4d4Ic::at;
    let per = ic.src_num_elem_per_idx();
    let width_ok = NUM_ELEM_PER_IDX.contains(&per);
    ensure(
        width_ok,
        at("src_num_elem_per_idx"),
        per,
        Rule::NumElemPerIdx,
    )?;
    let n = ic.src().indirect().num_elem();
    rule::nonzero(at("src.i.p.num_elem"), n)?;
    let divisible = n.is_multiple_of(u16::from(per));
    ensure(divisible, at("src.i.p.num_elem"), n, Rule::NumElemDivisible)?;
    let indices = u64::from(n / u16::from(per));
    rule::at_most(
        at("src.i.p.num_elem"),
        indices,
        MAX_INDICES,
        Rule::IndexCount,
    )?;
    Ok(indices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::fields::{IndexMissBehavior, Indirect, InstFlags, MemPattern4d, Tensor4d};
    use crate::isa::validate::{assert_fabric, assert_rule};
    use dma::Addr4;

    const ALL: [Generation; 4] = Generation::ALL;
    const SUNDA: Generation = Generation::Sunda;
    const MAVERICK: Generation = Generation::Maverick;

    fn sbuf(partition: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, partition, offset).unwrap()
    }

    fn psum(partition: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Psum, partition, offset).unwrap()
    }

    fn load() -> PoolBufferLoad {
        PoolBufferLoad::new(Tensor4d::contiguous(sbuf(0, 0), 512), Dtype::F32, 128)
            .with_start_index(512)
    }

    fn gt(n: u16) -> S4d4Gt {
        let src = Tensor4d::contiguous(sbuf(0, 0x100), n);
        let dst = Tensor4d::contiguous(sbuf(0, 0x8000), n);
        S4d4Gt::new(src, dst, Dtype::U32, Dtype::F32, 64)
    }

    /// A GATHER of 8 indices at SBUF p0 byte 0 into `dst_count` elements at byte 0x100,
    /// one channel.
    fn gt_typed(dst_count: u16, in_dtype: Dtype, out_dtype: Dtype) -> S4d4Gt {
        let src = Tensor4d::contiguous(sbuf(0, 0), 8);
        let dst = Tensor4d::contiguous(sbuf(0, 0x100), dst_count);
        S4d4Gt::new(src, dst, in_dtype, out_dtype, 1)
    }

    /// An f16 INDIRECT_COPY over `p` into `dst_count` elements at SBUF p0 byte 0x8000.
    fn ic_over(p: Indirect, dst_count: u16, per: u8, buffer: u32, channels: u8) -> S4d4Ic {
        let dst = Tensor4d::contiguous(sbuf(0, 0x8000), dst_count);
        S4d4Ic::gather(p, dst, Dtype::F16, per, buffer, channels)
    }

    fn ic(num_elem: u16, per: u8) -> S4d4Ic {
        let p = Indirect::new(sbuf(0, 0), sbuf(0, 0x1000), num_elem);
        ic_over(p, num_elem, per, 2048, 128)
    }

    #[test]
    fn good_instructions_pass_everywhere() {
        for g in ALL {
            pool_buffer_load(g, &load()).unwrap();
            gather(g, &gt(4096)).unwrap();
            indirect_copy(g, &ic(4096 * 4, 4)).unwrap();
        }
    }

    #[test]
    fn pool_buffer_capacity() {
        let p = PoolBufferLoad::new(
            Tensor4d::new(sbuf(0, 0), [1, 16, 0, 0], [16, 33, 1, 1]),
            Dtype::U8,
            1,
        );
        assert_rule(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.src_mem_pattern.num_elem",
            528,
            Rule::PoolBufferCapacity,
        );
    }

    #[test]
    fn pool_buffer_start_align() {
        let p = load().with_start_index(1000);
        assert_rule(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.start_index",
            1000,
            Rule::PoolBufferStartAlign,
        );
    }

    #[test]
    fn pool_buffer_load_off_fabric_and_channels() {
        let p = PoolBufferLoad::new(
            Tensor4d::contiguous(sbuf(0, 192 * 1024 - 8), 4),
            Dtype::F32,
            1,
        );
        assert_fabric(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.src_mem_pattern",
        );
        assert!(pool_buffer_load(Generation::Cayman, &p).is_ok());
        let p = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(1, 0), 4), Dtype::F32, 128);
        assert_rule(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.src_mem_pattern.start_addr",
            129,
            Rule::ActiveChannelRange,
        );
        let p = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(0, 0), 4), Dtype::F32, 0);
        assert_rule(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.header.num_active_channels",
            0,
            Rule::ActiveChannelCount,
        );
    }

    #[test]
    fn gather_index_dtype() {
        for (d, ok) in [
            (Dtype::U8, true),
            (Dtype::U16, true),
            (Dtype::U32, true),
            (Dtype::I32, false),
            (Dtype::F32, false),
        ] {
            let g = gt_typed(8, d, Dtype::F32);
            if ok {
                gather(SUNDA, &g).unwrap();
            } else {
                assert_rule(
                    gather(SUNDA, &g),
                    "S4D4_GT.in_dtype",
                    d.code().into(),
                    Rule::GatherIndexDtype,
                );
            }
        }
    }

    #[test]
    fn pool_ops_refuse_eight_byte_elements() {
        let code = u64::from(Dtype::I64.code());
        let p = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(0, 0), 4), Dtype::I64, 1);
        let rule = Rule::PoolElementDtype;
        assert_rule(
            pool_buffer_load(SUNDA, &p),
            "POOL_BUFFER_LOAD.dtype",
            code,
            rule,
        );
        let g = gt_typed(8, Dtype::U32, Dtype::I64);
        assert_rule(gather(SUNDA, &g), "S4D4_GT.out_dtype", code, rule);
        let p = Indirect::new(sbuf(0, 0), sbuf(0, 0x1000), 16);
        let i = S4d4Ic::gather(
            p,
            Tensor4d::contiguous(sbuf(0, 0x8000), 16),
            Dtype::I64,
            1,
            64,
            16,
        );
        assert_rule(indirect_copy(SUNDA, &i), "S4D4_IC.in_dtype", code, rule);
    }

    #[test]
    fn gather_element_count() {
        let g = gt_typed(9, Dtype::U16, Dtype::U8);
        assert_rule(
            gather(SUNDA, &g),
            "S4D4_GT.dst_mem_pattern.num_elem",
            9,
            Rule::GatherElementCount,
        );
    }

    #[test]
    fn gather_index_count() {
        assert_rule(
            gather(SUNDA, &gt(4097)),
            "S4D4_GT.src_mem_pattern.num_elem",
            4097,
            Rule::IndexCount,
        );
    }

    #[test]
    fn gather_immediate_width() {
        let g = gt_typed(8, Dtype::U8, Dtype::Bf16);
        gather(SUNDA, &g.with_immediate(0xffff)).unwrap();
        assert_rule(
            gather(SUNDA, &g.with_immediate(0x1_0000)),
            "S4D4_GT.immediate",
            0x1_0000,
            Rule::ImmediateWidth,
        );
        gather(
            SUNDA,
            &gt(8)
                .with_immediate(u32::MAX)
                .with_index_miss_behavior(IndexMissBehavior::SkipWrite),
        )
        .unwrap();
    }

    #[test]
    fn gather_psum_only_before_maverick() {
        let dst = Tensor4d::contiguous(psum(0, 0), 16);
        let g = S4d4Gt::new(
            Tensor4d::contiguous(sbuf(0, 0), 16),
            dst,
            Dtype::U32,
            Dtype::F32,
            8,
        );
        for gen in [Generation::Sunda, Generation::Cayman, Generation::Mariana] {
            gather(gen, &g).unwrap();
        }
        assert_rule(
            gather(MAVERICK, &g),
            "S4D4_GT.dst_mem_pattern",
            psum(0, 0).0.into(),
            Rule::GatherPsum,
        );
        let src = Tensor4d::contiguous(psum(2, 64), 16);
        let g = S4d4Gt::new(
            src,
            Tensor4d::contiguous(sbuf(0, 0), 16),
            Dtype::U32,
            Dtype::F32,
            8,
        );
        assert_rule(
            gather(MAVERICK, &g),
            "S4D4_GT.src_mem_pattern",
            psum(2, 64).0.into(),
            Rule::GatherPsum,
        );
    }

    #[test]
    fn gather_tile_aware_channels_on_maverick() {
        let g = |p: u32, n: u8| {
            let src = Tensor4d::contiguous(sbuf(p, 0), 8);
            S4d4Gt::new(
                src,
                Tensor4d::contiguous(sbuf(p, 0x100), 8),
                Dtype::U32,
                Dtype::F32,
                n,
            )
            .with_inst_flags(InstFlags::TILE)
        };
        gather(MAVERICK, &g(32, 32)).unwrap();
        assert_rule(
            gather(MAVERICK, &g(40, 32)),
            "S4D4_GT.src_mem_pattern",
            40,
            Rule::ActiveChannelTile,
        );
        assert_rule(
            gather(SUNDA, &g(32, 32)),
            "S4D4_GT.header.inst_flags",
            1,
            Rule::TileFlagGeneration,
        );
        // without TILE maverick accepts a range across tiles
        gather(MAVERICK, &g(40, 32).with_inst_flags(InstFlags::NONE)).unwrap();
    }

    #[test]
    fn gather_off_fabric() {
        let src = Tensor4d::new(sbuf(0, 0), [16384, 0, 0, 0], [4, 1, 1, 1]);
        let g = S4d4Gt::new(
            src,
            Tensor4d::contiguous(sbuf(0, 0), 4),
            Dtype::U32,
            Dtype::F32,
            1,
        );
        // 3 * 16384 * 4 + 4 bytes = 192 KiB + 4: off a v2 partition, inside a v3 one
        assert_fabric(gather(SUNDA, &g), "S4D4_GT.src_mem_pattern");
        gather(Generation::Cayman, &g).unwrap();
    }

    #[test]
    fn indirect_copy_core_channels() {
        let bad = ic_over(Indirect::new(sbuf(0, 0), sbuf(0, 64), 8), 8, 1, 8, 24);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.header.num_active_channels",
            24,
            Rule::IndirectCopyCoreChannels,
        );
    }

    #[test]
    fn indirect_copy_mode() {
        let i = MemPattern4d::from_indirect(Indirect::new(sbuf(0, 0), sbuf(0, 0x1000), 64));
        let t = MemPattern4d::from_tensor(Tensor4d::contiguous(sbuf(0, 0x8000), 64));
        let scatter = ic(64, 1)
            .with_raw_mode(IcMode::Scatter, 0, 0)
            .with_patterns(t, i);
        assert_rule(
            indirect_copy(SUNDA, &scatter),
            "S4D4_IC.mode",
            1,
            Rule::IndirectCopyMode,
        );
        let both = ic(64, 1)
            .with_raw_mode(IcMode::GatherScatter, 0, 0)
            .with_patterns(i, i);
        assert_rule(
            indirect_copy(SUNDA, &both),
            "S4D4_IC.mode",
            2,
            Rule::IndirectCopyMode,
        );
    }

    #[test]
    fn indirect_copy_dst_fields_zero() {
        let bad = ic(64, 1).with_raw_mode(IcMode::Gather, 1, 0);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.dst_num_elem_per_idx",
            1,
            Rule::IndirectCopyDstFieldsZero,
        );
        let bad = ic(64, 1).with_raw_mode(IcMode::Gather, 0, 64);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.dst_buffer_size",
            64,
            Rule::IndirectCopyDstFieldsZero,
        );
    }

    #[test]
    fn indirect_copy_no_cast() {
        let bad = ic(64, 1).with_dtypes(Dtype::F16, Dtype::Bf16, Dtype::U16);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.out_dtype",
            Dtype::Bf16.code().into(),
            Rule::IndirectCopyNoCast,
        );
    }

    #[test]
    fn indirect_copy_index_dtype() {
        let bad = ic(64, 1).with_dtypes(Dtype::F16, Dtype::F16, Dtype::U32);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.index_dtype",
            0x9,
            Rule::IndirectCopyIndexDtype,
        );
    }

    #[test]
    fn indirect_copy_num_elem_per_idx() {
        for per in NUM_ELEM_PER_IDX {
            indirect_copy(SUNDA, &ic(64, per)).unwrap();
        }
        for per in [0u8, 3, 64] {
            assert_rule(
                indirect_copy(SUNDA, &ic(64, per)),
                "S4D4_IC.src_num_elem_per_idx",
                per.into(),
                Rule::NumElemPerIdx,
            );
        }
    }

    #[test]
    fn indirect_copy_divisible_and_count() {
        assert_rule(
            indirect_copy(SUNDA, &ic(66, 4)),
            "S4D4_IC.src.i.p.num_elem",
            66,
            Rule::NumElemDivisible,
        );
        assert_rule(
            indirect_copy(SUNDA, &ic(4097, 1)),
            "S4D4_IC.src.i.p.num_elem",
            4097,
            Rule::IndexCount,
        );
        assert_rule(
            indirect_copy(SUNDA, &ic(0, 1)),
            "S4D4_IC.src.i.p.num_elem",
            0,
            Rule::NonZero,
        );
    }

    #[test]
    fn indirect_copy_sbuf_only() {
        let p = Indirect::new(psum(0, 0), sbuf(0, 0x1000), 64);
        let bad = ic_over(p, 64, 1, 2048, 16);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.src.i.p.index_addr",
            psum(0, 0).0.into(),
            Rule::IndirectCopySbuf,
        );
        let p = Indirect::new(sbuf(0, 0), psum(0, 0), 64);
        let bad = ic_over(p, 64, 1, 2048, 16);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.src.i.p.data_addr",
            psum(0, 0).0.into(),
            Rule::IndirectCopySbuf,
        );
    }

    #[test]
    fn indirect_copy_dst_count_and_buffer() {
        let p = Indirect::new(sbuf(0, 0), sbuf(0, 0x1000), 64);
        let bad = ic_over(p, 63, 1, 2048, 16);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.dst.t.num_elem",
            63,
            Rule::IndirectCopyDstCount,
        );
        let bad = ic_over(p, 64, 1, 0, 16);
        assert_rule(
            indirect_copy(SUNDA, &bad),
            "S4D4_IC.src_buffer_size",
            0,
            Rule::NonZero,
        );
        // a 100 000-element f16 row (200 000 bytes) leaves a v2 partition
        let bad = ic_over(p, 64, 1, 100_000, 16);
        assert_fabric(indirect_copy(SUNDA, &bad), "S4D4_IC.src.i.p.data_addr");
    }
}
