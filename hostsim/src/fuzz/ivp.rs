//! The `ivp` target: the IVP core's lane ops against their closed forms, lane by lane.
//!
//! One case draws two 16-lane operand registers with edge lanes (0, 1, the table's
//! element count and one less, `u32::MAX`), a predicate, a table of random bytes and a
//! base, then checks:
//!
//! - the compares `ltun_2x32` / `leun_2x32` / `eqn_2x32`, `andb` / `orb`, `subn_2x32`,
//!   `movva32`, the byte select `mov2nx8t` and the checked `mulusan_2x32` (exact in
//!   `i128`: in range or an error);
//! - the SuperGather for each width: `gathera_t` + `gatherd` (a lane reads its element
//!   only when enabled and wholly inside the table, else drains 0; NX8U zero-extends),
//!   `mgatherd` (disabled lanes keep the old register) and `scatter_t` + `scatterw`
//!   (enabled in-table lanes store in ascending lane order, the last store wins).

use ivp::{alu, AddrVec, Gr, LaneView, MemTable, SuperGather, VBool, VecReg, Width};

use crate::fuzz::rng::Rng;

/// One `ivp` case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneCase {
    /// Operand register `a`, as 16 words.
    pub a: [u32; 16],
    /// Operand register `b`, as 16 words.
    pub b: [u32; 16],
    /// Predicate bits (one per byte of the register).
    pub pred: u64,
    /// The memory table the gathers and scatters use.
    pub table: Vec<u8>,
    /// The table's base address.
    pub base: u64,
}

/// The case drawn from `rng`.
pub fn case(mut rng: Rng) -> LaneCase {
    let len = rng.pick(&[0u32, 1, 4, 63, 64, 200]);
    let table = rng.bytes(len as usize);
    let lane = |rng: &mut Rng| match rng.below(8) {
        0 => 0,
        1 => 1,
        2 => len / 4,
        3 => (len / 2).saturating_sub(1),
        4 => len,
        5 => u32::MAX,
        _ => rng.next_u32() % (len + 2),
    };
    let a = std::array::from_fn(|_| lane(&mut rng));
    let b = std::array::from_fn(|_| lane(&mut rng));
    let pred = match rng.below(4) {
        0 => u64::MAX,
        1 => 0,
        _ => rng.next_u64(),
    };
    // The last choice ends the table on the last byte of the 64-bit address space.
    let base = rng.pick(&[0u64, 4, 1 << 40, u64::MAX - u64::from(len)]);
    LaneCase {
        a,
        b,
        pred,
        table,
        base,
    }
}

/// Runs every check on `c`; `Err` names the first lane that differs.
pub fn check(c: &LaneCase) -> Result<(), String> {
    alu_ops(c)?;
    for width in Width::ALL {
        gathers(c, width)?;
        scatters(c, width)?;
    }
    Ok(())
}

fn expect<T: PartialEq + std::fmt::Debug>(op: &str, got: T, want: T) -> Result<(), String> {
    match got == want {
        true => Ok(()),
        false => Err(format!("{op}: got {got:?}, the closed form gives {want:?}")),
    }
}

/// A 16-bit lane mask of the N_2X32 view from a per-lane rule.
fn mask16(f: impl Fn(usize) -> bool) -> u64 {
    (0..16).fold(0, |m, k| m | u64::from(f(k)) << k)
}

fn alu_ops(c: &LaneCase) -> Result<(), String> {
    let (a, b) = (VecReg::from_n_2x32(c.a), VecReg::from_n_2x32(c.b));
    let view = LaneView::N2x32;
    let lanes = |p: VBool| p.lane_mask(view);
    expect(
        "ltun_2x32",
        lanes(alu::ltun_2x32(&a, &b)),
        mask16(|k| c.a[k] < c.b[k]),
    )?;
    expect(
        "leun_2x32",
        lanes(alu::leun_2x32(&a, &b)),
        mask16(|k| c.a[k] <= c.b[k]),
    )?;
    expect(
        "eqn_2x32",
        lanes(alu::eqn_2x32(&a, &b)),
        mask16(|k| c.a[k] == c.b[k]),
    )?;
    let (p, q) = (VBool::from_bits(c.pred), alu::ltun_2x32(&a, &b));
    expect("andb", alu::andb(p, q).bits(), c.pred & q.bits())?;
    expect("orb", alu::orb(p, q).bits(), c.pred | q.bits())?;
    let diff: [u32; 16] = std::array::from_fn(|k| c.a[k].wrapping_sub(c.b[k]));
    expect("subn_2x32", alu::subn_2x32(&a, &b).n_2x32(), diff)?;
    expect("movva32", alu::movva32(c.a[0]).n_2x32(), [c.a[0]; 16])?;
    let (ab, bb) = (a.bytes_2nx8(), b.bytes_2nx8());
    let sel: [u8; 64] = std::array::from_fn(|j| match c.pred >> j & 1 {
        1 => ab[j],
        _ => bb[j],
    });
    expect("mov2nx8t", alu::mov2nx8t(&a, &b, p).bytes_2nx8(), sel)?;
    mulusan(c, &a, &b)
}

