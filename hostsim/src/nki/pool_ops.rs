//! The POOL-side NKI gathers: `nc_n_gather` (GATHER 0x68 against the Pool_Buffer) and
//! `local_gather` (INDIRECT_COPY 0xe7, 8 cores x 16 partitions).

use dma::{Addr4, AddressMap, Dtype, Generation, Space};

use super::{
    addr4_plus, ensure_arg, equal, nonempty, on_core, same_dtype, Lowered, Tensor, TensorAddr,
};
use crate::core_state::POOL_BUFFER_ELEMENTS;
use crate::error::Error;
use crate::isa::validate::{CORE_PARTITIONS, MAX_INDICES, NUM_ELEM_PER_IDX};
use crate::isa::{
    IndexMissBehavior, Indirect, Instruction, PoolBufferLoad, S4d4Gt, S4d4Ic, Tensor4d,
};

/// The SBUF start of a GpSimd operand: NKI's `nc_n_gather` and `local_gather` take SBUF
/// tensors only ("GpSimd cannot access PSUM", nor HBM); raw GATHER / INDIRECT_COPY
/// instructions keep their headers' per-generation PSUM rules.
fn in_sbuf(
    map: &AddressMap,
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
) -> Result<Addr4, Error> {
    let space = match t.addr {
        TensorAddr::Addr4(a) => a
            .decode()
            .map(|(space, _, _)| space)
            .map_err(|_| super::arg_error(op, arg, a.0.into(), "must be a valid SBUF ADDR4"))?,
        TensorAddr::Fabric(f) => match map.region_of(f) {
            Ok(r) => r.space,
            // an address on no fabric: on_core names it
            Err(_) => return on_core(map, op, arg, t),
        },
    };
    let space = match space {
        Space::Sbuf => return on_core(map, op, arg, t),
        Space::Hbm => "HBM",
        Space::Psum => "PSUM",
    };
    Err(Error::NkiSpace {
        op,
        arg,
        space,
        rule: "must be in SBUF (GpSimd cannot access PSUM or HBM)",
    })
}

/// Partitions a POOL instruction can span.
const MAX_PARTITIONS: u32 = dma::generation::PARTITIONS;

/// NKI `nc_n_gather(dst, data, indices)`: `dst[p, m] = data[p, indices[p, m]]`, or 0 when
/// `indices[p, m] >= F` (the NKI simulator's clip-and-zero).
///
/// Lowered to `ceil(F / 512)` groups (seed 000 section 2). Group `g` loads elements
/// `512g .. min(512g + 512, F)` of every partition into the Pool_Buffer
/// (POOL_BUFFER_LOAD, `start_index = 512g`) and gathers every index against it: group 0
/// with IMMEDIATE_WRITE 0 (every miss becomes 0), later groups with SKIP_WRITE (a miss
/// keeps what an earlier group wrote), each freeing the buffer after its last gather.
/// An index hits exactly one group when it is below `F` and none otherwise. More than
/// 4096 indices per partition (the GATHER limit) take one GATHER per 4096 in each group.
///
/// Rules: `data` is `[P, F]` with `1 <= P <= 128`; `indices` is `[P, M]` u32 starting
/// at `data`'s partition (GATHER channel `k` reads the window loaded for partition
/// `P0 + k`); `dst` is `[P, M]` of `data`'s dtype.
pub fn nc_n_gather(
    generation: Generation,
    data: &Tensor,
    indices: &Tensor,
    dst: &Tensor,
) -> Result<Lowered, Error> {
    const OP: &str = "nc_n_gather";
    let (p, m) = check_gather(data, indices, dst)?;
    let map = AddressMap::new(generation);
    let data_a = in_sbuf(&map, OP, "data", data)?;
    let index_a = in_sbuf(&map, OP, "indices", indices)?;
    let dst_a = in_sbuf(&map, OP, "dst", dst)?;
    same_partition(data_a, index_a)?;
    let f = data.shape[1];
    let size = data.dtype.size() as u64;
    let chunks = m.div_ceil(MAX_INDICES as u32);
    let mut instructions = Vec::new();
    for group in 0..f.div_ceil(POOL_BUFFER_ELEMENTS) {
        let first = group * POOL_BUFFER_ELEMENTS;
        let len = (f - first).min(POOL_BUFFER_ELEMENTS);
        let window = addr4_plus(OP, "data", data_a, u64::from(first) * size)?;
        let load =
            PoolBufferLoad::new(contiguous(window, len), data.dtype, p).with_start_index(first);
        instructions.push(load.into());
        let miss = match group {
            0 => IndexMissBehavior::ImmediateWrite,
            _ => IndexMissBehavior::SkipWrite,
        };
        for chunk in 0..chunks {
            let gather = GatherChunk {
                chunk,
                m,
                p,
                miss,
                last: chunk + 1 == chunks,
            };
            instructions.push(gather.build((index_a, dst_a), data.dtype)?);
        }
    }
    Lowered {
        instructions,
        bounds: Vec::new(),
        ..Lowered::default()
    }
    .validated(generation)
}

