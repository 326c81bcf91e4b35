//! # NKI-level lowering: the operations kernels are written in, as ISA instruction streams
//!
//! Each function takes tensors described by where they start ([`TensorAddr`]: a fabric
//! address or an ADDR4), a shape `[rows, cols]` and a dtype ([`Tensor`]), checks the op's
//! rules (an error names the op argument, its value and the rule: [`Error::NkiArgument`]),
//! builds instructions with the ISA struct constructors, validates each for the target
//! generation, and returns them with the bound registers they read ([`Lowered`]).
//!
//! The 2:1 name -> opcode split of seed 000 section 2 is kept: the op named "gather" that
//! copies rows, `local_gather`, lowers to INDIRECT_COPY 0xe7, and `nc_n_gather` to
//! GATHER 0x68 (with POOL_BUFFER_LOAD 0x67).
//!
//! - [`mod@pool_ops`]: [`nc_n_gather`] and [`local_gather`];
//! - [`mod@dma_ops`]: [`dma_gather`], [`dma_scatter`], [`dma_gather_transpose`],
//!   [`dma_copy`] and [`embedding_update`];
//! - [`mod@ap`]: NKI access patterns (`.ap()`) and [`dma_copy_ap`], the DMAs that go to
//!   the software DGE as a [`ApDma`] instead of ISA instructions;
//! - [`mod@transpose`]: [`dma_transpose`] (the direct one) and
//!   [`dma_gather_transpose_nd`], the 3-D and 4-D permutations of NKI's indirect
//!   `dma_transpose`, as access-pattern DMAs;
//! - [`mod@view`]: NKI's tensor views (slicing `t[2:6, ::2]`, `permute`, `reshape`,
//!   `select`, ...) as the `.ap()` they stand for.
//!
//! # How a tensor is laid out
//!
//! - POOL-side ops (`nc_n_gather`, `local_gather`) see an on-core tensor: row `p` is
//!   partition `P + p` (`P` the start's partition), its `cols` elements contiguous from
//!   the start's byte offset. The start must be in SBUF or PSUM (a fabric address there
//!   is converted to its ADDR4).
//! - DMA-side ops see a row-major block: row `r` starts `r * cols * dtype size` bytes
//!   after the start (an ADDR4 is converted to its fabric address), so a block must stay
//!   inside one region (HBM, or one SBUF/PSUM partition). Index tensors are `[1, n]` u32
//!   in SBUF partition 0.

pub mod ap;
pub mod dma_ops;
pub mod pool_ops;
pub mod transpose;
pub mod view;

pub use ap::{dma_copy_ap, ApDim, ApDma, ApOptions, ApSide, ApTensor, DgeMode, IndexAp, IndexSpan};
pub use dma_ops::{
    dma_copy, dma_gather, dma_gather_transpose, dma_scatter, embedding_update, AccessPattern,
    DmaOptions, OobMode,
};
pub use pool_ops::{local_gather, nc_n_gather};
pub use transpose::{dma_gather_transpose_nd, dma_transpose, Transpose, TRANSPOSE_AXES};

use dma::{Addr4, AddressMap, Dtype, FabricAddr, Generation};

use crate::error::Error;
use crate::isa::{BoundRegisters, Instruction};

/// Where a tensor starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorAddr {
    /// A unified fabric address.
    Fabric(FabricAddr),
    /// An on-core (SBUF/PSUM) ADDR4.
    Addr4(Addr4),
}

impl From<FabricAddr> for TensorAddr {
    fn from(a: FabricAddr) -> TensorAddr {
        TensorAddr::Fabric(a)
    }
}

impl From<Addr4> for TensorAddr {
    fn from(a: Addr4) -> TensorAddr {
        TensorAddr::Addr4(a)
    }
}

/// A 2-D tensor an NKI op reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// Where it starts.
    pub addr: TensorAddr,
    /// `[rows, cols]` (partitions and free elements for POOL-side ops).
    pub shape: [u32; 2],
    /// The element dtype.
    pub dtype: Dtype,
}

impl Tensor {
    /// A `[rows, cols]` tensor of `dtype` at `addr`.
    pub fn new(addr: impl Into<TensorAddr>, shape: [u32; 2], dtype: Dtype) -> Tensor {
        Tensor {
            addr: addr.into(),
            shape,
            dtype,
        }
    }

