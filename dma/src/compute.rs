//! Compute ops: the DGE_COMPUTE_OP and CCE_OP enums with the seed's codes, and their
//! element-wise application to little-endian byte slices of any [`Dtype`]. The DMA
//! engines compute in float32 (NKI): both operands are converted to f32, the op runs in
//! f32 with numpy's ufunc rules (`np.add`, `np.multiply`, `np.maximum`, `np.minimum`), and
//! the result is converted back to the dtype.
//!
//! Every op reads the destination `B` and the source `A` and writes `B = op(B, A)`: the
//! destination is numpy's first argument. [`apply`] checks the operands, dispatches on the
//! dtype and the op once, and runs a loop monomorphised for one [`Element`] type over the
//! byte slices viewed as fixed-size element images ([`images`]), so there is no
//! per-element match or length check and the loops vectorise. f16 and bf16 run in blocks
//! of 128: both operands widened to f32, the f32 op, then narrowed back. f32 ADD and
//! MULTIPLY run in blocks of 16 that settle NaNs only when a result in the block is NaN.
//!
//! # Exact semantics
//!
//! - **NONE**: `B = A`, a byte copy whatever the dtype.
//! - **Integers** (u8 i8 u16 i16 u32 i32 i64): `b = B as f32`, `a = A as f32` (exact up to
//!   16 bits; wider values round to nearest even, once, so i32 `2^25 + 1` is `2^25`), `r = b + a`,
//!   `b * a`, `max(b, a)` or `min(b, a)` in f32 (rounded to nearest even), then `r` goes
//!   back rounding to nearest even and saturating at the dtype's range (NaN would give 0;
//!   integer operands never make one). So i32 `(2^25 + 1) + 1 = 33554432`, u32
//!   `u32::MAX + 1 = u32::MAX`, i64 `i64::MAX + 0 = i64::MAX` (2^63 saturates), i8
//!   `-128 * -1 = 127`, and MAX/MIN return the chosen
//!   operand's f32 value converted back (u32 `max(2^24 + 1, 0) = 2^24`). MAX/MIN keep `B`
//!   on equal f32 values as the float rule does, which cannot be seen: the result is that
//!   value either way. Up to 16 bits every operand and sum is exact in f32 and a product
//!   is exact or past 2^24, out of range either way, so the rule is saturating integer
//!   ADD/MULTIPLY and plain MAX/MIN, and those dtypes are computed so.
//! - **f32 ADD / MULTIPLY**: IEEE-754 binary32, round to nearest even, no flush to zero. A
//!   NaN result is made deterministic: if `B` is NaN the result is `B` quieted (quiet bit
//!   `0x0040_0000` set, payload and sign kept), else if `A` is NaN it is `A` quieted, else
//!   (an invalid operation such as `inf - inf` or `0 * inf`) it is [`F32_DEFAULT_NAN`]
//!   `0xffc0_0000`. That is what numpy gives on x86-64 hosts; it is fixed here so that every
//!   host and every loop shape (vector body or tail) produces the same bits.
//! - **MAX**: `if B >= A || isnan(B) { B } else { A }`; **MIN**: `if B <= A || isnan(B)
//!   { B } else { A }` — numpy's scalar rule. A NaN operand is returned unchanged (not
//!   quieted): `B`'s bits when `B` is NaN, `A`'s bits when only `A` is. Equal operands
//!   return `B`, so `max(-0.0, +0.0) = -0.0`, `max(+0.0, -0.0) = +0.0`, and the same for
//!   MIN (numpy's SIMD loops may differ here on some hosts; the scalar rule is the model's).
//! - **f16 and bf16**: both operands widen exactly to f32, the f32 rule above applies, and
//!   ADD/MULTIPLY round back to nearest even (overflow gives ±inf; a NaN keeps its sign and
//!   top payload bits with the quiet bit set, so f16 `inf - inf` is `0xfe00` and bf16 is
//!   `0xffc0`). MAX/MIN compare the widened values and return the chosen operand's
//!   original bits. (A sum rounded first to f32 then to f16/bf16 equals the directly
//!   rounded sum, since f32 carries more than twice their precision plus two bits.)

use crate::dtype::Dtype;
use crate::error::Error;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// DGE_COMPUTE_OP (seed 000 section 3c): how a DMA writes its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComputeOp {
    /// `B = A` (plain copy), code 0.
    None,
    /// `B += A` (scatter-add), code 1.
    Add,
    /// `B *= A`, code 2.
    Multiply,
    /// `B = max(B, A)`, code 3.
    Max,
    /// `B = min(B, A)`, code 4.
    Min,
}

impl ComputeOp {
    /// Every op, in code order.
    pub const ALL: [ComputeOp; 5] = [
        ComputeOp::None,
        ComputeOp::Add,
        ComputeOp::Multiply,
        ComputeOp::Max,
        ComputeOp::Min,
    ];

    /// The DGE_COMPUTE_OP code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Decodes a DGE_COMPUTE_OP code (0..=4).
    pub fn from_code(code: u8) -> Result<ComputeOp, Error> {
        ComputeOp::ALL
            .get(usize::from(code))
            .copied()
            .ok_or(Error::UnknownComputeOp { code })
    }

    /// The scenario-file name: `none`, `add`, `multiply`, `max`, `min`.
    pub fn name(self) -> &'static str {
        match self {
            ComputeOp::None => "none",
            ComputeOp::Add => "add",
            ComputeOp::Multiply => "multiply",
            ComputeOp::Max => "max",
            ComputeOp::Min => "min",
        }
    }
}

/// CCE_OP (seed 000 section 3d): the embedding update's reduction. Code 1 (multiply) is
/// commented out in the header and rejected here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CceOp {
    /// code 0
    Add,
    /// code 2
    Max,
    /// code 3
    Min,
}

impl CceOp {
    /// The CCE_OP code.
    pub fn code(self) -> u8 {
        match self {
            CceOp::Add => 0,
            CceOp::Max => 2,
            CceOp::Min => 3,
        }
    }

    /// Decodes a CCE_OP code; 1 and anything above 3 are rejected.
    pub fn from_code(code: u8) -> Result<CceOp, Error> {
        match code {
            0 => Ok(CceOp::Add),
            2 => Ok(CceOp::Max),
            3 => Ok(CceOp::Min),
            _ => Err(Error::UnknownCceOp { code }),
        }
    }

    /// The compute op that applies this reduction.
    pub fn compute_op(self) -> ComputeOp {
        match self {
            CceOp::Add => ComputeOp::Add,
            CceOp::Max => ComputeOp::Max,
            CceOp::Min => ComputeOp::Min,
        }
    }
}

/// The NaN an invalid f32 operation (`inf - inf`, `0 * inf`) produces: x86's default NaN.
pub const F32_DEFAULT_NAN: u32 = 0xffc0_0000;
pub(crate) const F32_QUIET_BIT: u32 = 0x0040_0000;