/// `nc_n_gather`'s shape and dtype rules; returns (P as the channel count, M).
fn check_gather(data: &Tensor, indices: &Tensor, dst: &Tensor) -> Result<(u8, u32), Error> {
    const OP: &str = "nc_n_gather";
    nonempty(OP, ["data.shape[0]", "data.shape[1]"], data)?;
    nonempty(OP, ["indices.shape[0]", "indices.shape[1]"], indices)?;
    let [p, _] = data.shape;
    let p8 = partitions(OP, "data.shape[0]", p)?;
    let u32_rule = "nc_n_gather indices must be uint32";
    same_dtype(OP, "indices.dtype", indices.dtype, Dtype::U32, u32_rule)?;
    let rows = "must equal data.shape[0] (one row per partition)";
    equal(OP, "indices.shape[0]", indices.shape[0], p, rows)?;
    let m = indices.shape[1];
    equal(OP, "dst.shape[0]", dst.shape[0], p, rows)?;
    let cols = "must equal indices.shape[1] (one result per index)";
    equal(OP, "dst.shape[1]", dst.shape[1], m, cols)?;
    let cast = "must equal data.dtype (GATHER copies elements without a cast)";
    same_dtype(OP, "dst.dtype", dst.dtype, data.dtype, cast)?;
    let free = "must fit the 16-bit num_elem field";
    ensure_arg(m <= u32::from(u16::MAX), OP, "indices.shape[1]", m, free)?;
    Ok((p8, m))
}

/// GATHER channel `k` reads the window POOL_BUFFER_LOAD filled for partition `P + k` of
/// `data`, so the index tensor must start at `data`'s partition.
fn same_partition(data: Addr4, indices: Addr4) -> Result<(), Error> {
    let part = |a: Addr4| a.decode().map(|(_, p, _)| p).unwrap_or(u32::MAX);
    let (pd, pi) = (part(data), part(indices));
    let rule = "must start at data's partition (GATHER channel k reads the Pool_Buffer loaded for data partition P + k)";
    ensure_arg(pd == pi, "nc_n_gather", "indices partition", pi, rule)
}

/// One GATHER of a group: indices `4096 * chunk ..` of every partition.
struct GatherChunk {
    chunk: u32,
    m: u32,
    p: u8,
    miss: IndexMissBehavior,
    last: bool,
}

impl GatherChunk {
    fn build(&self, (index_a, dst_a): (Addr4, Addr4), dtype: Dtype) -> Result<Instruction, Error> {
        const OP: &str = "nc_n_gather";
        let first = self.chunk * MAX_INDICES as u32;
        let count = (self.m - first).min(MAX_INDICES as u32);
        let idx = addr4_plus(OP, "indices", index_a, u64::from(first) * 4)?;
        let out = addr4_plus(OP, "dst", dst_a, u64::from(first) * dtype.size() as u64)?;
        let g = S4d4Gt::new(
            contiguous(idx, count),
            contiguous(out, count),
            Dtype::U32,
            dtype,
            self.p,
        )
        .with_index_miss_behavior(self.miss)
        .with_immediate(0)
        .with_free_pool_buffer(self.last);
        Ok(g.into())
    }
}