    /// A `[1, len]` tensor (one row): an index vector.
    pub fn vector(addr: impl Into<TensorAddr>, len: u32, dtype: Dtype) -> Tensor {
        Tensor::new(addr, [1, len], dtype)
    }

    /// Bytes in one row.
    fn row_bytes(&self) -> u64 {
        u64::from(self.shape[1]) * self.dtype.size() as u64
    }
}

/// One bound register value a lowered stream needs (BOUND_CHECK_REG `reg`, `reg + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundSetting {
    /// The low register of the pair.
    pub reg: u8,
    /// The bound (indices must be below it).
    pub bound: u64,
}

/// One shape a lowered stream needs: DMA_INDIRECT's shape register `reg`, whose
/// registers `reg..=reg + 3` hold the extents (X, Y, Z, W).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeSetting {
    /// The first register (at most 60).
    pub reg: u8,
    /// The extents, X innermost.
    pub xyzw: [u32; 4],
}

/// A lowered op: its instructions, in order, and the registers to set before they run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lowered {
    /// The ISA instructions, each valid for the target generation.
    pub instructions: Vec<Instruction>,
    /// Bound registers the instructions read.
    pub bounds: Vec<BoundSetting>,
    /// Access-pattern DMAs for the software DGE, run after the instructions.
    pub ap_dmas: Vec<ApDma>,
    /// Shape registers the instructions read.
    pub shapes: Vec<ShapeSetting>,
    /// How an op split into one request per 4096 indices maps onto its requests.
    pub split: Option<IndexSplit>,
}

/// An op split into requests of `per` indices each: request `k` (its instructions, then
/// its access-pattern DMAs, numbered together) holds the op's index positions
/// `k * per ..`. Errors and skipped indices are reported at the op's positions, and the
/// op's promise of unique destination indices holds across its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSplit {
    /// Indices per request.
    pub per: u32,
    /// The destination indices of a scatter under `unique_indices = true`, checked
    /// across the whole op before its first request runs.
    pub unique: Option<UniqueDestinations>,
}

/// `count` destination indices (u32, or i32 read as u32: a negative one is out of
/// bounds) from `at`, promised unique: one that repeats an earlier in-bounds (`< bound`)
/// index is an error if `refuse`, else a warning (a plain copy: the last index wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UniqueDestinations {
    /// Where the index vector starts.
    pub at: FabricAddr,
    /// Its indices.
    pub count: u32,
    /// The destination's rows.
    pub bound: u64,
    /// Whether a repeat is an error (a reduction, or DMA_INDIRECT without
    /// non_unique_dst_idx) or a warning.
    pub refuse: bool,
    /// Whether an out-of-bounds index fails the op (`oob = "error"`): then a repeat is
    /// the op's error only where it comes before the first such index, as within one
    /// request (the first failing position wins).
    pub oob_errors: bool,
}

impl IndexSplit {
    /// The op-level form of `e`, an error of request `k`.
    pub fn op_error(&self, k: usize, e: Error) -> Error {
        let base = self.base(k);
        match e {
            Error::IndexOutOfBounds {
                side,
                position,
                value,
                bound,
            } => Error::IndexOutOfBounds {
                side,
                position: position + base,
                value,
                bound,
            },
            Error::IndexAddress {
                side,
                position,
                value,
                source,
            } => Error::IndexAddress {
                side,
                position: position + base,
                value,
                source,
            },
            Error::DuplicateDestination {
                value,
                first,
                second,
            } => Error::DuplicateDestination {
                value,
                first: first + base,
                second: second + base,
            },
            Error::ApIndexOutOfBounds {
                side,
                position,
                value,
                tile,
                dim,
                tensor,
                bound,
            } => Error::ApIndexOutOfBounds {
                side,
                position: position + base,
                value,
                tile,
                dim,
                tensor,
                bound,
            },
            e => e,
        }
    }

    /// The op-level positions of the indices request `k` skipped.
    pub fn op_skipped(&self, k: usize, outcome: &mut crate::core_state::Outcome) {
        let base = self.base(k);
        for s in &mut outcome.skipped {
            s.position += base;
        }
    }

    /// The op's position of request `k`'s first index (requests hold at most 2^32
    /// indices in all).
    fn base(&self, k: usize) -> u32 {
        (k as u32).saturating_mul(self.per)
    }
}

