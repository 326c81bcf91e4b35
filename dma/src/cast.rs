//! Casts between dtypes through float32 (NKI: "dma_copy between dtypes casts src ->
//! float32 -> dst"; the DMA engines compute in float32), with or without a compute op:
//! [`cast`] on little-endian byte slices, one element of the source per element of the
//! destination. The conversions are [`crate::compute`]'s own (the widening of f16/bf16,
//! the narrowing back, the integer rounding and saturation); this module only chains them.
//!
//! # Exact semantics (`S` the source dtype, `D` the destination's, `S != D`)
//!
//! 1. **To f32**, both the source element and (for a compute op) the destination
//!    element: integers convert exactly up to 16 bits, u32, i32 and i64 round to nearest
//!    even, once (`2^24 + 1` becomes `2^24`); f16 and bf16 widen exactly, and a NaN becomes a quiet
//!    NaN (quiet bit `0x0040_0000` set) with its sign and payload; f32 stays as it is.
//! 2. **The op**, in f32: NONE takes the source's value; ADD, MULTIPLY, MAX and MIN are
//!    [`crate::compute`]'s f32 rule on `(f32(dst), f32(src))` (NaN results settled as
//!    there; MAX/MIN return the chosen widened operand).
//! 3. **To D**: integers round to nearest even and saturate at the dtype's range, NaN
//!    becomes 0; f16 and bf16 round to nearest even (overflow gives ±inf; a NaN keeps its
//!    sign and top payload bits, quieted); f32 keeps the value.
//!
//! So f32 -> bf16 rounds to nearest even, bf16 -> f32 and u8 -> f16 are exact, f32 -> i32
//! rounds and saturates (NaN -> 0), i32 -> u8 saturates, f32 -> i64 saturates at
//! `i64::MIN`/`i64::MAX` (an f32 of 2^63 or more gives `i64::MAX`). With `S == D` nothing is
//! converted: [`cast`] is [`crate::compute::apply`] (a COPY is a byte copy).

use half::{bf16, f16};

use crate::compute::{self, images, images_mut, ComputeOp, Element, FromF32, Widened};
use crate::dtype::Dtype;
use crate::error::Error;

/// Elements converted per block (the f32 images of a block live on the stack).
const BLOCK: usize = 128;

/// The source bytes of a cast whose destination is `dst_len` bytes of `dst_dtype`
/// (whole elements): as many `src_dtype` elements.
pub fn source_len(dst_len: u64, src_dtype: Dtype, dst_dtype: Dtype) -> u64 {
    dst_len / dst_dtype.size() as u64 * src_dtype.size() as u64
}

/// Checks that `src` bytes of `src_dtype` and `dst` bytes of `dst_dtype` are whole
/// elements, as many on each side.
pub fn check_operands(
    src_dtype: Dtype,
    src: usize,
    dst_dtype: Dtype,
    dst: usize,
) -> Result<(), Error> {
    compute::check_whole_elements(src_dtype, src as u64)?;
    compute::check_whole_elements(dst_dtype, dst as u64)?;
    let (src_elems, dst_elems) = (src / src_dtype.size(), dst / dst_dtype.size());
    if src_elems != dst_elems {
        return Err(Error::CastElementMismatch {
            src: src_elems,
            src_dtype: src_dtype.name(),
            dst: dst_elems,
            dst_dtype: dst_dtype.name(),
        });
    }
    Ok(())
}