/// NKI `local_gather(dst, src_buffer, index, num_elem_per_idx, num_valid_indices)`: per
/// core `c` (partitions `16c .. 16c + 16`), `ids = index[16c:16c+16].flatten(order='F')
/// [:num_valid_indices]`, and every partition `q` of the core gets, for each id in turn,
/// the run `src[q, id .. id + num_elem_per_idx]` (elements past `F` are 0). Indices are
/// element offsets. Lowered to one INDIRECT_COPY 0xe7 (Gather sub-mode,
/// `src_buffer_size = F`).
///
/// Rules: `src` is `[P, F]`, P a multiple of 16 up to 128; `index` is `[P, K]` u16;
/// `num_elem_per_idx` in {1, 2, 4, 8, 16, 32}; `num_valid_indices` (default `16 K`) is
/// 1 ..= min(16 K, 4096); `dst` is `[P, num_valid_indices * num_elem_per_idx]` of
/// `src`'s dtype.
pub fn local_gather(
    generation: Generation,
    src: &Tensor,
    index: &Tensor,
    num_elem_per_idx: u32,
    num_valid_indices: Option<u32>,
    dst: &Tensor,
) -> Result<Lowered, Error> {
    const OP: &str = "local_gather";
    let (p, per, n) = check_local_gather(src, index, num_elem_per_idx, num_valid_indices)?;
    let total = n * u32::from(per);
    let shape = "must be [src.shape[0], num_valid_indices * num_elem_per_idx]";
    equal(OP, "dst.shape[0]", dst.shape[0], src.shape[0], shape)?;
    equal(OP, "dst.shape[1]", dst.shape[1], total, shape)?;
    let cast = "must equal src.dtype (INDIRECT_COPY does not cast)";
    same_dtype(OP, "dst.dtype", dst.dtype, src.dtype, cast)?;
    let field = "num_valid_indices * num_elem_per_idx must fit the 16-bit num_elem field";
    let total16 = u16::try_from(total)
        .map_err(|_| super::arg_error(OP, "dst.shape[1]", total.into(), field))?;
    let map = AddressMap::new(generation);
    let src_a = in_sbuf(&map, OP, "src", src)?;
    let index_a = in_sbuf(&map, OP, "index", index)?;
    let dst_a = in_sbuf(&map, OP, "dst", dst)?;
    let ic = S4d4Ic::gather(
        Indirect::new(index_a, src_a, total16),
        contiguous(dst_a, total),
        src.dtype,
        per,
        src.shape[1],
        p,
    );
    Lowered {
        instructions: vec![ic.into()],
        bounds: Vec::new(),
        ..Lowered::default()
    }
    .validated(generation)
}

/// `local_gather`'s rules on `src`, `index` and the counts; returns (P, E, n).
fn check_local_gather(
    src: &Tensor,
    index: &Tensor,
    per: u32,
    valid: Option<u32>,
) -> Result<(u8, u8, u32), Error> {
    const OP: &str = "local_gather";
    nonempty(OP, ["src.shape[0]", "src.shape[1]"], src)?;
    nonempty(OP, ["index.shape[0]", "index.shape[1]"], index)?;
    let p = src.shape[0];
    let cores = "must be a multiple of 16 (8 cores x 16 partitions)";
    let whole = p.is_multiple_of(CORE_PARTITIONS);
    ensure_arg(whole, OP, "src.shape[0]", p, cores)?;
    let p8 = partitions(OP, "src.shape[0]", p)?;
    let u16_rule = "local_gather indices must be uint16";
    same_dtype(OP, "index.dtype", index.dtype, Dtype::U16, u16_rule)?;
    let rows = "must equal src.shape[0]";
    equal(OP, "index.shape[0]", index.shape[0], p, rows)?;
    let per8 = u8::try_from(per)
        .ok()
        .filter(|e| NUM_ELEM_PER_IDX.contains(e));
    let width = "must be 1, 2, 4, 8, 16 or 32";
    let per8 = per8.ok_or_else(|| super::arg_error(OP, "num_elem_per_idx", per.into(), width))?;
    let block = u64::from(index.shape[1]) * u64::from(CORE_PARTITIONS);
    let n = valid.map_or(block, u64::from);
    let range = "must be 1 ..= 16 * index.shape[1] (a core's index block) and at most 4096";
    let ok = (1..=block.min(MAX_INDICES)).contains(&n);
    ensure_arg(ok, OP, "num_valid_indices", n, range)?;
    // n <= 4096 was just checked.
    Ok((p8, per8, n as u32))
}

