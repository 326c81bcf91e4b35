//! The in-core vector ops the bounds checks and kernels around the gather use: unsigned
//! compares, predicate logic, predicated and dual selects, lane arithmetic, broadcast, and
//! the `mulusan_2x32` address multiply-accumulate. All are pure functions of registers.
//!
//! | op | here | per lane |
//! |----|------|----------|
//! | `ivp_ltun_2x32` | [`ltun_2x32`] | `a < b`, unsigned 32-bit |
//! | `ivp_leun_2x32` | [`leun_2x32`] | `a <= b`, unsigned 32-bit |
//! | `ivp_eqn_2x32`  | [`eqn_2x32`]  | `a == b`, 32-bit |
//! | `ivp_andb` / `ivp_orb` | [`andb`] / [`orb`] | bitwise on the predicate |
//! | `ivp_mov2nx8t`  | [`mov2nx8t`]  | byte `vb ? a : b` |
//! | `ivp_dselnx16t` / `ivp_dseln_2x32t` | [`dselnx16t`] / [`dseln_2x32t`] | dual select |
//! | `ivp_subn_2x32` | [`subn_2x32`] | `a - b`, wrapping |
//! | `ivp_movva32`   | [`movva32`]   | broadcast an AR to 16 lanes |
//! | `ivp_mulusan_2x32` | [`mulusan_2x32`] | `acc + u64(idx) * i64(step)` |
//!
//! # Dual select (project definition; the seeds name the op, not its lane rule)
//!
//! The source is the `2L`-lane concatenation `b ‖ a` (`b` in lanes `0..L`, `a` in `L..2L`).
//! Output lane `j` of `0..2L` (lanes `0..L` go to `lo`, `L..2L` to `hi`) takes source lane
//! `sel.byte[j] mod 2L`. Lane `i` of both outputs is written only where `vb` enables lane
//! `i` of the view; elsewhere it keeps `old`.
//!
//! # mulusan_2x32 (unsigned index x signed step, 64-bit accumulate)
//!
//! `acc + (idx as u64) * (step as i64)`: the product is exact (it fits `i64`), the add is
//! wrapping in [`mulusan_2x32`] / [`mulusan`] and fails cleanly in [`checked_mulusan_2x32`]
//! / [`checked_mulusan`] when the result leaves `0..=u64::MAX`.

use crate::error::Error;
use crate::reg::{AddrVec, LaneView, VBool, VecPair, VecReg};

fn compare_2x32(a: &VecReg, b: &VecReg, f: impl Fn(u32, u32) -> bool) -> VBool {
    let (a, b) = (a.words(), b.words());
    let lanes = a
        .iter()
        .zip(b)
        .enumerate()
        .fold(0u64, |m, (k, (&x, &y))| m | u64::from(f(x, y)) << k);
    VBool::from_lanes(LaneView::N2x32, lanes)
}

/// `ivp_ltun_2x32`: lane `k` true where `a[k] < b[k]` (unsigned), the in-bounds test.
pub fn ltun_2x32(a: &VecReg, b: &VecReg) -> VBool {
    compare_2x32(a, b, |x, y| x < y)
}

/// `ivp_leun_2x32`: lane `k` true where `a[k] <= b[k]` (unsigned).
pub fn leun_2x32(a: &VecReg, b: &VecReg) -> VBool {
    compare_2x32(a, b, |x, y| x <= y)
}

/// `ivp_eqn_2x32`: lane `k` true where `a[k] == b[k]`.
pub fn eqn_2x32(a: &VecReg, b: &VecReg) -> VBool {
    compare_2x32(a, b, |x, y| x == y)
}

/// `ivp_andb`: predicate AND.
pub fn andb(a: VBool, b: VBool) -> VBool {
    VBool::from_bits(a.bits() & b.bits())
}

/// `ivp_orb`: predicate OR.
pub fn orb(a: VBool, b: VBool) -> VBool {
    VBool::from_bits(a.bits() | b.bits())
}

/// `ivp_mov2nx8t`: byte `j` is `a[j]` where `vb` bit `j` is set, else `b[j]`.
pub fn mov2nx8t(a: &VecReg, b: &VecReg, vb: VBool) -> VecReg {
    let m = vb.byte_mask();
    let (a, b) = (a.words(), b.words());
    VecReg::from_n_2x32(std::array::from_fn(|i| (a[i] & m[i]) | (b[i] & !m[i])))
}