/// `dst[i] = op(dst[i], src[i])` with `src` elements of `src_dtype` and `dst` elements of
/// `dst_dtype`, through f32 (module docs); `ComputeOp::None` writes the converted source.
/// On an error `dst` is unchanged.
pub fn cast(
    op: ComputeOp,
    src_dtype: Dtype,
    src: &[u8],
    dst_dtype: Dtype,
    dst: &mut [u8],
) -> Result<(), Error> {
    if src_dtype == dst_dtype {
        return compute::apply(op, dst_dtype, dst, src);
    }
    check_operands(src_dtype, src.len(), dst_dtype, dst.len())?;
    // The operands are whole and equal in elements: the blocks pair up exactly.
    let (ss, ds) = (src_dtype.size(), dst_dtype.size());
    let (mut ws, mut wd) = ([0f32; BLOCK], [0f32; BLOCK]);
    for (s, d) in src.chunks(BLOCK * ss).zip(dst.chunks_mut(BLOCK * ds)) {
        let n = s.len() / ss;
        let (ws, wd) = (&mut ws[..n], &mut wd[..n]);
        widen(src_dtype, s, ws);
        if op == ComputeOp::None {
            narrow(dst_dtype, ws, d);
            continue;
        }
        widen(dst_dtype, d, wd);
        combine(op, wd, ws);
        narrow(dst_dtype, wd, d);
    }
    Ok(())
}

/// `wd[i] = op(wd[i], ws[i])` in f32 ([`crate::compute`]'s f32 element ops).
fn combine(op: ComputeOp, wd: &mut [f32], ws: &[f32]) {
    let f: fn(f32, f32) -> f32 = match op {
        ComputeOp::None => |_, s| s,
        ComputeOp::Add => f32::op_add,
        ComputeOp::Multiply => f32::op_mul,
        ComputeOp::Max => f32::op_max,
        ComputeOp::Min => f32::op_min,
    };
    for (d, s) in wd.iter_mut().zip(ws) {
        *d = f(*d, *s);
    }
}

/// An integer dtype's exact or nearest-even conversion to f32 and [`FromF32`] back.
trait IntElement: Element + FromF32 {
    fn to_f32(self) -> f32;
}

macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl IntElement for $t {
            fn to_f32(self) -> f32 {
                // exact up to 16 bits; wider values round to nearest even, once
                self as f32
            }
        }
    )*};
}

int_element!(u8, i8, u16, i16, u32, i32, i64);

/// The elements of `bytes` (whole `dtype` elements, `out.len()` of them) as f32.
fn widen(dtype: Dtype, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        Dtype::U8 => widen_int::<u8>(bytes, out),
        Dtype::I8 => widen_int::<i8>(bytes, out),
        Dtype::U16 => widen_int::<u16>(bytes, out),
        Dtype::I16 => widen_int::<i16>(bytes, out),
        Dtype::U32 => widen_int::<u32>(bytes, out),
        Dtype::I32 => widen_int::<i32>(bytes, out),
        Dtype::I64 => widen_int::<i64>(bytes, out),
        Dtype::F16 => widen_half::<f16>(bytes, out),
        Dtype::Bf16 => widen_half::<bf16>(bytes, out),
        Dtype::F32 => {
            for (o, b) in out.iter_mut().zip(images::<f32>(bytes).unwrap_or_default()) {
                *o = f32::from_le_bytes(*b);
            }
        }
    }
}

/// `vals` as `dtype` elements into `bytes` (`vals.len()` whole elements).
fn narrow(dtype: Dtype, vals: &[f32], bytes: &mut [u8]) {
    match dtype {
        Dtype::U8 => narrow_int::<u8>(vals, bytes),
        Dtype::I8 => narrow_int::<i8>(vals, bytes),
        Dtype::U16 => narrow_int::<u16>(vals, bytes),
        Dtype::I16 => narrow_int::<i16>(vals, bytes),
        Dtype::U32 => narrow_int::<u32>(vals, bytes),
        Dtype::I32 => narrow_int::<i32>(vals, bytes),
        Dtype::I64 => narrow_int::<i64>(vals, bytes),
        Dtype::F16 => narrow_half::<f16>(vals, bytes),
        Dtype::Bf16 => narrow_half::<bf16>(vals, bytes),
        Dtype::F32 => {
            for (b, v) in images_mut::<f32>(bytes)
                .unwrap_or_default()
                .iter_mut()
                .zip(vals)
            {
                *b = v.to_le_bytes();
            }
        }
    }
}

fn widen_int<E: IntElement>(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(images::<E>(bytes).unwrap_or_default()) {
        *o = E::from_le(*b).to_f32();
    }
}