/// `p` as an active channel count: 1..=128.
fn partitions(op: &'static str, arg: &'static str, p: u32) -> Result<u8, Error> {
    let rule = "must be 1..=128 partitions";
    ensure_arg(p <= MAX_PARTITIONS, op, arg, p, rule)?;
    u8::try_from(p).map_err(|_| super::arg_error(op, arg, p.into(), rule))
}

/// `n` contiguous elements at `a` (counts above the 16-bit field were rejected).
fn contiguous(a: Addr4, n: u32) -> Tensor4d {
    Tensor4d::contiguous(a, u16::try_from(n).unwrap_or(u16::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Mechanism, Runtime};
    use dma::{Fabric, FabricAddr, Space};

    fn sbuf(p: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, p, offset).unwrap()
    }

    fn gather_tensors(f: u32, m: u32) -> (Tensor, Tensor, Tensor) {
        (
            Tensor::new(sbuf(4, 0), [3, f], Dtype::F32),
            Tensor::new(sbuf(4, 0x8000), [3, m], Dtype::U32),
            Tensor::new(sbuf(8, 0x10000), [3, m], Dtype::F32),
        )
    }

    #[test]
    fn nc_n_gather_emits_ceil_f_over_512_groups() {
        let (data, idx, dst) = gather_tensors(1100, 5000);
        let l = nc_n_gather(Generation::Cayman, &data, &idx, &dst).unwrap();
        // 3 groups (512, 512, 76 elements), each a load and two gathers (4096 + 904)
        assert_eq!(l.instructions.len(), 9);
        let mut loads = Vec::new();
        let mut gathers = Vec::new();
        for inst in &l.instructions {
            match inst {
                Instruction::PoolBufferLoad(p) => loads.push((
                    p.start_index(),
                    p.src_mem_pattern().element_count(),
                    p.header().num_active_channels(),
                )),
                Instruction::Gather(g) => gathers.push((
                    g.index_miss_behavior().unwrap(),
                    g.free_pool_buffer(),
                    g.src_mem_pattern().element_count(),
                )),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(loads, vec![(0, 512, 3), (512, 512, 3), (1024, 76, 3)]);
        use IndexMissBehavior::{ImmediateWrite as I, SkipWrite as S};
        let expected = [
            (I, false, 4096),
            (I, true, 904),
            (S, false, 4096),
            (S, true, 904),
        ];
        assert_eq!(gathers[..4], expected);
        assert_eq!(gathers[4..], expected[2..]);
        let Instruction::Gather(second) = l.instructions[2] else {
            panic!("not a gather")
        };
        // the second chunk starts 4096 indices (u32) and 4096 results (f32) later
        assert_eq!(
            second.src_mem_pattern().start_addr(),
            sbuf(4, 0x8000 + 4096 * 4)
        );
        assert_eq!(
            second.dst_mem_pattern().start_addr(),
            sbuf(8, 0x10000 + 4096 * 4)
        );
        assert!(l.bounds.is_empty());
    }

    #[test]
    fn nc_n_gather_zero_fills_indices_past_f() {
        let mut f = Fabric::new(Generation::Sunda);
        let (data, idx, dst) = gather_tensors(600, 5);
        let map = AddressMap::new(Generation::Sunda);
        let a = |p, o| sbuf(p, o).to_fabric(&map).unwrap();
        let rows: Vec<f32> = (0..600).map(|i| i as f32).collect();
        for p in 4..7 {
            f.write_elems(a(p, 0), &rows).unwrap();
            f.write_elems(a(p, 0x8000), &[599u32, 600, 511, 512, u32::MAX])
                .unwrap();
            f.write_elems(a(p + 4, 0x10000), &[-1f32; 5]).unwrap();
        }
        let l = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap();
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Reference).unwrap();
        r.run(&mut f, &l.instructions).unwrap();
        for p in 8..11 {
            let mut out = [0f32; 5];
            f.read_elems(a(p, 0x10000), &mut out).unwrap();
            assert_eq!(out, [599.0, 0.0, 511.0, 512.0, 0.0], "partition {p}");
        }
    }

    #[test]
    fn nc_n_gather_rules_name_the_argument() {
        let (data, mut idx, dst) = gather_tensors(16, 4);
        idx.dtype = Dtype::U16;
        let e = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nc_n_gather: indices.dtype = u16: nc_n_gather indices must be uint32"
        );
        let (mut data, idx, dst) = gather_tensors(16, 4);
        data.shape[0] = 129;
        let e = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nc_n_gather: data.shape[0] = 129: must be 1..=128 partitions"
        );
        data.shape[0] = 2;
        let e = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "indices.shape[0]",
                value: 3,
                ..
            }
        ));
        let (data, mut idx, dst) = gather_tensors(16, 4);
        idx.addr = sbuf(5, 0x8000).into();
        let e = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "indices partition",
                value: 5,
                ..
            }
        ));
        let (data, idx, mut dst) = gather_tensors(16, 4);
        dst.dtype = Dtype::I32;
        let e = nc_n_gather(Generation::Sunda, &data, &idx, &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiDtype {
                arg: "dst.dtype",
                ..
            }
        ));
        // NKI: GpSimd cannot access PSUM, on every generation (the ISA allows it before
        // maverick; raw GATHER instructions keep that rule)
        for g in Generation::ALL {
            let (data, idx, mut dst) = gather_tensors(16, 4);
            dst.addr = Addr4::encode(Space::Psum, 0, 0).unwrap().into();
            let e = nc_n_gather(g, &data, &idx, &dst).unwrap_err();
            assert_eq!(
                e.to_string(),
                "nc_n_gather: dst is in PSUM: must be in SBUF (GpSimd cannot access PSUM or HBM)"
            );
            // an ADDR4 of no space is refused as such
            let (mut data, idx, dst) = gather_tensors(16, 4);
            data.addr = TensorAddr::Addr4(Addr4(u32::MAX));
            let e = nc_n_gather(g, &data, &idx, &dst).unwrap_err();
            assert!(e.to_string().contains("must be a valid SBUF ADDR4"), "{e}");
            // an HBM tensor is named by its space, not as a raw address
            let (mut data, idx, dst) = gather_tensors(16, 4);
            data.addr = TensorAddr::Fabric(FabricAddr(0));
            let e = nc_n_gather(g, &data, &idx, &dst).unwrap_err();
            assert_eq!(
                e.to_string(),
                "nc_n_gather: data is in HBM: must be in SBUF (GpSimd cannot access PSUM or HBM)"
            );
            let (mut src, idx, dst) = copy_tensors(40, 1);
            src.addr = Addr4::encode(Space::Psum, 16, 0).unwrap().into();
            let e = local_gather(g, &src, &idx, 1, Some(40), &dst).unwrap_err();
            assert!(
                e.to_string().starts_with("local_gather: src is in PSUM: "),
                "{e}"
            );
        }
    }

    fn copy_tensors(n: u32, per: u32) -> (Tensor, Tensor, Tensor) {
        (
            Tensor::new(sbuf(16, 0), [32, 20], Dtype::U16),
            Tensor::new(sbuf(16, 0x1000), [32, 3], Dtype::U16),
            Tensor::new(sbuf(48, 0x2000), [32, n * per], Dtype::U16),
        )
    }

    #[test]
    fn local_gather_is_one_indirect_copy() {
        let (src, index, dst) = copy_tensors(40, 2);
        let l = local_gather(Generation::Sunda, &src, &index, 2, Some(40), &dst).unwrap();
        let [Instruction::IndirectCopy(ic)] = l.instructions[..] else {
            panic!("{:?}", l.instructions)
        };
        let p = ic.src().indirect();
        assert_eq!(
            (p.index_addr(), p.data_addr(), p.num_elem()),
            (sbuf(16, 0x1000), sbuf(16, 0), 80)
        );
        assert_eq!((ic.src_num_elem_per_idx(), ic.src_buffer_size()), (2, 20));
        assert_eq!(ic.header().num_active_channels(), 32);
        assert_eq!(ic.dst().tensor().start_addr(), sbuf(48, 0x2000));
        // the default uses the whole 16 x K block
        let (src, index, dst) = copy_tensors(48, 1);
        assert!(local_gather(Generation::Sunda, &src, &index, 1, None, &dst).is_ok());
    }

    #[test]
    fn local_gather_reads_each_core_column_major() {
        let mut f = Fabric::new(Generation::Sunda);
        let map = AddressMap::new(Generation::Sunda);
        let a = |p, o| sbuf(p, o).to_fabric(&map).unwrap();
        // partition q's source row is [100q, 100q + 1, ...]; core 0's index block has
        // partition r, column c = 16c + r (so column-major order is 0, 1, 2, ...), + 1
        for q in 0..16u32 {
            let row: Vec<u16> = (0..20).map(|e| (100 * q + e) as u16).collect();
            f.write_elems(a(q, 0), &row).unwrap();
            f.write_elems(a(q, 0x100), &[q as u16 + 1, q as u16 + 17])
                .unwrap();
        }
        let src = Tensor::new(sbuf(0, 0), [16, 20], Dtype::U16);
        let index = Tensor::new(sbuf(0, 0x100), [16, 2], Dtype::U16);
        let dst = Tensor::new(sbuf(0, 0x200), [16, 19], Dtype::U16);
        let l = local_gather(Generation::Sunda, &src, &index, 1, Some(19), &dst).unwrap();
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Pool).unwrap();
        r.run(&mut f, &l.instructions).unwrap();
        for q in [0u32, 9] {
            let mut out = vec![0u16; 19];
            f.read_elems(a(q, 0x200), &mut out).unwrap();
            // ids 1..=19; id 19 is the last element, none pass F = 20
            let expected: Vec<u16> = (1..=19).map(|id| (100 * q + id) as u16).collect();
            assert_eq!(out, expected, "partition {q}");
        }
    }

    #[test]
    fn local_gather_rules_name_the_argument() {
        let (mut src, index, dst) = copy_tensors(8, 1);
        src.shape[0] = 24;
        let e = local_gather(Generation::Sunda, &src, &index, 1, Some(8), &dst).unwrap_err();
        assert_eq!(
            e.to_string(),
            "local_gather: src.shape[0] = 24: must be a multiple of 16 (8 cores x 16 partitions)"
        );
        let (src, index, dst) = copy_tensors(8, 3);
        let e = local_gather(Generation::Sunda, &src, &index, 3, Some(8), &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "num_elem_per_idx",
                value: 3,
                ..
            }
        ));
        let (src, index, dst) = copy_tensors(49, 1);
        let e = local_gather(Generation::Sunda, &src, &index, 1, Some(49), &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "num_valid_indices",
                value: 49,
                ..
            }
        ));
        let (src, mut index, dst) = copy_tensors(8, 1);
        index.dtype = Dtype::U32;
        let e = local_gather(Generation::Sunda, &src, &index, 1, Some(8), &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiDtype {
                arg: "index.dtype",
                ..
            }
        ));
        let (src, index, mut dst) = copy_tensors(8, 1);
        dst.shape[1] = 9;
        let e = local_gather(Generation::Sunda, &src, &index, 1, Some(8), &dst).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "dst.shape[1]",
                value: 9,
                ..
            }
        ));
    }
}