/// One element type of the fabric: its little-endian encoding and the four reductions of
/// DGE_COMPUTE_OP (with the semantics in the module docs). Implemented for `u8`, `i8`,
/// `u16`, `i16`, `u32`, `i32`, `i64`, [`half::f16`], [`half::bf16`] and `f32`.
pub trait Element: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// The dtype this type stores.
    const DTYPE: Dtype;
    /// The little-endian byte image, `[u8; size]` (a zerocopy type, so byte slices can be
    /// viewed as slices of images without copying).
    type Bytes: Copy + FromBytes + IntoBytes + Immutable + KnownLayout + Unaligned;
    /// Decodes a little-endian image.
    fn from_le(bytes: Self::Bytes) -> Self;
    /// Encodes as a little-endian image.
    fn to_le(self) -> Self::Bytes;
    /// The little-endian images of `elems` as one byte slice, without copying, where the
    /// type's memory already is that image (a plain number on a little-endian machine);
    /// `None` where the images must be made one by one with [`Element::to_le`].
    fn le_image(elems: &[Self]) -> Option<&[u8]> {
        let _ = elems;
        None
    }
    /// ADD: `self + src`.
    fn op_add(self, src: Self) -> Self;
    /// MULTIPLY: `self * src`.
    fn op_mul(self, src: Self) -> Self;
    /// MAX: `np.maximum(self, src)`.
    fn op_max(self, src: Self) -> Self;
    /// MIN: `np.minimum(self, src)`.
    fn op_min(self, src: Self) -> Self;
}

/// An integer dtype's [`Element`] encoding: its little-endian bytes, viewed in place.
macro_rules! int_encoding {
    ($t:ty, $d:ident) => {
        const DTYPE: Dtype = Dtype::$d;
        type Bytes = [u8; core::mem::size_of::<$t>()];
        fn from_le(bytes: Self::Bytes) -> Self {
            <$t>::from_le_bytes(bytes)
        }
        fn to_le(self) -> Self::Bytes {
            self.to_le_bytes()
        }
        #[cfg(target_endian = "little")]
        fn le_image(elems: &[Self]) -> Option<&[u8]> {
            Some(elems.as_bytes())
        }
    };
}

/// u8 i8 u16 i16: the f32 rule computed exactly in integers (the module docs say why the
/// results are the same), so the loops vectorise as plain integer code. `$wide` holds
/// every product.
macro_rules! narrow_int_element {
    ($($t:ty => $d:ident, $wide:ty),*) => {$(
        impl Element for $t {
            int_encoding!($t, $d);
            fn op_add(self, src: Self) -> Self {
                self.saturating_add(src)
            }
            fn op_mul(self, src: Self) -> Self {
                let product = <$wide>::from(self) * <$wide>::from(src);
                // clamped to the dtype's range, so the cast is exact
                product.clamp(<$t>::MIN.into(), <$t>::MAX.into()) as $t
            }
            fn op_max(self, src: Self) -> Self {
                Ord::max(self, src)
            }
            fn op_min(self, src: Self) -> Self {
                Ord::min(self, src)
            }
        }
    )*};
}

narrow_int_element!(u8 => U8, u16, i8 => I8, i16, u16 => U16, u32, i16 => I16, i32);

/// u32 i32 i64: both operands to f32 (`as` rounds to nearest even), the op in f32, and
/// [`FromF32::from_f32`] back. MAX/MIN keep `B` on equal f32 values.
macro_rules! wide_int_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            int_encoding!($t, $d);
            fn op_add(self, src: Self) -> Self {
                Self::from_f32(self as f32 + src as f32)
            }
            fn op_mul(self, src: Self) -> Self {
                Self::from_f32(self as f32 * src as f32)
            }
            fn op_max(self, src: Self) -> Self {
                let (b, a) = (self as f32, src as f32);
                Self::from_f32(if b >= a { b } else { a })
            }
            fn op_min(self, src: Self) -> Self {
                let (b, a) = (self as f32, src as f32);
                Self::from_f32(if b <= a { b } else { a })
            }
        }
    )*};
}

/// The DMA's conversion of an f32 value to an integer dtype: round to nearest even,
/// saturate at the dtype's range, NaN to 0 (the compute ops' results, and casts).
pub(crate) trait FromF32 {
    fn from_f32(r: f32) -> Self;
}

macro_rules! from_f32_int {
    ($($t:ty),*) => {$(
        impl FromF32 for $t {
            fn from_f32(r: f32) -> Self {
                // in the dtype's range, so the cast is exact
                nearest_in_range(r, <$t>::MIN.into(), <$t>::MAX.into()) as $t
            }
        }
    )*};
}

from_f32_int!(u8, i8, u16, i16, u32, i32);

impl FromF32 for i64 {
    fn from_f32(r: f32) -> Self {
        // i64's range is past `nearest_in_range`'s 2^51: round in f32 (exact, and every f32
        // from 2^23 up is an integer already), then the saturating cast (NaN to 0)
        r.round_ties_even() as i64
    }
}

wide_int_element!(u32 => U32, i32 => I32, i64 => I64);

/// `r` rounded to the nearest integer (ties to even) and clamped to `lo..=hi`, NaN to 0,
/// where `lo` and `hi` are integers of magnitude below 2^51. No float-to-int cast (the
/// saturating `as` is scalar code on x86-64), so the loops vectorise: the clamped value
/// plus 1.5 * 2^52 lies in [2^52, 2^53), where f64's spacing is 1, so the add rounds it
/// to an integer, ties to even (the constant is even), and that integer is the
/// difference of the two encodings.
fn nearest_in_range(r: f32, lo: f64, hi: f64) -> i64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    let x = f64::from(r);
    let x = if x.is_nan() {
        0.0
    } else if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    };
    (x + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits()) as i64
}

/// The deterministic NaN of an f32 ADD/MULTIPLY whose exact result `r` was computed from
/// `dst` and `src` (see the module docs). Written as selects, not branches, so that the
/// loops around it vectorise.
fn settle_nan(dst: f32, src: f32, r: f32) -> f32 {
    let operand = if dst.is_nan() {
        dst.to_bits()
    } else {
        src.to_bits()
    };
    let nan = if dst.is_nan() | src.is_nan() {
        operand | F32_QUIET_BIT
    } else {
        F32_DEFAULT_NAN
    };
    if r.is_nan() {
        f32::from_bits(nan)
    } else {
        r
    }
}

/// numpy's maximum/minimum selection: `dst` when `keep_dst` or `dst` is NaN, else `src`.
fn select<T>(dst_is_nan: bool, keep_dst: bool, dst: T, src: T) -> T {
    if keep_dst | dst_is_nan {
        dst
    } else {
        src
    }
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    type Bytes = [u8; 4];
    fn from_le(bytes: [u8; 4]) -> Self {
        f32::from_le_bytes(bytes)
    }
    fn to_le(self) -> [u8; 4] {
        self.to_le_bytes()
    }
    #[cfg(target_endian = "little")]
    fn le_image(elems: &[Self]) -> Option<&[u8]> {
        Some(elems.as_bytes())
    }
    fn op_add(self, src: Self) -> Self {
        settle_nan(self, src, self + src)
    }
    fn op_mul(self, src: Self) -> Self {
        settle_nan(self, src, self * src)
    }
    fn op_max(self, src: Self) -> Self {
        select(self.is_nan(), self >= src, self, src)
    }
    fn op_min(self, src: Self) -> Self {
        select(self.is_nan(), self <= src, self, src)
    }
}