impl UniqueDestinations {
    /// The repeats among the in-bounds indices, in position order: an error naming the
    /// first if `refuse`, else all of them (for the warning).
    pub fn check(&self, fabric: &dma::Fabric) -> Result<Vec<ap::Collision>, Error> {
        let mut values = vec![0u32; self.count as usize];
        fabric.read_elems(self.at, &mut values)?;
        let moves = |p: usize| values.get(p).is_some_and(|&v| u64::from(v) < self.bound);
        let repeats = ap::collisions(&values, moves);
        let first_oob = match self.oob_errors {
            true => values.iter().position(|&v| u64::from(v) >= self.bound),
            false => None,
        };
        let before_oob = |c: &&ap::Collision| first_oob.is_none_or(|p| (c.second as usize) < p);
        match (self.refuse, repeats.first().filter(before_oob)) {
            (true, Some(c)) => Err(Error::DuplicateDestination {
                value: c.value,
                first: c.first,
                second: c.second,
            }),
            _ => Ok(repeats),
        }
    }
}

impl Lowered {
    /// Writes every bound, then every shape, into `regs`: all of them, or on an error
    /// none.
    pub fn apply_registers(&self, regs: &mut BoundRegisters) -> Result<(), Error> {
        self.apply_registers_named(regs).map_err(|named| named.1)
    }

    /// [`Lowered::apply_registers`], naming the setting that failed (`bounds[k]` or
    /// `shapes[k]`).
    pub fn apply_registers_named(
        &self,
        regs: &mut BoundRegisters,
    ) -> Result<(), Box<(String, Error)>> {
        let mut next = *regs;
        for (k, b) in self.bounds.iter().enumerate() {
            let named = |e| Box::new((format!("bounds[{k}]"), e));
            next.set_bound(b.reg, b.bound).map_err(named)?;
        }
        for (k, s) in self.shapes.iter().enumerate() {
            let named = |e| Box::new((format!("shapes[{k}]"), e));
            next.set_shape(s.reg, s.xyzw).map_err(named)?;
        }
        *regs = next;
        Ok(())
    }

    /// Validates every instruction for `generation`; the lowering's last step.
    fn validated(self, generation: Generation) -> Result<Lowered, Error> {
        for inst in &self.instructions {
            inst.validate(generation)?;
        }
        Ok(self)
    }
}

/// The error for `op`'s argument `arg = value` breaking `rule`.
fn arg_error(op: &'static str, arg: &'static str, value: u64, rule: &'static str) -> Error {
    Error::NkiArgument {
        op,
        arg,
        value,
        rule,
    }
}

/// `Ok` when `ok`, else [`arg_error`].
fn ensure_arg(
    ok: bool,
    op: &'static str,
    arg: &'static str,
    value: impl Into<u64>,
    rule: &'static str,
) -> Result<(), Error> {
    match ok {
        true => Ok(()),
        false => Err(arg_error(op, arg, value.into(), rule)),
    }
}

/// `got == want`, else the error for `arg = got` breaking `rule`.
fn equal(
    op: &'static str,
    arg: &'static str,
    got: impl Into<u64>,
    want: impl Into<u64>,
    rule: &'static str,
) -> Result<(), Error> {
    let (got, want) = (got.into(), want.into());
    ensure_arg(got == want, op, arg, got, rule)
}

/// `Ok` when `got` is `want`, else [`Error::NkiDtype`] naming `got`.
fn same_dtype(
    op: &'static str,
    arg: &'static str,
    got: Dtype,
    want: Dtype,
    rule: &'static str,
) -> Result<(), Error> {
    match got == want {
        true => Ok(()),
        false => Err(Error::NkiDtype {
            op,
            arg,
            value: got,
            rule,
        }),
    }
}

/// The on-core start (ADDR4) of a POOL-side tensor.
fn on_core(
    map: &AddressMap,
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
) -> Result<Addr4, Error> {
    match t.addr {
        TensorAddr::Addr4(a) => Ok(a),
        TensorAddr::Fabric(f) => Addr4::from_fabric(f, map).map_err(|_| {
            arg_error(
                op,
                arg,
                f.0,
                "must be an SBUF or PSUM address (an on-core tensor)",
            )
        }),
    }
}

/// The fabric start of a DMA-side tensor.
fn on_fabric(
    map: &AddressMap,
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
) -> Result<FabricAddr, Error> {
    match t.addr {
        TensorAddr::Fabric(f) => Ok(f),
        TensorAddr::Addr4(a) => a.to_fabric(map).map_err(|_| {
            arg_error(
                op,
                arg,
                a.0.into(),
                "must be a valid ADDR4 on the generation's fabric",
            )
        }),
    }
}