fn narrow_int<E: IntElement>(vals: &[f32], bytes: &mut [u8]) {
    for (b, v) in images_mut::<E>(bytes)
        .unwrap_or_default()
        .iter_mut()
        .zip(vals)
    {
        *b = E::from_f32(*v).to_le();
    }
}

/// f16/bf16 through [`Widened::widen`], NaNs quietened (the f32 ops would quieten them
/// anyway; a plain conversion must too, as `half`'s and the hardware's conversions do).
fn widen_half<H: Widened>(bytes: &[u8], out: &mut [f32]) {
    let mut bits = [0u16; BLOCK];
    let bits = &mut bits[..out.len()];
    for (e, b) in bits
        .iter_mut()
        .zip(images::<u16>(bytes).unwrap_or_default())
    {
        *e = u16::from_le_bytes(*b);
    }
    H::widen(bits, out);
    for o in out.iter_mut() {
        if o.is_nan() {
            *o = f32::from_bits(o.to_bits() | compute::F32_QUIET_BIT);
        }
    }
}

/// f32 to f16/bf16 through [`Widened::narrow`] (nearest even, NaNs quietened).
fn narrow_half<H: Widened>(vals: &[f32], bytes: &mut [u8]) {
    let mut bits = [0u16; BLOCK];
    let bits = &mut bits[..vals.len()];
    H::narrow(vals, bits);
    for (b, e) in images_mut::<u16>(bytes)
        .unwrap_or_default()
        .iter_mut()
        .zip(&*bits)
    {
        *b = e.to_le_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ComputeOp::{Add, Max, Min, Multiply, None as Copy};

    // ---- independent scalar reference ----------------------------------------------

    /// A float format by its field widths.
    #[derive(Clone, Copy)]
    struct Fmt {
        bits: u32,
        mant: u32,
    }

    const F16: Fmt = Fmt { bits: 16, mant: 10 };
    const BF16: Fmt = Fmt { bits: 16, mant: 7 };
    const F32: Fmt = Fmt { bits: 32, mant: 23 };

    fn float_fmt(d: Dtype) -> Option<Fmt> {
        match d {
            Dtype::F16 => Some(F16),
            Dtype::Bf16 => Some(BF16),
            Dtype::F32 => Some(F32),
            _ => None,
        }
    }

    fn int_range(d: Dtype) -> (i128, i128) {
        let bits = 8 * d.size() as u32;
        match d {
            Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 => {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            }
            _ => (0, (1i128 << bits) - 1),
        }
    }

    /// An element's value on the way through f32: a number (held exactly in f64) or a
    /// NaN as its f32 bits.
    #[derive(Clone, Copy, Debug)]
    enum V {
        Num(f64),
        Nan(u32),
    }

    /// Element bits of `d` to f32 (step 1): the value rounded once to f32; an f16/bf16
    /// NaN with its sign and payload moved to the f32 field, quiet bit set; an f32 NaN
    /// as it is.
    fn to_f32(d: Dtype, bits: u64) -> V {
        match float_fmt(d) {
            None => {
                let (lo, _) = int_range(d);
                let n = 8 * d.size() as u32;
                let v = bits as i128 & ((1i128 << n) - 1);
                let v = if lo < 0 && v >> (n - 1) == 1 {
                    v - (1i128 << n)
                } else {
                    v
                };
                V::Num(f64::from(nearest_f32(v)))
            }
            Some(f) => {
                let exp_mask = ((1u64 << (f.bits - f.mant - 1)) - 1) << f.mant;
                let man = bits & ((1u64 << f.mant) - 1);
                let sign = bits >> (f.bits - 1) & 1;
                if bits & exp_mask == exp_mask && man != 0 {
                    if d == Dtype::F32 {
                        return V::Nan(bits as u32);
                    }
                    let payload = (man << (23 - f.mant)) as u32;
                    return V::Nan((sign as u32) << 31 | 0x7fc0_0000 | payload);
                }
                V::Num(match d {
                    Dtype::F16 => f16::from_bits(bits as u16).to_f64(),
                    Dtype::Bf16 => bf16::from_bits(bits as u16).to_f64(),
                    _ => f64::from(f32::from_bits(bits as u32)),
                })
            }
        }
    }

    /// `v` rounded once to f32, ties to even, by integer arithmetic: the top 24
    /// significant bits kept, the rest rounded off (`v as f64 as f32` would round twice
    /// past 2^53).
    fn nearest_f32(v: i128) -> f32 {
        let a = v.unsigned_abs();
        let drop = (128 - a.leading_zeros()).saturating_sub(24);
        let (kept, rest) = (a >> drop, a & ((1u128 << drop) - 1));
        let half = if drop == 0 { 0 } else { 1u128 << (drop - 1) };
        let up = rest > half || (rest == half && half != 0 && kept & 1 == 1);
        // `kept + up` has at most 25 bits and `drop` is at most 104: exact in f64
        let m = ((kept + u128::from(up)) as f64) * 2f64.powi(drop as i32);
        (if v < 0 { -m } else { m }) as f32
    }

    /// numpy's f32 rule (step 2) on `(dst, src)`.
    fn op_f32(op: ComputeOp, b: V, a: V) -> V {
        let arith = |r: f64| match (b, a) {
            (V::Nan(x), _) | (V::Num(_), V::Nan(x)) => V::Nan(x | 0x0040_0000),
            _ if r.is_nan() => V::Nan(0xffc0_0000),
            // f64 holds the exact sum and product of two f32 to within a rounding that
            // rounds to f32 the same way (53 >= 2 * 24 + 2)
            _ => V::Num(f64::from(r as f32)),
        };
        let num = |v: V| match v {
            V::Num(x) => x,
            V::Nan(_) => f64::NAN,
        };
        let (x, y) = (num(b), num(a));
        match op {
            Copy => a,
            Add => arith(x + y),
            Multiply => arith(x * y),
            Max if x.is_nan() || x >= y => b,
            Min if x.is_nan() || x <= y => b,
            Max | Min => a,
        }
    }

    /// An f32 value to `d` (step 3), as its bits.
    fn from_f32(d: Dtype, v: V) -> u64 {
        match (float_fmt(d), v) {
            (None, V::Nan(_)) => 0,
            (None, V::Num(x)) => {
                let (lo, hi) = int_range(d);
                let r = if x <= lo as f64 {
                    lo
                } else if x >= hi as f64 {
                    hi
                } else {
                    let floor = x.floor();
                    let frac = x - floor;
                    let up = frac > 0.5 || (frac == 0.5 && floor % 2.0 != 0.0);
                    floor as i128 + i128::from(up)
                };
                (r as u128 & ((1u128 << (8 * d.size())) - 1)) as u64
            }
            (Some(_), V::Nan(b)) if d == Dtype::F32 => u64::from(b),
            (Some(f), V::Nan(b)) => {
                let sign = u64::from(b >> 31) << (f.bits - 1);
                let exp = ((1u64 << (f.bits - f.mant - 1)) - 1) << f.mant;
                let quiet = 1u64 << (f.mant - 1);
                sign | exp | quiet | u64::from(b & 0x7f_ffff) >> (23 - f.mant)
            }
            (Some(_), V::Num(x)) if d == Dtype::F32 => u64::from((x as f32).to_bits()),
            (Some(f), V::Num(x)) => round_to(f, x),
        }
    }

    /// `x` (not NaN) rounded to the 16-bit format `f`, ties to even, overflow to ±inf, as
    /// its bits: the scaled magnitude rounded as an integer. (`half`'s `from_f64` is not
    /// this: for bf16 it drops the low 32 bits of the f64 first, so an f32 just above a
    /// bf16 tie rounds as the tie.)
    fn round_to(f: Fmt, x: f64) -> u64 {
        let sign = u64::from(x.is_sign_negative()) << (f.bits - 1);
        let exp_bits = f.bits - f.mant - 1;
        let bias = (1i32 << (exp_bits - 1)) - 1;
        let inf = sign | ((1u64 << exp_bits) - 1) << f.mant;
        let a = x.abs();
        if a == 0.0 {
            return sign;
        }
        if a.is_infinite() {
            return inf;
        }
        // the binade of `a`, no lower than the format's smallest normal one
        let mut e = (a.to_bits() >> 52) as i32 - 1023;
        e = e.max(1 - bias);
        let quantum = 2f64.powi(e - f.mant as i32);
        let n = a / quantum;
        let (floor, frac) = (n.floor(), n - n.floor());
        let up = frac > 0.5 || (frac == 0.5 && floor % 2.0 != 0.0);
        let mut m = floor as u64 + u64::from(up);
        if m == 1 << (f.mant + 1) {
            (m, e) = (m >> 1, e + 1);
        }
        if e > bias {
            return inf;
        }
        match m >> f.mant {
            0 => sign | m,
            _ => sign | ((e + bias) as u64) << f.mant | (m & ((1 << f.mant) - 1)),
        }
    }

    fn reference(op: ComputeOp, s: Dtype, d: Dtype, dst: u64, src: u64) -> u64 {
        let b = to_f32(d, dst);
        let a = to_f32(s, src);
        from_f32(d, op_f32(op, b, a))
    }

    // ---- the values tried ----------------------------------------------------------

    /// Edge values of each dtype: zeros, ends, NaNs (quiet, signalling, with payload,
    /// negative), infinities, ties of every narrowing, saturation ends.
    fn edges(d: Dtype) -> Vec<u64> {
        match d {
            Dtype::F32 => vec![
                0,
                0x8000_0000, // -0.0
                0x7f80_0000, // inf
                0xff80_0000, // -inf
                0x7fc0_0000, // qNaN
                0x7f80_0001, // sNaN
                0xffa0_1234, // -sNaN with payload
                0x3f80_0000, // 1
                0x3f80_8000, // bf16 tie, even below
                0x3f81_8000, // bf16 tie, even above
                0x3f80_1000, // f16 tie (1 + 2^-11)
                0x3f80_3000, // f16 tie, odd below
                0x3f00_0000, // 0.5
                0x3fc0_0000, // 1.5
                0x4020_0000, // 2.5
                0xbf00_0000, // -0.5
                0xbfc0_0000, // -1.5
                0x437f_8000, // 255.5
                0x4380_0000, // 256
                0xc301_0000, // -129
                0x477f_ff80, // 65535.5
                0x477f_e000, // 65504 (f16 max)
                0x477f_f000, // 65520 (f16 tie to inf)
                0x4f00_0000, // 2^31
                0xcf00_0000, // -2^31
                0x4f80_0000, // 2^32
                0x7f7f_ffff, // f32 max
                0x7f7f_8000, // bf16 tie to inf
                1,           // smallest denormal
                0x3300_0000, // 2^-25 (f16 tie to 0)
                0x3380_0000, // 2^-24 (smallest f16 denormal)
            ],
            Dtype::F16 => vec![
                0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd55, 0x3c00, 0x7bff, 0x0001, 0x3801,
                0xbc00, 0x5bf8,
            ],
            Dtype::Bf16 => vec![
                0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffa5, 0x3f80, 0x7f7f, 0x0001, 0x4f00,
                0xcf00, 0xbf80,
            ],
            _ => vec![
                0,
                1,
                u64::MAX,
                0x7f,
                0x80,
                0xff,
                0x7fff,
                0x8000,
                0xffff,
                0x7fff_ffff,
                0x8000_0000,
                0x0100_0001,
                0x0200_0003,
                0xffff_ff80,
                0x7fff_ffff_ffff_ffff,
                0x8000_0000_0000_0000,
                0x0000_0080_0000_0001, // 2^39 + 1: rounds down to 2^39
                0x0000_0100_0001_0000, // 2^40 + 2^16: a tie, even below
                0x0000_0100_0003_0000, // 2^40 + 3 * 2^16: a tie, odd below
                0xffff_ff7f_ffff_ffff, // -(2^39) - 1
                0x7fff_ff80_0000_0000, // 2^63 - 2^39: rounds up to 2^63, saturates
            ],
        }
    }

    fn mask(d: Dtype) -> u64 {
        u64::MAX >> (64 - 8 * d.size())
    }

    /// A value of `d` from a raw draw: an edge, a small integer, or any bits.
    fn value(d: Dtype, (kind, raw): (u8, u64)) -> u64 {
        let e = edges(d);
        let v = match kind % 3 {
            0 => e[raw as usize % e.len()],
            1 => (raw as i64 % 300) as u64,
            _ => raw,
        };
        v & mask(d)
    }

    fn encode(d: Dtype, vals: &[u64]) -> Vec<u8> {
        vals.iter()
            .flat_map(|v| v.to_le_bytes()[..d.size()].to_vec())
            .collect()
    }

    /// Every ordered pair of distinct dtypes.
    fn pairs() -> impl Iterator<Item = (Dtype, Dtype)> {
        Dtype::ALL
            .into_iter()
            .flat_map(|s| Dtype::ALL.into_iter().map(move |d| (s, d)))
            .filter(|(s, d)| s != d)
    }

    /// `cast` on the encoded pairs against the reference, element for element.
    fn check(op: ComputeOp, s: Dtype, d: Dtype, dst: &[u64], src: &[u64]) -> Result<(), String> {
        let mut out = encode(d, dst);
        cast(op, s, &encode(s, src), d, &mut out).map_err(|e| e.to_string())?;
        for (k, (&b, &a)) in dst.iter().zip(src).enumerate() {
            let want = reference(op, s, d, b, a);
            let got = encode(d, &[want]);
            let at = k * d.size();
            if out[at..at + d.size()] != got[..] {
                return Err(format!(
                    "{} {s} -> {d}: dst {b:#x} src {a:#x}: got {:02x?}, want {want:#x}",
                    op.name(),
                    &out[at..at + d.size()]
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn every_edge_value_converts_as_the_reference_says() {
        for (s, d) in pairs() {
            let src = edges(s)
                .into_iter()
                .map(|v| v & mask(s))
                .collect::<Vec<_>>();
            let dst = vec![0; src.len()];
            check(Copy, s, d, &dst, &src).unwrap();
            for op in [Add, Multiply, Max, Min] {
                let dst: Vec<u64> = edges(d)
                    .iter()
                    .cycle()
                    .take(src.len())
                    .map(|v| v & mask(d))
                    .collect();
                check(op, s, d, &dst, &src).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 64 }))]

        /// Random and edge values of every ordered pair of distinct dtypes under every op,
        /// in runs longer than a block: `cast` equals the independent reference.
        #[test]
        fn cast_matches_the_scalar_reference_for_every_pair(
            op in prop::sample::select(ComputeOp::ALL.to_vec()),
            draws in prop::collection::vec(((any::<u8>(), any::<u64>()), (any::<u8>(), any::<u64>())), 0..300),
        ) {
            for (s, d) in pairs() {
                let dst: Vec<u64> = draws.iter().map(|&(b, _)| value(d, b)).collect();
                let src: Vec<u64> = draws.iter().map(|&(_, a)| value(s, a)).collect();
                prop_assert_eq!(check(op, s, d, &dst, &src), Ok(()));
            }
        }
    }

    #[test]
    fn named_cases() {
        let one = |s: Dtype, d: Dtype, src: u64| {
            let mut out = vec![0u8; d.size()];
            cast(Copy, s, &src.to_le_bytes()[..s.size()], d, &mut out).unwrap();
            let mut b = [0u8; 8];
            b[..d.size()].copy_from_slice(&out);
            u64::from_le_bytes(b)
        };
        let f = |x: f32| u64::from(x.to_bits());
        // f32 -> bf16: nearest even at ties, NaN quietened with its top payload
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x3f80_8000), 0x3f80);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x3f81_8000), 0x3f82);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x3f80_8001), 0x3f81);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x7f80_0001), 0x7fc0);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0xffa1_0000), 0xffe1);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x7f7f_ffff), 0x7f80);
        assert_eq!(one(Dtype::F32, Dtype::Bf16, 0x8000_0000), 0x8000);
        // f32 -> integers: nearest even, saturation, NaN -> 0, -0.0 -> 0
        assert_eq!(one(Dtype::F32, Dtype::I32, f(2.5)), 2);
        assert_eq!(one(Dtype::F32, Dtype::I32, f(-3.5)) as u32 as i32, -4);
        assert_eq!(one(Dtype::F32, Dtype::I32, f(3e9)) as u32, i32::MAX as u32);
        assert_eq!(
            one(Dtype::F32, Dtype::I32, f(f32::NEG_INFINITY)) as u32,
            i32::MIN as u32
        );
        assert_eq!(one(Dtype::F32, Dtype::I32, f(f32::NAN)), 0);
        assert_eq!(one(Dtype::F32, Dtype::U8, f(-0.0)), 0);
        assert_eq!(one(Dtype::F32, Dtype::U8, f(255.5)), 255);
        assert_eq!(one(Dtype::F32, Dtype::U8, f(-7.0)), 0);
        assert_eq!(one(Dtype::F32, Dtype::U32, f(0.5)), 0);
        assert_eq!(one(Dtype::F32, Dtype::U32, f(1.5)), 2);
        // exact widenings
        assert_eq!(one(Dtype::Bf16, Dtype::F32, 0x3f81), 0x3f81_0000);
        assert_eq!(one(Dtype::Bf16, Dtype::F32, 0x7f81), 0x7fc1_0000);
        assert_eq!(one(Dtype::U8, Dtype::F16, 255), 0x5bf8);
        assert_eq!(one(Dtype::F16, Dtype::F32, 0x0001), f(2f32.powi(-24)));
        // integers through f32: saturation and the 24-bit mantissa
        assert_eq!(one(Dtype::I32, Dtype::U8, 300), 255);
        assert_eq!(one(Dtype::I32, Dtype::U8, (-5i32) as u32 as u64), 0);
        assert_eq!(one(Dtype::I8, Dtype::U16, 0x80), 0);
        assert_eq!(
            one(Dtype::U32, Dtype::I32, u64::from(u32::MAX)),
            i32::MAX as u64
        );
        assert_eq!(one(Dtype::I32, Dtype::F32, (1 << 24) + 1), f(16_777_216.0));
        assert_eq!(one(Dtype::I32, Dtype::U32, (1 << 25) + 3), (1 << 25) + 4);
        assert_eq!(one(Dtype::U16, Dtype::I16, 40_000), i16::MAX as u64);
        assert_eq!(one(Dtype::F16, Dtype::I8, 0x5bf8), 127);
        assert_eq!(one(Dtype::F16, Dtype::Bf16, 0x7c00), 0x7f80);
        // i64: one rounding to f32, saturation at its range, NaN -> 0
        let i = |v: i64| v as u64;
        assert_eq!(
            one(Dtype::I64, Dtype::F32, i((1 << 40) + (1 << 16))),
            f(2f32.powi(40))
        );
        assert_eq!(
            one(Dtype::I64, Dtype::F32, i((1 << 40) + (3 << 16))),
            f(2f32.powi(40) + 2f32.powi(18))
        );
        assert_eq!(
            one(Dtype::I64, Dtype::I32, i(-(1 << 40))),
            i32::MIN as u32 as u64
        );
        assert_eq!(one(Dtype::F32, Dtype::I64, f(2.5)), 2);
        assert_eq!(one(Dtype::F32, Dtype::I64, f(-3.5)), i(-4));
        assert_eq!(one(Dtype::F32, Dtype::I64, f(2f32.powi(63))), i(i64::MAX));
        assert_eq!(one(Dtype::F32, Dtype::I64, f(-2f32.powi(63))), i(i64::MIN));
        assert_eq!(
            one(Dtype::F32, Dtype::I64, f(f32::NEG_INFINITY)),
            i(i64::MIN)
        );
        assert_eq!(one(Dtype::F32, Dtype::I64, f(f32::NAN)), 0);
        assert_eq!(one(Dtype::I32, Dtype::I64, i(-7) & 0xffff_ffff), i(-7));
        assert_eq!(one(Dtype::I64, Dtype::U8, i(-7)), 0);
    }

    #[test]
    fn a_compute_op_runs_in_f32_and_lands_in_the_destination_dtype() {
        // bf16 destination += f32 source: one rounding, of the f32 sum
        let mut dst = 0x3f80u16.to_le_bytes(); // 1.0
        let src = (2f32.powi(-9) + 2f32.powi(-20)).to_le_bytes();
        cast(Add, Dtype::F32, &src, Dtype::Bf16, &mut dst).unwrap();
        assert_eq!(u16::from_le_bytes(dst), 0x3f80);
        let src = (2f32.powi(-8) + 2f32.powi(-20)).to_le_bytes();
        cast(Add, Dtype::F32, &src, Dtype::Bf16, &mut dst).unwrap();
        assert_eq!(u16::from_le_bytes(dst), 0x3f81);
        // u8 destination, i32 source: saturating sum, NaN-free
        let mut dst = [250u8, 3];
        let src: Vec<u8> = [10i32, -7].iter().flat_map(|v| v.to_le_bytes()).collect();
        cast(Add, Dtype::I32, &src, Dtype::U8, &mut dst).unwrap();
        assert_eq!(dst, [255, 0]);
        // i32 destination max f32 source: the f32 maximum, rounded back
        let mut dst = 7i32.to_le_bytes();
        cast(Max, Dtype::F32, &7.5f32.to_le_bytes(), Dtype::I32, &mut dst).unwrap();
        assert_eq!(i32::from_le_bytes(dst), 8);
        // a NaN source into an integer: max keeps the destination, add gives 0
        let mut dst = 9i32.to_le_bytes();
        cast(
            Max,
            Dtype::F32,
            &f32::NAN.to_le_bytes(),
            Dtype::I32,
            &mut dst,
        )
        .unwrap();
        assert_eq!(
            i32::from_le_bytes(dst),
            0,
            "max(9, NaN) is NaN, which converts to 0"
        );
        let mut dst = 9i32.to_le_bytes();
        cast(Min, Dtype::F32, &1.0f32.to_le_bytes(), Dtype::I32, &mut dst).unwrap();
        assert_eq!(i32::from_le_bytes(dst), 1);
    }

    #[test]
    fn equal_dtypes_are_the_compute_ops() {
        for d in Dtype::ALL {
            for op in ComputeOp::ALL {
                let src: Vec<u8> = (0..4 * d.size()).map(|i| (i * 37 + 5) as u8).collect();
                let mut a: Vec<u8> = (0..4 * d.size()).map(|i| (i * 11 + 1) as u8).collect();
                let mut b = a.clone();
                cast(op, d, &src, d, &mut a).unwrap();
                compute::apply(op, d, &mut b, &src).unwrap();
                assert_eq!(a, b, "{d} {}", op.name());
            }
        }
    }

    #[test]
    fn operand_errors_leave_the_destination() {
        let mut dst = [7u8; 4];
        let e = cast(Copy, Dtype::F32, &[0; 12], Dtype::U16, &mut dst).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cast of 3 f32 source elements into 2 u16 destination elements: the two sides must have as many elements"
        );
        assert_eq!(dst, [7; 4]);
        let e = cast(Copy, Dtype::F32, &[0; 6], Dtype::U16, &mut dst).unwrap_err();
        assert!(e.to_string().contains("not a whole number of f32"), "{e}");
        assert_eq!(source_len(64, Dtype::U8, Dtype::F32), 16);
        assert_eq!(source_len(64, Dtype::F32, Dtype::Bf16), 128);
        assert!(cast(Add, Dtype::U8, &[], Dtype::F32, &mut []).is_ok());
    }
}