macro_rules! half_element {
    ($($t:ident => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            type Bytes = [u8; 2];
            fn from_le(bytes: [u8; 2]) -> Self {
                $t::from_le_bytes(bytes)
            }
            fn to_le(self) -> [u8; 2] {
                self.to_le_bytes()
            }
            fn op_add(self, src: Self) -> Self {
                $t::from_f32(self.to_f32().op_add(src.to_f32()))
            }
            fn op_mul(self, src: Self) -> Self {
                $t::from_f32(self.to_f32().op_mul(src.to_f32()))
            }
            fn op_max(self, src: Self) -> Self {
                select(self.is_nan(), self.to_f32() >= src.to_f32(), self, src)
            }
            fn op_min(self, src: Self) -> Self {
                select(self.is_nan(), self.to_f32() <= src.to_f32(), self, src)
            }
        }
    )*};
}

half_element!(f16 => F16, bf16 => Bf16);

/// Applies `op` element-wise: `dst[i] = op(dst[i], src[i])` over little-endian elements of
/// `dtype`. Both slices must have the same length, a whole number of elements.
pub fn apply(op: ComputeOp, dtype: Dtype, dst: &mut [u8], src: &[u8]) -> Result<(), Error> {
    check_operands(dtype, dst.len(), src.len())?;
    // The lengths are checked: every loop below sees whole, equal-length operands.
    match dtype {
        Dtype::U8 => run::<u8>(op, dst, src),
        Dtype::I8 => run::<i8>(op, dst, src),
        Dtype::U16 => run::<u16>(op, dst, src),
        Dtype::I16 => run::<i16>(op, dst, src),
        Dtype::U32 => run::<u32>(op, dst, src),
        Dtype::I32 => run::<i32>(op, dst, src),
        Dtype::I64 => run::<i64>(op, dst, src),
        Dtype::F16 => run_widened::<f16>(op, dst, src),
        Dtype::Bf16 => run_widened::<bf16>(op, dst, src),
        Dtype::F32 => run_f32(op, dst, src),
    }
    Ok(())
}

/// Checks that a `dst`/`src` pair of byte lengths is a valid operand pair for `dtype`.
pub fn check_operands(dtype: Dtype, dst: usize, src: usize) -> Result<(), Error> {
    if dst != src {
        return Err(Error::OperandLengthMismatch { dst, src });
    }
    check_whole_elements(dtype, dst as u64)
}

/// Checks that `len` bytes are a whole number of `dtype` elements.
pub fn check_whole_elements(dtype: Dtype, len: u64) -> Result<(), Error> {
    let partial_bytes = len % dtype.size() as u64;
    if partial_bytes != 0 {
        return Err(partial_element(dtype, len));
    }
    Ok(())
}

fn partial_element(dtype: Dtype, len: u64) -> Error {
    Error::PartialElement {
        len,
        dtype: dtype.name(),
        size: dtype.size(),
    }
}

/// The hot loop for one element type, one op per call.
fn run<E: Element>(op: ComputeOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ComputeOp::None => dst.copy_from_slice(src),
        ComputeOp::Add => zip_with(dst, src, E::op_add),
        ComputeOp::Multiply => zip_with(dst, src, E::op_mul),
        ComputeOp::Max => zip_with(dst, src, E::op_max),
        ComputeOp::Min => zip_with(dst, src, E::op_min),
    }
}

/// `dst[i] = f(dst[i], src[i])` over whole elements, on the byte slices viewed as slices
/// of element images (fixed-size elements, no per-element length check: this vectorises).
fn zip_with<E: Element>(dst: &mut [u8], src: &[u8], f: impl Fn(E, E) -> E) {
    // The caller checked both lengths are equal whole multiples, so both views succeed.
    let (Ok(d), Ok(s)) = (images_mut::<E>(dst), images::<E>(src)) else {
        return;
    };
    zip_images(d, s, f);
}

/// [`zip_with`] on element images.
fn zip_images<E: Element>(dst: &mut [E::Bytes], src: &[E::Bytes], f: impl Fn(E, E) -> E) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(E::from_le(*d), E::from_le(*s)).to_le();
    }
}

/// Elements of one block of [`zip_unless_nan`] (64 bytes: four SSE vectors).
const F32_BLOCK: usize = 16;

/// f32: ADD and MULTIPLY through [`zip_unless_nan`], the rest as every dtype.
fn run_f32(op: ComputeOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ComputeOp::Add => zip_unless_nan(dst, src, |a, b| a + b, f32::op_add),
        ComputeOp::Multiply => zip_unless_nan(dst, src, |a, b| a * b, f32::op_mul),
        _ => run::<f32>(op, dst, src),
    }
}

/// [`zip_with`] of `settled`, an f32 op that settles NaN results (see the module docs),
/// where `raw` is the same op unsettled: a block of [`F32_BLOCK`] results of `raw` with no
/// NaN among them is what `settled` gives (it changes only NaN results) and is stored as
/// it is; a block with a NaN is recomputed by `settled` from its operands, which are still
/// untouched. So the common block is loads, the op, one NaN test and stores.
fn zip_unless_nan(
    dst: &mut [u8],
    src: &[u8],
    raw: impl Fn(f32, f32) -> f32,
    settled: impl Fn(f32, f32) -> f32,
) {
    // The caller checked both lengths are equal whole multiples, so both views succeed.
    let (Ok(d), Ok(s)) = (images_mut::<f32>(dst), images::<f32>(src)) else {
        return;
    };
    let (mut d, mut s) = (d.chunks_exact_mut(F32_BLOCK), s.chunks_exact(F32_BLOCK));
    for (db, sb) in (&mut d).zip(&mut s) {
        let mut r = [0f32; F32_BLOCK];
        let mut nan = false;
        for ((r, a), b) in r.iter_mut().zip(&*db).zip(sb) {
            *r = raw(f32::from_le_bytes(*a), f32::from_le_bytes(*b));
            nan |= r.is_nan();
        }
        if nan {
            zip_images(db, sb, &settled);
        } else {
            for (a, r) in db.iter_mut().zip(r) {
                *a = r.to_le_bytes();
            }
        }
    }
    zip_images(d.into_remainder(), s.remainder(), settled);
}

/// `bytes` viewed as element images; an error if the length is not a whole number of them.
pub fn images<E: Element>(bytes: &[u8]) -> Result<&[E::Bytes], Error> {
    <[E::Bytes]>::ref_from_bytes(bytes).map_err(|_| partial_element(E::DTYPE, bytes.len() as u64))
}

/// `bytes` viewed as mutable element images.
pub fn images_mut<E: Element>(bytes: &mut [u8]) -> Result<&mut [E::Bytes], Error> {
    let len = bytes.len();
    <[E::Bytes]>::mut_from_bytes(bytes).map_err(|_| partial_element(E::DTYPE, len as u64))
}