fn dual_select(
    view: LaneView,
    old: &VecPair,
    a: &VecReg,
    b: &VecReg,
    sel: &VecReg,
    vb: VBool,
) -> VecPair {
    let lanes = view.lanes();
    let source = |s: usize| {
        if s < lanes {
            b.lane(view, s)
        } else {
            a.lane(view, s - lanes)
        }
    };
    let mut out = *old;
    for i in (0..lanes).filter(|&i| vb.lane(view, i)) {
        let pick = |j: usize| source(sel.lane(LaneView::TwoNx8, j) as usize % (2 * lanes));
        out.lo.set_lane(view, i, pick(i));
        out.hi.set_lane(view, i, pick(i + lanes));
    }
    out
}

/// `ivp_dselnx16t hi, lo, a, b, sel, vb`: the NX16 dual select (module docs), 64 source
/// lanes, selector bytes `0..64`.
pub fn dselnx16t(old: &VecPair, a: &VecReg, b: &VecReg, sel: &VecReg, vb: VBool) -> VecPair {
    dual_select(LaneView::Nx16, old, a, b, sel, vb)
}

/// `ivp_dseln_2x32t hi, lo, a, b, sel, vb`: the N_2X32 dual select (module docs), 32
/// source lanes, selector bytes `0..32`.
pub fn dseln_2x32t(old: &VecPair, a: &VecReg, b: &VecReg, sel: &VecReg, vb: VBool) -> VecPair {
    dual_select(LaneView::N2x32, old, a, b, sel, vb)
}

/// `ivp_subn_2x32`: `a[k] - b[k]`, wrapping.
pub fn subn_2x32(a: &VecReg, b: &VecReg) -> VecReg {
    let (a, b) = (a.words(), b.words());
    VecReg::from_n_2x32(std::array::from_fn(|k| a[k].wrapping_sub(b[k])))
}

/// `ivp_movva32`: `x` in all 16 N_2X32 lanes.
pub fn movva32(x: u32) -> VecReg {
    VecReg::from_n_2x32([x; 16])
}

#[inline]
fn product(idx: u32, step: i32) -> i64 {
    // |idx * step| < 2^32 * 2^31 = 2^63: exact in i64.
    i64::from(idx) * i64::from(step)
}

/// Scalar `mulusan`: `acc + idx * step`, wrapping modulo 2^64.
#[inline]
pub fn mulusan(acc: u64, idx: u32, step: i32) -> u64 {
    acc.wrapping_add_signed(product(idx, step))
}

/// Scalar `mulusan`: `acc + idx * step`, or `None` if it leaves `0..=u64::MAX`.
pub fn checked_mulusan(acc: u64, idx: u32, step: i32) -> Option<u64> {
    acc.checked_add_signed(product(idx, step))
}

/// `ivp_mulusan_2x32`: per lane `acc[k] + idx[k] * (step[k] as i32)`, wrapping.
#[inline]
pub fn mulusan_2x32(acc: &AddrVec, idx: &VecReg, step: &VecReg) -> AddrVec {
    let (a, i, s) = (acc.lanes(), idx.words(), step.words());
    AddrVec::new(std::array::from_fn(|k| mulusan(a[k], i[k], s[k] as i32)))
}

/// `ivp_mulusan_2x32`, checked: the first lane whose address leaves the 64-bit space is
/// reported as [`Error::AddressOverflow`].
pub fn checked_mulusan_2x32(acc: &AddrVec, idx: &VecReg, step: &VecReg) -> Result<AddrVec, Error> {
    let (a, i, s) = (acc.lanes(), idx.words(), step.words());
    // Every lane without a branch (the loop vectorises), then the first failing lane.
    let mut overflowed = 0u16;
    let out = std::array::from_fn(|k| {
        let (sum, over) = a[k].overflowing_add_signed(product(i[k], s[k] as i32));
        overflowed |= u16::from(over) << k;
        sum
    });
    match overflowed {
        0 => Ok(AddrVec::new(out)),
        bits => Err(overflow_at(bits.trailing_zeros() as usize, &a, i, s)),
    }
}