/// `a` moved `bytes` further inside its partition.
fn addr4_plus(op: &'static str, arg: &'static str, a: Addr4, bytes: u64) -> Result<Addr4, Error> {
    let rule = "the tensor reaches past the 23-bit ADDR4 offset";
    let (space, partition, offset) = a
        .decode()
        .map_err(|_| arg_error(op, arg, a.0.into(), "must be a valid ADDR4"))?;
    let moved = u64::from(offset)
        .checked_add(bytes)
        .and_then(|o| u32::try_from(o).ok())
        .ok_or_else(|| arg_error(op, arg, bytes, rule))?;
    Addr4::encode(space, partition, moved).map_err(|_| arg_error(op, arg, moved.into(), rule))
}

/// `a` moved `bytes` further on the fabric.
fn fabric_plus(
    op: &'static str,
    arg: &'static str,
    a: FabricAddr,
    bytes: u64,
) -> Result<FabricAddr, Error> {
    a.checked_add(bytes).ok_or_else(|| {
        arg_error(
            op,
            arg,
            a.0,
            "the tensor overflows the 64-bit fabric address",
        )
    })
}

/// `shape[i] >= 1` for both dims of `t`, named `args`.
fn nonempty(op: &'static str, args: [&'static str; 2], t: &Tensor) -> Result<(), Error> {
    for (arg, n) in args.into_iter().zip(t.shape) {
        ensure_arg(n >= 1, op, arg, n, "must be at least 1")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::Space;

    #[test]
    fn addresses_convert_and_move() {
        let map = AddressMap::new(Generation::Sunda);
        let a = Addr4::encode(Space::Sbuf, 3, 16).unwrap();
        let f = a.to_fabric(&map).unwrap();
        let t = Tensor::new(f, [2, 4], Dtype::F32);
        assert_eq!(on_core(&map, "op", "t", &t).unwrap(), a);
        assert_eq!(
            on_fabric(&map, "op", "t", &Tensor::new(a, [1, 1], Dtype::U8)).unwrap(),
            f
        );
        let hbm = Tensor::new(FabricAddr(64), [2, 4], Dtype::F32);
        let e = on_core(&map, "op", "data", &hbm).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op: data = 64: must be an SBUF or PSUM address (an on-core tensor)"
        );
        assert_eq!(
            addr4_plus("op", "t", a, 8).unwrap(),
            Addr4::encode(Space::Sbuf, 3, 24).unwrap()
        );
        assert!(matches!(
            addr4_plus("op", "t", a, 1 << 23),
            Err(Error::NkiArgument { arg: "t", .. })
        ));
        assert!(fabric_plus("op", "t", FabricAddr(u64::MAX), 1).is_err());
        assert_eq!(t.row_bytes(), 16);
    }

    #[test]
    fn bounds_and_shapes_apply_to_the_register_file() {
        let l = Lowered {
            instructions: Vec::new(),
            bounds: vec![BoundSetting {
                reg: 4,
                bound: 1 << 33 | 7,
            }],
            shapes: vec![ShapeSetting {
                reg: 8,
                xyzw: [16, 4, 2, 1],
            }],
            ..Lowered::default()
        };
        let mut regs = BoundRegisters::new();
        l.apply_registers(&mut regs).unwrap();
        assert_eq!((regs.get(4).unwrap(), regs.get(5).unwrap()), (7, 2));
        let shape = regs.shape(crate::isa::ShapeReg::at(8).unwrap()).unwrap();
        assert_eq!(shape, Some([16, 4, 2, 1]));
        let bad = Lowered {
            instructions: Vec::new(),
            bounds: vec![BoundSetting { reg: 63, bound: 1 }],
            ..Lowered::default()
        };
        assert!(bad.apply_registers(&mut regs).is_err());
        // a refused shape after a good bound: neither is set
        let before = regs;
        let bad = Lowered {
            instructions: Vec::new(),
            bounds: vec![BoundSetting { reg: 0, bound: 9 }],
            shapes: vec![ShapeSetting {
                reg: 61,
                xyzw: [1; 4],
            }],
            ..Lowered::default()
        };
        let e = bad.apply_registers(&mut regs).unwrap_err();
        assert_eq!(e.rule(), Some(crate::isa::Rule::ShapeRegisterRange));
        assert_eq!(regs, before);
    }
}