/// A 16-bit float dtype computed through f32, a block of raw bits at a time.
pub(crate) trait Widened {
    /// The bits of +inf: a value is NaN when `bits & 0x7fff > INF_BITS`.
    const INF_BITS: u16;
    /// Exact conversion of a block to f32 (`out.len() == bits.len()`).
    fn widen(bits: &[u16], out: &mut [f32]);
    /// Round-to-nearest-even conversion back (`out.len() == vals.len()`).
    fn narrow(vals: &[f32], out: &mut [u16]);
}

impl Widened for f16 {
    const INF_BITS: u16 = 0x7c00;
    fn widen(bits: &[u16], out: &mut [f32]) {
        bits.reinterpret_cast::<f16>().convert_to_f32_slice(out);
    }
    fn narrow(vals: &[f32], out: &mut [u16]) {
        out.reinterpret_cast_mut::<f16>()
            .convert_from_f32_slice(vals);
    }
}

impl Widened for bf16 {
    const INF_BITS: u16 = 0x7f80;
    fn widen(bits: &[u16], out: &mut [f32]) {
        // bf16 is the top half of an f32: widening is a shift (a NaN stays a NaN, and the
        // f32 op quietens it exactly as bf16::to_f32 would).
        for (o, b) in out.iter_mut().zip(bits) {
            *o = f32::from_bits(u32::from(*b) << 16);
        }
    }
    fn narrow(vals: &[f32], out: &mut [u16]) {
        // The rounding of `bf16::from_f32` (nearest even; a NaN keeps its top bits and is
        // quietened), written branch-free so that it vectorises.
        for (o, v) in out.iter_mut().zip(vals) {
            let x = v.to_bits();
            let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
            let quiet = (x >> 16) | 0x40;
            *o = if v.is_nan() { quiet } else { rounded } as u16;
        }
    }
}

const BLOCK: usize = 128;

/// f16 / bf16: each block of both operands is widened to f32 (vectorised conversions), the
/// f32 element op runs on it, and ADD/MULTIPLY results are narrowed back; MAX/MIN keep the
/// chosen operand's original bits. Same results as the scalar [`Element`] impls.
fn run_widened<H: Widened>(op: ComputeOp, dst: &mut [u8], src: &[u8]) {
    let (mut d, mut s) = ([0u16; BLOCK], [0u16; BLOCK]);
    let (mut wd, mut ws) = ([0f32; BLOCK], [0f32; BLOCK]);
    // The caller checked both lengths are equal whole multiples, so both views succeed.
    let (Ok(dst), Ok(src)) = (images_mut::<u16>(dst), images::<u16>(src)) else {
        return;
    };
    for (db, sb) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
        let n = db.len();
        let (d, s, wd, ws) = (&mut d[..n], &mut s[..n], &mut wd[..n], &mut ws[..n]);
        for (e, b) in d.iter_mut().zip(&*db) {
            *e = u16::from_le_bytes(*b);
        }
        for (e, b) in s.iter_mut().zip(sb) {
            *e = u16::from_le_bytes(*b);
        }
        H::widen(d, wd);
        H::widen(s, ws);
        match op {
            ComputeOp::Add => zip_f32::<H>(wd, ws, d, f32::op_add),
            ComputeOp::Multiply => zip_f32::<H>(wd, ws, d, f32::op_mul),
            ComputeOp::Max => select_all::<H>(wd, ws, d, s, |a, b| a >= b),
            ComputeOp::Min => select_all::<H>(wd, ws, d, s, |a, b| a <= b),
            ComputeOp::None => d.copy_from_slice(s),
        }
        for (e, b) in d.iter().zip(db) {
            *b = e.to_le_bytes();
        }
    }
}

/// `out = narrow(f(wd, ws))` element-wise (the result overwrites `wd` first).
fn zip_f32<H: Widened>(wd: &mut [f32], ws: &[f32], out: &mut [u16], f: fn(f32, f32) -> f32) {
    for (a, b) in wd.iter_mut().zip(ws) {
        *a = f(*a, *b);
    }
    H::narrow(wd, out);
}