fn mulusan(c: &LaneCase, a: &VecReg, b: &VecReg) -> Result<(), String> {
    let acc = AddrVec::splat(c.base);
    let exact = |k: usize| {
        let v = i128::from(c.base) + i128::from(c.a[k]) * i128::from(c.b[k] as i32);
        u64::try_from(v).ok()
    };
    let want: Option<[u64; 16]> = (0..16)
        .map(exact)
        .collect::<Option<Vec<u64>>>()
        .and_then(|v| v.try_into().ok());
    let got = alu::checked_mulusan_2x32(&acc, a, b)
        .ok()
        .map(|v| v.lanes());
    expect("checked_mulusan_2x32", got, want)
}

/// The table position of the element at `base + offset * size`, if its address does
/// not overflow and its bytes are wholly inside the table.
fn position(c: &LaneCase, offset: u32, size: u64) -> Option<usize> {
    let rel = u64::from(offset).checked_mul(size)?;
    c.base.checked_add(rel)?.checked_add(size)?;
    let end = rel.checked_add(size)?;
    (end <= c.table.len() as u64).then_some(rel as usize)
}

/// The element at `base + offset * size`, if [`position`] finds it.
fn element(c: &LaneCase, offset: u32, size: u64) -> Option<u32> {
    let at = position(c, offset, size)?;
    let bytes = c.table.get(at..at + size as usize)?;
    Some(bytes.iter().rev().fold(0, |v, &x| v << 8 | u32::from(x)))
}

/// The offsets register of `width` and its lanes (NX16 lanes are the low halves).
fn offsets(c: &LaneCase, width: Width) -> (VecReg, Vec<u32>) {
    match width.view() {
        LaneView::N2x32 => (VecReg::from_n_2x32(c.a), c.a.to_vec()),
        _ => {
            let lanes: [u16; 32] = std::array::from_fn(|k| {
                let w = c.a[k / 2];
                (if k % 2 == 0 { w } else { c.b[k / 2] }) as u16
            });
            (VecReg::from_nx16(lanes), lanes.map(u32::from).to_vec())
        }
    }
}

fn gathers(c: &LaneCase, width: Width) -> Result<(), String> {
    let view = width.view();
    let (offs, lanes) = offsets(c, width);
    let vb = VBool::from_lanes(view, c.pred);
    let port = MemTable::window_at(c.base, c.table.clone());
    let size = width.elem_sz().bytes();
    let want: Vec<u32> = (0..view.lanes())
        .map(|k| match vb.lane(view, k) {
            true => lanes.get(k).and_then(|&o| element(c, o, size)).unwrap_or(0),
            false => 0,
        })
        .collect();
    let mut sg = SuperGather::new();
    let got = sg.gather_t(Gr::GR0, width, c.base, &offs, vb, &port);
    let got_lanes: Vec<u32> = (0..view.lanes()).map(|k| got.lane(view, k)).collect();
    expect(&format!("gather_t {width:?}"), got_lanes, want.clone())?;
    let old = VecReg::from_n_2x32(c.b);
    sg.gathera_t(Gr::GR1, width, c.base, &offs, vb);
    let merged = sg.mgatherd(Gr::GR1, &old, &port);
    let want_merged: Vec<u32> = (0..view.lanes())
        .map(|k| match vb.lane(view, k) {
            true => want.get(k).copied().unwrap_or(0),
            false => old.lane(view, k),
        })
        .collect();
    let got_merged: Vec<u32> = (0..view.lanes()).map(|k| merged.lane(view, k)).collect();
    expect(&format!("mgatherd {width:?}"), got_merged, want_merged)
}

fn scatters(c: &LaneCase, width: Width) -> Result<(), String> {
    let view = width.view();
    let (offs, lanes) = offsets(c, width);
    let vb = VBool::from_lanes(view, c.pred);
    let data = VecReg::from_n_2x32(c.b);
    let size = width.elem_sz().bytes();
    let mut want = c.table.clone();
    for k in (0..view.lanes()).filter(|&k| vb.lane(view, k)) {
        let Some(at) = lanes.get(k).and_then(|&o| position(c, o, size)) else {
            continue;
        };
        let bytes = data.lane(view, k).to_le_bytes();
        if let (Some(dst), Some(src)) = (
            want.get_mut(at..at + size as usize),
            bytes.get(..size as usize),
        ) {
            dst.copy_from_slice(src);
        }
    }
    let mut port = MemTable::window_at(c.base, c.table.clone());
    let mut sg = SuperGather::new();
    sg.scatter_t(&mut port, width, c.base, &offs, &data, vb);
    sg.scatterw(&mut port);
    expect(
        &format!("scatter_t {width:?}"),
        port.as_bytes().to_vec(),
        want,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_ops_match_their_closed_forms_on_many_cases() {
        for seed in 0..300 {
            let c = case(Rng::new(seed));
            assert_eq!(check(&c), Ok(()), "seed {seed}: {c:?}");
        }
        assert_eq!(case(Rng::new(5)), case(Rng::new(5)));
    }

    #[test]
    fn a_wrong_expectation_is_reported_with_the_op() {
        assert_eq!(
            expect("ltun_2x32", 1u64, 2),
            Err("ltun_2x32: got 1, the closed form gives 2".to_string())
        );
        let c = LaneCase {
            a: [0; 16],
            b: [0; 16],
            pred: 0,
            table: vec![1, 2, 3, 4],
            base: 0,
        };
        assert_eq!(element(&c, 0, 4), Some(0x0403_0201));
        assert_eq!(element(&c, 1, 4), None);
        assert_eq!(element(&c, 3, 1), Some(4));
    }
}