/// [`checked_mulusan_2x32`]'s error for `lane`.
#[cold]
fn overflow_at(lane: usize, a: &[u64; 16], i: &[u32; 16], s: &[u32; 16]) -> Error {
    Error::AddressOverflow {
        lane,
        acc: a[lane],
        idx: i[lane],
        step: s[lane] as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v32(f: impl Fn(usize) -> u32) -> VecReg {
        VecReg::from_n_2x32(std::array::from_fn(f))
    }

    #[test]
    fn compares_are_unsigned_and_cover_whole_lanes() {
        let a = v32(|k| if k == 0 { u32::MAX } else { k as u32 });
        let b = movva32(3);
        assert_eq!(ltun_2x32(&a, &b).lane_mask(LaneView::N2x32), 0b0110);
        assert_eq!(leun_2x32(&a, &b).lane_mask(LaneView::N2x32), 0b1110);
        assert_eq!(eqn_2x32(&a, &b).bits(), 0xf000);
        assert_eq!(andb(ltun_2x32(&a, &b), eqn_2x32(&a, &a)).bits(), 0xff0);
        assert_eq!(orb(VBool::from_bits(1), VBool::from_bits(4)).bits(), 5);
    }

    #[test]
    fn mov2nx8t_selects_whole_lanes_under_a_2x32_predicate() {
        let a = movva32(0xaaaa_aaaa);
        let b = movva32(0x5555_5555);
        let vb = ltun_2x32(&v32(|k| k as u32), &movva32(2));
        let r = mov2nx8t(&a, &b, vb).n_2x32();
        assert_eq!(&r[..3], &[0xaaaa_aaaa, 0xaaaa_aaaa, 0x5555_5555]);
    }

    #[test]
    fn dselnx16t_deinterleaves_with_an_even_odd_selector() {
        // b = lanes 0..32 -> 0..32, a = lanes 32..64 -> 100..132
        let b = VecReg::from_nx16(std::array::from_fn(|k| k as u16));
        let a = VecReg::from_nx16(std::array::from_fn(|k| 100 + k as u16));
        let sel = VecReg::from_bytes_2nx8(std::array::from_fn(|j| {
            if j < 32 {
                (2 * j) as u8
            } else {
                (2 * (j - 32) + 1) as u8
            }
        }));
        let out = dselnx16t(&VecPair::default(), &a, &b, &sel, VBool::ALL);
        assert_eq!(out.lo.nx16()[..3], [0, 2, 4]);
        assert_eq!(out.lo.nx16()[16], 100);
        assert_eq!(out.hi.nx16()[..3], [1, 3, 5]);
        assert_eq!(out.hi.nx16()[31], 163 - 32);
    }

    #[test]
    fn dseln_2x32t_keeps_old_lanes_where_disabled() {
        let old = VecPair {
            hi: movva32(7),
            lo: movva32(9),
        };
        let b = v32(|k| k as u32);
        let a = v32(|k| 50 + k as u32);
        let sel = VecReg::from_bytes_2nx8(std::array::from_fn(|j| (31 - j % 32) as u8));
        let vb = VBool::from_lanes(LaneView::N2x32, 0b10);
        let out = dseln_2x32t(&old, &a, &b, &sel, vb);
        assert_eq!(out.lo.n_2x32()[..2], [9, 50 + 14]);
        assert_eq!(out.hi.n_2x32()[..2], [7, 14]);
    }

    #[test]
    fn subn_wraps() {
        assert_eq!(subn_2x32(&movva32(1), &movva32(2)).n_2x32()[5], u32::MAX);
    }

    #[test]
    fn mulusan_is_unsigned_index_times_signed_step() {
        assert_eq!(mulusan(0x1000, 3, -4), 0x1000 - 12);
        assert_eq!(mulusan(0, u32::MAX, 4), 0x3_ffff_fffc);
        assert_eq!(checked_mulusan(4, 2, -3), None);
        assert_eq!(mulusan(4, 2, -3), u64::MAX - 1);
        let acc = AddrVec::splat(u64::MAX - 8);
        let idx = v32(|k| k as u32);
        let r = checked_mulusan_2x32(&acc, &idx, &movva32(4));
        assert_eq!(
            r,
            Err(Error::AddressOverflow {
                lane: 3,
                acc: u64::MAX - 8,
                idx: 3,
                step: 4
            })
        );
        assert_eq!(mulusan_2x32(&acc, &idx, &movva32(4)).lanes()[2], u64::MAX);
    }

    fn arr32() -> impl Strategy<Value = [u32; 16]> {
        prop::array::uniform16(prop_oneof![any::<u32>(), 0u32..4])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn compares_match_closed_form(a in arr32(), b in arr32()) {
            let (va, vb) = (VecReg::from_n_2x32(a), VecReg::from_n_2x32(b));
            let sem = |f: fn(u32, u32) -> bool| {
                (0..16).fold(0u64, |m, k| if f(a[k], b[k]) { m | 0xf << (4 * k) } else { m })
            };
            prop_assert_eq!(ltun_2x32(&va, &vb).bits(), sem(|x, y| x < y));
            prop_assert_eq!(leun_2x32(&va, &vb).bits(), sem(|x, y| x <= y));
            prop_assert_eq!(eqn_2x32(&va, &vb).bits(), sem(|x, y| x == y));
            let sub: [u32; 16] = std::array::from_fn(|k| a[k].wrapping_sub(b[k]));
            prop_assert_eq!(subn_2x32(&va, &vb).n_2x32(), sub);
        }

        #[test]
        fn mov2nx8t_matches_closed_form(a in any::<[u8; 32]>(), b in any::<[u8; 32]>(), m in any::<u64>()) {
            let full = |h: [u8; 32]| std::array::from_fn::<u8, 64, _>(|j| h[j % 32] ^ (j as u8));
            let (fa, fb) = (full(a), full(b));
            let got = mov2nx8t(&VecReg::from_bytes_2nx8(fa), &VecReg::from_bytes_2nx8(fb), VBool::from_bits(m));
            let sem: [u8; 64] = std::array::from_fn(|j| if m >> j & 1 == 1 { fa[j] } else { fb[j] });
            prop_assert_eq!(got.bytes_2nx8(), sem);
        }

        #[test]
        fn dselnx16t_matches_closed_form(a in any::<[u16; 32]>(), b in any::<[u16; 32]>(), s in any::<[u8; 32]>(), m in any::<u32>()) {
            let sel: [u8; 64] = std::array::from_fn(|j| s[j % 32].wrapping_add(j as u8));
            let old = VecPair { hi: movva32(0x1234_5678), lo: movva32(0x9abc_def0) };
            let vb = VBool::from_lanes(LaneView::Nx16, u64::from(m));
            let out = dselnx16t(&old, &VecReg::from_nx16(a), &VecReg::from_nx16(b), &VecReg::from_bytes_2nx8(sel), vb);
            let src = |x: u8| { let x = usize::from(x) % 64; if x < 32 { b[x] } else { a[x - 32] } };
            let (ohi, olo) = (old.hi.nx16(), old.lo.nx16());
            let lo: [u16; 32] = std::array::from_fn(|i| if m >> i & 1 == 1 { src(sel[i]) } else { olo[i] });
            let hi: [u16; 32] = std::array::from_fn(|i| if m >> i & 1 == 1 { src(sel[i + 32]) } else { ohi[i] });
            prop_assert_eq!(out.lo.nx16(), lo);
            prop_assert_eq!(out.hi.nx16(), hi);
        }

        #[test]
        fn dseln_2x32t_matches_closed_form(a in arr32(), b in arr32(), s in any::<[u8; 32]>(), m in any::<u16>()) {
            let vb = VBool::from_lanes(LaneView::N2x32, u64::from(m));
            let mut sel = [0u8; 64];
            sel[..32].copy_from_slice(&s);
            let out = dseln_2x32t(&VecPair::default(), &VecReg::from_n_2x32(a), &VecReg::from_n_2x32(b), &VecReg::from_bytes_2nx8(sel), vb);
            let src = |x: u8| { let x = usize::from(x) % 32; if x < 16 { b[x] } else { a[x - 16] } };
            let lo: [u32; 16] = std::array::from_fn(|i| if m >> i & 1 == 1 { src(s[i]) } else { 0 });
            let hi: [u32; 16] = std::array::from_fn(|i| if m >> i & 1 == 1 { src(s[i + 16]) } else { 0 });
            prop_assert_eq!(out.lo.n_2x32(), lo);
            prop_assert_eq!(out.hi.n_2x32(), hi);
        }

        #[test]
        fn mulusan_matches_i128(acc in prop::array::uniform16(prop_oneof![any::<u64>(), Just(0u64), Just(u64::MAX)]), idx in arr32(), step in arr32()) {
            let (vi, vs) = (VecReg::from_n_2x32(idx), VecReg::from_n_2x32(step));
            let exact: [i128; 16] = std::array::from_fn(|k| i128::from(acc[k]) + i128::from(idx[k]) * i128::from(step[k] as i32));
            let wrapped: [u64; 16] = std::array::from_fn(|k| exact[k] as u64);
            prop_assert_eq!(mulusan_2x32(&AddrVec::new(acc), &vi, &vs).lanes(), wrapped);
            let first_bad = exact.iter().position(|&e| u64::try_from(e).is_err());
            match checked_mulusan_2x32(&AddrVec::new(acc), &vi, &vs) {
                Ok(r) => { prop_assert_eq!(first_bad, None); prop_assert_eq!(r.lanes(), wrapped); }
                Err(Error::AddressOverflow { lane, .. }) => prop_assert_eq!(Some(lane), first_bad),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }
}