/// numpy's maximum/minimum on a block of bits: `d[i]` stays when `keep(wd[i], ws[i])` or
/// it is NaN, else it becomes `s[i]`.
fn select_all<H: Widened>(
    wd: &[f32],
    ws: &[f32],
    d: &mut [u16],
    s: &[u16],
    keep: fn(f32, f32) -> bool,
) {
    for (((e, src), a), b) in d.iter_mut().zip(s).zip(wd).zip(ws) {
        // `select` as a mask on the loaded values, so the loop vectorises
        let stay = u16::from(keep(*a, *b) | (*e & 0x7fff > H::INF_BITS)).wrapping_neg();
        *e = (*e & stay) | (*src & !stay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Applies `op` to one element pair given as little-endian images and returns the result.
    fn one(op: ComputeOp, dtype: Dtype, dst: &[u8], src: &[u8]) -> Vec<u8> {
        let mut d = dst.to_vec();
        apply(op, dtype, &mut d, src).unwrap();
        d
    }

    fn u16s(op: ComputeOp, dtype: Dtype, dst: u16, src: u16) -> u16 {
        u16::from_le_bytes(
            one(op, dtype, &dst.to_le_bytes(), &src.to_le_bytes())
                .try_into()
                .unwrap(),
        )
    }

    fn u32s(op: ComputeOp, dtype: Dtype, dst: u32, src: u32) -> u32 {
        u32::from_le_bytes(
            one(op, dtype, &dst.to_le_bytes(), &src.to_le_bytes())
                .try_into()
                .unwrap(),
        )
    }

    fn f32s(op: ComputeOp, dst: f32, src: f32) -> u32 {
        u32s(op, Dtype::F32, dst.to_bits(), src.to_bits())
    }

    use ComputeOp::{Add, Max, Min, Multiply, None as Copy};

    #[test]
    fn u8_and_i8() {
        let u = |op, a: u8, b: u8| one(op, Dtype::U8, &[a], &[b])[0];
        assert_eq!(u(Add, 250, 4), 254);
        assert_eq!(u(Add, 250, 10), 255); // 260 saturates
        assert_eq!(u(Multiply, 16, 17), 255); // 272 saturates
        assert_eq!(u(Multiply, 15, 17), 255);
        assert_eq!(u(Multiply, 15, 16), 240);
        assert_eq!(u(Max, 3, 200), 200);
        assert_eq!(u(Min, 3, 200), 3);
        assert_eq!(u(Copy, 3, 200), 200);
        let i = |op, a: i8, b: i8| one(op, Dtype::I8, &[a as u8], &[b as u8])[0] as i8;
        assert_eq!(i(Add, 127, 1), 127);
        assert_eq!(i(Add, -128, -1), -128);
        assert_eq!(i(Add, -100, 27), -73);
        assert_eq!(i(Multiply, -128, -1), 127); // 128 saturates
        assert_eq!(i(Multiply, -128, 127), -128); // -16256 saturates
        assert_eq!(i(Multiply, 16, 9), 127); // 144 saturates
        assert_eq!(i(Multiply, -7, 9), -63);
        assert_eq!(i(Max, -5, 3), 3);
        assert_eq!(i(Min, -5, 3), -5);
        assert_eq!(i(Copy, -5, 3), 3);
    }

    #[test]
    fn u16_and_i16() {
        assert_eq!(u16s(Add, Dtype::U16, 65535, 2), 65535);
        assert_eq!(u16s(Add, Dtype::U16, 65533, 2), 65535);
        assert_eq!(u16s(Multiply, Dtype::U16, 300, 300), 65535); // 90000 saturates
        assert_eq!(u16s(Multiply, Dtype::U16, 255, 257), 65535);
        assert_eq!(u16s(Max, Dtype::U16, 0x8000, 0x7fff), 0x8000);
        assert_eq!(u16s(Min, Dtype::U16, 0x8000, 0x7fff), 0x7fff);
        assert_eq!(u16s(Copy, Dtype::U16, 1, 0xbeef), 0xbeef);
        let i = |op, a: i16, b: i16| u16s(op, Dtype::I16, a as u16, b as u16) as i16;
        assert_eq!(i(Add, 32767, 1), 32767);
        assert_eq!(i(Add, -32768, -1), -32768);
        assert_eq!(i(Multiply, 200, 200), 32767); // 40000 saturates
        assert_eq!(i(Multiply, -200, 200), -32768);
        assert_eq!(i(Multiply, -32768, -1), 32767);
        assert_eq!(i(Multiply, -181, 181), -32761);
        assert_eq!(i(Max, -32768, 32767), 32767);
        assert_eq!(i(Min, -32768, 32767), -32768);
    }

    #[test]
    fn u32_and_i32() {
        assert_eq!(u32s(Add, Dtype::U32, 3, 4), 7);
        assert_eq!(u32s(Multiply, Dtype::U32, 65535, 256), 16_776_960);
        assert_eq!(u32s(Multiply, Dtype::U32, 65536, 65536), u32::MAX); // 2^32 saturates
        assert_eq!(u32s(Multiply, Dtype::U32, 0x1_0001, 0x1_0001), u32::MAX);
        assert_eq!(u32s(Max, Dtype::U32, 0x8000_0000, 7), 0x8000_0000);
        assert_eq!(u32s(Min, Dtype::U32, 0x8000_0000, 7), 7);
        let i = |op, a: i32, b: i32| u32s(op, Dtype::I32, a as u32, b as u32) as i32;
        assert_eq!(i(Add, i32::MAX, 1), i32::MAX); // i32::MAX as f32 is 2^31
        assert_eq!(i(Add, i32::MIN, -1), i32::MIN); // -2^31 - 1 rounds to -2^31
        assert_eq!(i(Add, -5, 3), -2);
        assert_eq!(i(Multiply, 46341, 46341), i32::MAX); // 2147488281 saturates
        assert_eq!(i(Multiply, 65536, 65536), i32::MAX);
        assert_eq!(i(Multiply, i32::MIN, -1), i32::MAX);
        assert_eq!(i(Multiply, 65536, -32768), i32::MIN); // -2^31 exactly
        assert_eq!(i(Multiply, 65536, -32769), i32::MIN);
        assert_eq!(i(Max, i32::MIN, -1), -1);
        assert_eq!(i(Min, i32::MIN, -1), i32::MIN);
        assert_eq!(i(Copy, 5, -9), -9);
    }

    /// NKI's example: 2^25 + 1 is not an f32 (the spacing there is 4), so it rounds to
    /// 2^25 before the add, and the sum 2^25 + 1 rounds to 2^25 again.
    #[test]
    fn i32_add_rounds_operands_to_f32_first() {
        let i = |op, a: i32, b: i32| u32s(op, Dtype::I32, a as u32, b as u32) as i32;
        assert_eq!(i(Add, (1 << 25) + 1, 1), 33_554_432);
        assert_eq!(i(Add, 1, (1 << 25) + 1), 33_554_432);
        assert_eq!(i(Add, (1 << 25) + 3, 0), (1 << 25) + 4); // nearest f32
        assert_eq!(i(Add, (1 << 24) - 1, 1), 1 << 24); // exact
        assert_eq!(i(Add, 1 << 24, 1), 1 << 24); // 2^24 + 1: a tie, to even
        assert_eq!(i(Add, -(1 << 24), -3), -(1 << 24) - 4); // -(2^24 + 3): a tie, to even
        assert_eq!(i(Multiply, 4097, 4097), 16_785_408); // 16785409: a tie, to even
    }

    /// u32::MAX as f32 is 2^32: any op that returns it saturates back to u32::MAX, and
    /// MAX/MIN return the rounded value of the chosen operand, not its bits.
    #[test]
    fn u32_rounds_and_saturates() {
        let u = |op, a: u32, b: u32| u32s(op, Dtype::U32, a, b);
        assert_eq!(u(Add, u32::MAX, 1), u32::MAX);
        assert_eq!(u(Add, u32::MAX, 0), u32::MAX);
        assert_eq!(u(Add, u32::MAX - 127, 0), u32::MAX); // 2^32 - 128: a tie, to 2^32
        assert_eq!(u(Add, u32::MAX - 128, 0), u32::MAX - 255); // 2^32 - 256
        assert_eq!(u(Add, (1 << 24) + 1, 0), 1 << 24);
        assert_eq!(u(Max, (1 << 24) + 1, 0), 1 << 24);
        assert_eq!(u(Min, (1 << 24) + 1, u32::MAX), 1 << 24);
        assert_eq!(u(Max, (1 << 24) + 1, (1 << 24) + 3), (1 << 24) + 4);
        assert_eq!(u(Min, u32::MAX, u32::MAX - 1), u32::MAX);
        assert_eq!(u(Copy, 0, (1 << 24) + 1), (1 << 24) + 1); // a copy is bytes
    }

    /// u8 and i8 compute the f32 rule in integers: every operand pair agrees with the
    /// f32 reference.
    #[test]
    fn eight_bit_ops_match_the_f32_reference_on_every_pair() {
        let dst: Vec<u8> = (0..=255u8).flat_map(|a| [a; 256]).collect();
        let src: Vec<u8> = (0..256).flat_map(|_| 0..=255u8).collect();
        for (dtype, signed) in [(Dtype::U8, false), (Dtype::I8, true)] {
            for op in [Add, Multiply, Max, Min] {
                let got = one(op, dtype, &dst, &src);
                for ((g, a), b) in got.iter().zip(&dst).zip(&src) {
                    let want = ref_int(op, 8, signed, u64::from(*a), u64::from(*b));
                    assert_eq!(u64::from(*g), want, "{op:?} {dtype:?} {a} {b}");
                }
            }
        }
    }

    /// The conversion back on values an integer op never produces: halves round to even,
    /// both ends saturate, NaN is 0.
    #[test]
    fn from_f32_rounds_to_even_saturates_and_zeroes_nan() {
        let i = <i32 as FromF32>::from_f32;
        let u = <u32 as FromF32>::from_f32;
        assert_eq!(i(2.5), 2);
        assert_eq!(i(3.5), 4);
        assert_eq!(i(-2.5), -2);
        assert_eq!(i(-3.5), -4);
        assert_eq!(i(0.5), 0);
        assert_eq!(i(-0.75), -1);
        assert_eq!(i(8_388_607.5), 8_388_608);
        assert_eq!(i(f32::NAN), 0);
        assert_eq!(i(f32::INFINITY), i32::MAX);
        assert_eq!(i(f32::NEG_INFINITY), i32::MIN);
        assert_eq!(i(2_147_483_648.0), i32::MAX);
        assert_eq!(i(-2_147_483_904.0), i32::MIN);
        assert_eq!(u(254.5), 254);
        assert_eq!(u(-0.5), 0);
        assert_eq!(u(-1.0), 0);
        assert_eq!(u(f32::NAN), 0);
        assert_eq!(u(4_294_967_296.0), u32::MAX);
        assert_eq!(u(4_294_967_040.0), u32::MAX - 255);
    }

    #[test]
    fn f32_arithmetic_and_rounding() {
        assert_eq!(f32s(Add, 1.5, 2.25), 3.75f32.to_bits());
        // 1 + 2^-24 is half an ulp above 1: the tie goes to the even neighbour, 1.0.
        assert_eq!(f32s(Add, 1.0, 2f32.powi(-24)), 1.0f32.to_bits());
        // 1 + 1.5 ulp rounds to 1 + 2 ulp.
        assert_eq!(f32s(Add, 1.0, 3.0 * 2f32.powi(-24)), 0x3f80_0002);
        assert_eq!(f32s(Multiply, 3.0, -0.5), (-1.5f32).to_bits());
        assert_eq!(f32s(Multiply, 3e38, 10.0), f32::INFINITY.to_bits());
        assert_eq!(f32s(Max, 1.0, 2.0), 2.0f32.to_bits());
        assert_eq!(f32s(Min, 1.0, 2.0), 1.0f32.to_bits());
        assert_eq!(f32s(Copy, 1.0, 2.0), 2.0f32.to_bits());
        // subnormals are kept, not flushed
        assert_eq!(u32s(Add, Dtype::F32, 1, 1), 2);
    }

    #[test]
    fn f32_nan_rules() {
        let nan_a = f32::from_bits(0x7fc0_0123);
        let nan_b = f32::from_bits(0xffc0_0456);
        let snan = f32::from_bits(0x7f80_0001);
        assert_eq!(f32s(Add, f32::INFINITY, f32::NEG_INFINITY), F32_DEFAULT_NAN);
        assert_eq!(f32s(Multiply, 0.0, f32::INFINITY), F32_DEFAULT_NAN);
        assert_eq!(f32s(Add, nan_a, 1.0), 0x7fc0_0123);
        assert_eq!(f32s(Add, 1.0, nan_b), 0xffc0_0456);
        assert_eq!(f32s(Multiply, nan_a, nan_b), 0x7fc0_0123);
        assert_eq!(f32s(Add, snan, 1.0), 0x7fc0_0001); // quietened
                                                       // maximum / minimum return the NaN operand unchanged, dst first
        assert_eq!(f32s(Max, nan_a, 1.0), 0x7fc0_0123);
        assert_eq!(f32s(Max, 1.0, nan_b), 0xffc0_0456);
        assert_eq!(f32s(Min, nan_a, nan_b), 0x7fc0_0123);
        assert_eq!(f32s(Min, 1.0, snan), 0x7f80_0001);
        assert_eq!(f32s(Max, f32::NEG_INFINITY, snan), 0x7f80_0001);
    }

    #[test]
    fn f32_signed_zero_keeps_dst() {
        let (neg, pos) = (0x8000_0000u32, 0u32);
        assert_eq!(f32s(Max, -0.0, 0.0), neg);
        assert_eq!(f32s(Max, 0.0, -0.0), pos);
        assert_eq!(f32s(Min, -0.0, 0.0), neg);
        assert_eq!(f32s(Min, 0.0, -0.0), pos);
        assert_eq!(f32s(Add, -0.0, 0.0), pos);
        assert_eq!(f32s(Add, -0.0, -0.0), neg);
    }

    #[test]
    fn f16_cases() {
        let h = |op, a: u16, b: u16| u16s(op, Dtype::F16, a, b);
        assert_eq!(h(Add, 0x3c00, 0x3c00), 0x4000); // 1 + 1 = 2
        assert_eq!(h(Add, 0x3c00, 0x1000), 0x3c00); // 1 + 2^-11: tie to even
        assert_eq!(h(Add, 0x3c00, 0x1600), 0x3c02); // 1 + 1.5 ulp -> 1 + 2 ulp
        assert_eq!(h(Add, 0x7bff, 0x7bff), 0x7c00); // 65504 + 65504 overflows to inf
        assert_eq!(h(Add, 0x7bff, 0x4c00), 0x7c00); // 65504 + 16 = 65520: tie -> 65536 -> inf
        assert_eq!(h(Add, 0x7bff, 0x4b80), 0x7bff); // 65504 + 15 rounds back down
        assert_eq!(h(Multiply, 0x5cb0, 0x5cb0), 0x7c00); // 300 * 300 = inf
        assert_eq!(h(Multiply, 0x4200, 0xb800), 0xbe00); // 3 * -0.5 = -1.5
        assert_eq!(h(Add, 0x7c00, 0xfc00), 0xfe00); // inf - inf
        assert_eq!(h(Add, 0x7c01, 0x3c00), 0x7e01); // sNaN quietened, payload kept
        assert_eq!(h(Add, 0x3c00, 0xfe05), 0xfe05);
        assert_eq!(h(Max, 0x7c01, 0x3c00), 0x7c01); // NaN operand unchanged
        assert_eq!(h(Min, 0x3c00, 0x7c01), 0x7c01);
        assert_eq!(h(Max, 0x8000, 0x0000), 0x8000);
        assert_eq!(h(Min, 0x0000, 0x8000), 0x0000);
        assert_eq!(h(Max, 0xc000, 0x3c00), 0x3c00); // max(-2, 1)
        assert_eq!(h(Min, 0xc000, 0x3c00), 0xc000);
        assert_eq!(h(Copy, 0xc000, 0x3c00), 0x3c00);
    }

    #[test]
    fn bf16_cases() {
        let b = |op, a: u16, b: u16| u16s(op, Dtype::Bf16, a, b);
        assert_eq!(b(Add, 0x3f80, 0x3b80), 0x3f80); // 1 + 2^-8: tie to even
        assert_eq!(b(Add, 0x3f80, 0x3c40), 0x3f82); // 1 + 1.5 ulp -> 1 + 2 ulp
        assert_eq!(b(Add, 0x3f81, 0x3b80), 0x3f82); // (1 + ulp) + ulp/2: tie to even, up
        assert_eq!(b(Add, 0x3f80, 0x3f80), 0x4000);
        assert_eq!(b(Multiply, 0x7f7f, 0x4000), 0x7f80); // max * 2 = inf
        assert_eq!(b(Multiply, 0x4040, 0xbf00), 0xbfc0); // 3 * -0.5 = -1.5
        assert_eq!(b(Add, 0x7f80, 0xff80), 0xffc0); // inf - inf
        assert_eq!(b(Add, 0x7f81, 0x3f80), 0x7fc1); // sNaN quietened
        assert_eq!(b(Max, 0x3f80, 0x7f81), 0x7f81);
        assert_eq!(b(Min, 0xffc1, 0x3f80), 0xffc1);
        assert_eq!(b(Max, 0x8000, 0x0000), 0x8000);
        assert_eq!(b(Max, 0xbf80, 0x3f80), 0x3f80);
        assert_eq!(b(Min, 0xbf80, 0x3f80), 0xbf80);
        assert_eq!(b(Copy, 0xbf80, 0x3f80), 0x3f80);
    }

    #[test]
    fn cce_ops_apply_their_compute_op() {
        let d = [5u8, 200];
        assert_eq!(
            one(CceOp::Add.compute_op(), Dtype::U8, &d, &[3, 100]),
            vec![8, 255]
        );
        assert_eq!(
            one(CceOp::Max.compute_op(), Dtype::U8, &d, &[3, 250]),
            vec![5, 250]
        );
        assert_eq!(
            one(CceOp::Min.compute_op(), Dtype::U8, &d, &[3, 250]),
            vec![3, 200]
        );
        assert!(CceOp::from_code(1).is_err());
    }

    #[test]
    fn operand_errors() {
        let mut d = [0u8; 4];
        let e = apply(Add, Dtype::U8, &mut d, &[0; 3]).unwrap_err();
        assert_eq!(e, Error::OperandLengthMismatch { dst: 4, src: 3 });
        let mut d = [0u8; 3];
        let e = apply(Add, Dtype::U16, &mut d, &[0; 3]).unwrap_err();
        assert!(
            e.to_string().contains("3 bytes") && e.to_string().contains("u16"),
            "{e}"
        );
        assert!(apply(Add, Dtype::F32, &mut [0; 6], &[0; 6]).is_err());
        // a failed apply leaves dst untouched
        let mut d = [9u8; 6];
        assert!(apply(Copy, Dtype::F32, &mut d, &[1; 6]).is_err());
        assert_eq!(d, [9; 6]);
        assert!(apply(Add, Dtype::F32, &mut [], &[]).is_ok());
    }

    // ---- independent scalar reference ----------------------------------------------

    /// Reference for integer dtypes: the operands as i128, converted to f32 (one rounding,
    /// to nearest even), the op in f32, and [`ref_to_int`] back.
    fn ref_int(op: ComputeOp, bits: u32, signed: bool, a: u64, b: u64) -> u64 {
        let mask = (1u128 << bits) - 1;
        let widen = |v: u64| {
            let v = v as u128 & mask;
            if signed && v >> (bits - 1) == 1 {
                v as i128 - (1i128 << bits)
            } else {
                v as i128
            }
        };
        let (x, y) = (widen(a) as f32, widen(b) as f32);
        let r = match op {
            Copy => return b & mask as u64,
            Add => x + y,
            Multiply => x * y,
            Max if x >= y => x,
            Min if x <= y => x,
            Max | Min => y,
        };
        ref_to_int(r, bits, signed)
    }

    /// An f32 to a `bits`-wide integer's bit pattern: NaN is 0, out-of-range values clamp
    /// to the range, the rest round half to even.
    fn ref_to_int(r: f32, bits: u32, signed: bool) -> u64 {
        let (lo, hi) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        let r = f64::from(r);
        let v = if r.is_nan() {
            0
        } else if r <= lo as f64 {
            lo
        } else if r >= hi as f64 {
            hi
        } else {
            let floor = r.floor();
            let frac = r - floor;
            let up = frac > 0.5 || (frac == 0.5 && floor % 2.0 != 0.0);
            floor as i128 + i128::from(up)
        };
        (v as u128 & ((1u128 << bits) - 1)) as u64
    }

    /// Float reference on raw bits: values widened to f64, rounded once to the target.
    struct FloatFmt {
        to_f64: fn(u64) -> f64,
        from_f64: fn(f64) -> u64,
        quiet: u64,
        default_nan: u64,
    }

    const F32: FloatFmt = FloatFmt {
        to_f64: |b| f32::from_bits(b as u32) as f64,
        from_f64: |v| (v as f32).to_bits() as u64,
        quiet: 0x0040_0000,
        default_nan: 0xffc0_0000,
    };
    const F16: FloatFmt = FloatFmt {
        to_f64: |b| f16::from_bits(b as u16).to_f64(),
        from_f64: |v| f16::from_f64(v).to_bits() as u64,
        quiet: 0x0200,
        default_nan: 0xfe00,
    };
    const BF16: FloatFmt = FloatFmt {
        to_f64: |b| bf16::from_bits(b as u16).to_f64(),
        from_f64: |v| bf16::from_f64(v).to_bits() as u64,
        quiet: 0x0040,
        default_nan: 0xffc0,
    };

    fn ref_float(op: ComputeOp, f: &FloatFmt, a: u64, b: u64) -> u64 {
        let (x, y) = ((f.to_f64)(a), (f.to_f64)(b));
        let arith = |r: f64| {
            if x.is_nan() {
                a | f.quiet
            } else if y.is_nan() {
                b | f.quiet
            } else if r.is_nan() {
                f.default_nan
            } else {
                (f.from_f64)(r)
            }
        };
        match op {
            Copy => b,
            Add => arith(x + y),
            Multiply => arith(x * y),
            Max if x.is_nan() || x >= y => a,
            Min if x.is_nan() || x <= y => a,
            Max | Min => b,
        }
    }

    fn reference(op: ComputeOp, dtype: Dtype, a: u64, b: u64) -> u64 {
        match dtype {
            Dtype::U8 => ref_int(op, 8, false, a, b),
            Dtype::I8 => ref_int(op, 8, true, a, b),
            Dtype::U16 => ref_int(op, 16, false, a, b),
            Dtype::I16 => ref_int(op, 16, true, a, b),
            Dtype::U32 => ref_int(op, 32, false, a, b),
            Dtype::I32 => ref_int(op, 32, true, a, b),
            Dtype::I64 => ref_int(op, 64, true, a, b),
            Dtype::F16 => ref_float(op, &F16, a, b),
            Dtype::Bf16 => ref_float(op, &BF16, a, b),
            Dtype::F32 => ref_float(op, &F32, a, b),
        }
    }

    /// The scalar [`Element`] ops, element by element (what typed callers use).
    fn scalar<E: Element>(op: ComputeOp, dst: &[u8], src: &[u8]) -> Vec<u8> {
        let (d, s) = (images::<E>(dst).unwrap(), images::<E>(src).unwrap());
        let f = |a: E, b: E| match op {
            Copy => b,
            Add => a.op_add(b),
            Multiply => a.op_mul(b),
            Max => a.op_max(b),
            Min => a.op_min(b),
        };
        let out = d
            .iter()
            .zip(s)
            .map(|(a, b)| f(E::from_le(*a), E::from_le(*b)).to_le());
        out.flat_map(|image| image.as_bytes().to_vec()).collect()
    }

    fn scalar_ops(op: ComputeOp, dtype: Dtype, dst: &[u8], src: &[u8]) -> Vec<u8> {
        match dtype {
            Dtype::U8 => scalar::<u8>(op, dst, src),
            Dtype::I8 => scalar::<i8>(op, dst, src),
            Dtype::U16 => scalar::<u16>(op, dst, src),
            Dtype::I16 => scalar::<i16>(op, dst, src),
            Dtype::U32 => scalar::<u32>(op, dst, src),
            Dtype::I32 => scalar::<i32>(op, dst, src),
            Dtype::I64 => scalar::<i64>(op, dst, src),
            Dtype::F16 => scalar::<f16>(op, dst, src),
            Dtype::Bf16 => scalar::<bf16>(op, dst, src),
            Dtype::F32 => scalar::<f32>(op, dst, src),
        }
    }

    /// Element bit patterns: random, or one of the edge values of the dtype.
    fn element(dtype: Dtype) -> impl Strategy<Value = u64> {
        let edges: Vec<u64> = match dtype {
            Dtype::F32 => vec![
                0,
                0x8000_0000,
                0x7f80_0000,
                0xff80_0000,
                0x7fc0_0000,
                0x7f80_0001,
                0xffc0_1234,
                0x3f80_0000,
                0x7f7f_ffff,
                1,
                0x3380_0000,
            ],
            Dtype::F16 => vec![
                0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe33, 0x3c00, 0x7bff, 0x0001, 0x1000,
            ],
            Dtype::Bf16 => vec![
                0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc3, 0x3f80, 0x7f7f, 0x0001, 0x3b80,
            ],
            _ => vec![
                0,
                1,
                u64::MAX,
                0x7fff_ffff,
                0x8000_0000,
                0x7f,
                0x80,
                0x7fff,
                0x8000,
                0xff,
                0xffff,
                0x0100_0001,
                0x0200_0001,
                0x8000_0001,
                0xffff_ff7f,
                0xffff_ff80,
                0x7fff_ffff_ffff_ffff,
                0x8000_0000_0000_0000,
                0x0100_0000_0000_0001,
                0x0000_0000_0100_0001,
                0xffff_ffff_ff00_0001,
                0x8000_0080_0000_0000,
            ],
        };
        let mask = u64::MAX >> (64 - 8 * dtype.size());
        // small magnitudes too, so that 32-bit products do not all saturate
        let small = (-70_000i64..70_000).prop_map(|v| v as u64);
        prop_oneof![any::<u64>(), proptest::sample::select(edges), small]
            .prop_map(move |v| v & mask)
    }

    fn case() -> impl Strategy<Value = (ComputeOp, Dtype, Vec<(u64, u64)>)> {
        (
            proptest::sample::select(ComputeOp::ALL.to_vec()),
            proptest::sample::select(Dtype::ALL.to_vec()),
        )
            .prop_flat_map(|(op, dtype)| {
                let pair = (element(dtype), element(dtype));
                (
                    Just(op),
                    Just(dtype),
                    proptest::collection::vec(pair, 0..300),
                )
            })
    }

    /// The images made one by one with `to_le`, concatenated.
    fn images_of<E: Element>(elems: &[E]) -> Vec<u8> {
        elems
            .iter()
            .flat_map(|e| e.to_le().as_bytes().to_vec())
            .collect()
    }

    proptest! {
        /// A zero-copy image, where a type has one, is exactly the images one by one.
        #[test]
        fn le_image_is_the_images_one_by_one(
            a in prop::collection::vec(any::<u16>(), 0..40),
            b in prop::collection::vec(any::<i32>(), 0..40),
            c in prop::collection::vec(any::<u32>(), 0..40),
        ) {
            let f: Vec<f32> = c.iter().map(|&x| f32::from_bits(x)).collect();
            #[cfg(target_endian = "little")]
            {
                prop_assert!(u16::le_image(&a).is_some() && f32::le_image(&f).is_some());
            }
            for (image, want) in [
                (u16::le_image(&a), images_of(&a)),
                (i32::le_image(&b), images_of(&b)),
                (u32::le_image(&c), images_of(&c)),
                (f32::le_image(&f), images_of(&f)),
            ] {
                if let Some(image) = image {
                    prop_assert_eq!(image, &want[..]);
                }
            }
            prop_assert_eq!(half::bf16::le_image(&[half::bf16::ONE]), None);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn apply_matches_scalar_reference((op, dtype, pairs) in case()) {
            let size = dtype.size();
            let enc = |v: u64| v.to_le_bytes()[..size].to_vec();
            let mut dst: Vec<u8> = pairs.iter().flat_map(|p| enc(p.0)).collect();
            let src: Vec<u8> = pairs.iter().flat_map(|p| enc(p.1)).collect();
            let want: Vec<u8> = pairs.iter().flat_map(|&(a, b)| enc(reference(op, dtype, a, b))).collect();
            prop_assert_eq!(&scalar_ops(op, dtype, &dst, &src), &want);
            apply(op, dtype, &mut dst, &src).unwrap();
            prop_assert_eq!(dst, want);
        }

        /// f32 ADD and MULTIPLY with NaNs rare enough that many blocks of `F32_BLOCK`
        /// take the no-NaN path and others do not, against the reference.
        #[test]
        fn f32_blocks_match_scalar_reference(
            op in proptest::sample::select(vec![Add, Multiply]),
            pairs in proptest::collection::vec(
                (rare_edges(), rare_edges()),
                0..5 * F32_BLOCK,
            ),
        ) {
            let mut dst: Vec<u8> = pairs.iter().flat_map(|p| p.0.to_le_bytes()).collect();
            let src: Vec<u8> = pairs.iter().flat_map(|p| p.1.to_le_bytes()).collect();
            let want: Vec<u8> = pairs
                .iter()
                .flat_map(|&(a, b)| {
                    let r = reference(op, Dtype::F32, a.into(), b.into()) as u32;
                    r.to_le_bytes()
                })
                .collect();
            apply(op, Dtype::F32, &mut dst, &src).unwrap();
            prop_assert_eq!(dst, want);
        }
    }

    proptest! {
        /// The conversion back to u32, i32 and i64, on any f32 (fractions, halves,
        /// out-of-range values, infinities, NaNs), against [`ref_to_int`].
        #[test]
        fn from_f32_matches_reference(bits in any::<u32>(), small in -300.0f32..300.0) {
            for r in [f32::from_bits(bits), small, small.round() + 0.5] {
                prop_assert_eq!(u64::from(u32::from_f32(r)), ref_to_int(r, 32, false));
                prop_assert_eq!(i32::from_f32(r) as u32 as u64, ref_to_int(r, 32, true));
                prop_assert_eq!(i64::from_f32(r) as u64, ref_to_int(r, 64, true));
            }
        }
    }

    /// f32 bits: mostly random (rarely NaN), one in 32 an edge value of [`element`].
    fn rare_edges() -> impl Strategy<Value = u32> {
        prop_oneof![31 => any::<u32>(), 1 => element(Dtype::F32).prop_map(|v| v as u32)]
    }
}
