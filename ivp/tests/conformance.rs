//! Seed 004's conformance method for the SuperGather: an independently written closed-form
//! model (the "SEM" leg, in this file, using none of the engine's lane or width code) against
//! the engine, on the seed's edge corpus (3 widths x offset cases x predicate cases), plus
//! the seed's directed expectations and property tests of every op against the SEM.

use ivp::{Gr, MemTable, ScatterReport, SuperGather, VBool, VecReg, Width};
use proptest::prelude::*;

/// The seed's per-width facts, written out here rather than asked of the engine.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    width: Width,
    name: &'static str,
    elem: usize,
    lanes: usize,
    lane_bytes: usize,
    offset_bytes: usize,
    table_elems: usize,
}

const GEOMETRIES: [Geometry; 3] = [
    Geometry {
        width: Width::Nx16,
        name: "NX16",
        elem: 2,
        lanes: 32,
        lane_bytes: 2,
        offset_bytes: 2,
        table_elems: 64,
    },
    Geometry {
        width: Width::Nx8u,
        name: "NX8U",
        elem: 1,
        lanes: 32,
        lane_bytes: 2,
        offset_bytes: 2,
        table_elems: 128,
    },
    Geometry {
        width: Width::N2x32,
        name: "N_2X32",
        elem: 4,
        lanes: 16,
        lane_bytes: 4,
        offset_bytes: 4,
        table_elems: 32,
    },
];

/// splitmix64, the corpus PRNG (seeded 0x5AB1E).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

// ---------------------------------------------------------------- the SEM leg

/// Lane values packed little-endian into the 16-word register image.
fn sem_pack(lanes: &[u32], lane_bytes: usize) -> [u32; 16] {
    let mut bytes = [0u8; 64];
    for (k, &v) in lanes.iter().enumerate() {
        for j in 0..lane_bytes {
            bytes[k * lane_bytes + j] = (v >> (8 * j)) as u8;
        }
    }
    std::array::from_fn(|i| {
        u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    })
}

/// The 16-word image unpacked into lanes.
fn sem_unpack(words: &[u32; 16], lane_bytes: usize) -> Vec<u32> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes
        .chunks(lane_bytes)
        .map(|c| c.iter().rev().fold(0u32, |v, &b| v << 8 | u32::from(b)))
        .collect()
}

/// The predicate register: every byte of an enabled lane set.
fn sem_vbool(g: &Geometry, pred: &[bool]) -> VBool {
    let lane_bits = (1u64 << g.lane_bytes) - 1;
    let bits = pred
        .iter()
        .enumerate()
        .filter(|(_, &p)| p)
        .fold(0, |m, (k, _)| m | lane_bits << (k * g.lane_bytes));
    VBool::from_bits(bits)
}

/// The element address of lane k, or None when any element byte is past the table.
fn sem_addr(g: &Geometry, table_len: usize, base: u64, offset: u32) -> Option<usize> {
    let addr = u128::from(base) + u128::from(offset) * g.elem as u128;
    (addr + g.elem as u128 <= table_len as u128).then_some(addr as usize)
}

fn sem_read(table: &[u8], at: usize, elem: usize) -> u32 {
    (0..elem).fold(0, |v, j| v | u32::from(table[at + j]) << (8 * j))
}

fn sem_write(table: &mut [u8], at: usize, elem: usize, v: u32) {
    for j in 0..elem {
        table[at + j] = (v >> (8 * j)) as u8;
    }
}

/// GATHER: enabled and in-bounds lanes read the element, every other lane is the miss 0.
fn sem_gather(g: &Geometry, table: &[u8], base: u64, offs: &[u32], pred: &[bool]) -> Vec<u32> {
    (0..g.lanes)
        .map(
            |k| match (pred[k], sem_addr(g, table.len(), base, offs[k])) {
                (true, Some(at)) => sem_read(table, at, g.elem),
                _ => 0,
            },
        )
        .collect()
}

/// The GSEnable image: all-ones words under enabled lanes.
fn sem_enable(g: &Geometry, pred: &[bool]) -> [u32; 16] {
    let en: Vec<u32> = pred.iter().map(|&p| if p { u32::MAX } else { 0 }).collect();
    sem_pack(&en, g.lane_bytes)
}

/// mgatherd as the seed's word formula (gathered & EN) | (newdata & !EN), cross-checked
/// against the lane rule "enabled ? gathered : old".
fn sem_merge(g: &Geometry, gathered: &[u32], old: &[u32; 16], pred: &[bool]) -> [u32; 16] {
    let (gw, en) = (sem_pack(gathered, g.lane_bytes), sem_enable(g, pred));
    let formula: [u32; 16] = std::array::from_fn(|i| (gw[i] & en[i]) | (old[i] & !en[i]));
    let old_lanes = sem_unpack(old, g.lane_bytes);
    let by_lane: Vec<u32> = (0..g.lanes)
        .map(|k| if pred[k] { gathered[k] } else { old_lanes[k] })
        .collect();
    assert_eq!(
        formula,
        sem_pack(&by_lane, g.lane_bytes),
        "SEM self-check of the merge"
    );
    formula
}

/// SCATTER (data = Some) or SCATTER-ADD (+1, data = None), ascending lanes; the report.
fn sem_scatter(
    g: &Geometry,
    table: &mut [u8],
    base: u64,
    offs: &[u32],
    pred: &[bool],
    data: Option<&[u32]>,
) -> ScatterReport {
    let mut report = ScatterReport::default();
    for k in (0..g.lanes).filter(|&k| pred[k]) {
        let Some(at) = sem_addr(g, table.len(), base, offs[k]) else {
            report.dead += 1;
            continue;
        };
        let v = match data {
            Some(d) => d[k],
            None => sem_read(table, at, g.elem).wrapping_add(1),
        };
        sem_write(table, at, g.elem, v);
        report.written += 1;
    }
    report
}

/// The staging control marker: GSControl of gathera, elem_sz_fld = log2(elem),
/// offst_sz_fld = log2(offset bytes) - 1, operation_fld = 1.
fn sem_marker(g: &Geometry) -> u16 {
    let e = g.elem.trailing_zeros() as u16;
    let o = g.offset_bytes.trailing_zeros() as u16 - 1;
    e << 6 | o << 4 | 1
}

// ---------------------------------------------------------------- the harness

#[derive(Default)]
struct Tally {
    probes: usize,
    words: usize,
    mismatches: usize,
    notes: Vec<String>,
}

impl Tally {
    fn compare(&mut self, what: &str, got: &[u32], want: &[u32]) {
        self.words += want.len();
        let bad =
            got.len().abs_diff(want.len()) + got.iter().zip(want).filter(|(a, b)| a != b).count();
        if bad > 0 && self.notes.len() < 8 {
            self.notes
                .push(format!("{what}: got {got:08x?} want {want:08x?}"));
        }
        self.mismatches += bad;
    }

    fn compare_bytes(&mut self, what: &str, got: &[u8], want: &[u8]) {
        let words = |b: &[u8]| -> Vec<u32> {
            b.chunks(4)
                .map(|c| c.iter().rev().fold(0u32, |v, &x| v << 8 | u32::from(x)))
                .collect()
        };
        self.compare(what, &words(got), &words(want));
        if got.len() != want.len() {
            self.mismatches += 1;
        }
    }
}

struct Case<'a> {
    g: &'a Geometry,
    base: u64,
    offs: &'a [u32],
    pred: &'a [bool],
    table: &'a [u8],
    old: [u32; 16],
    data: &'a [u32],
    gr: Gr,
    label: String,
}

fn all_on(pred: &[bool]) -> bool {
    pred.iter().all(|&p| p)
}

/// Issues gathera (the non-t form when every lane is on, to cover both forms).
fn issue_gathera(sg: &mut SuperGather, c: &Case<'_>, gr: Gr) {
    let offsets = VecReg::from_n_2x32(sem_pack(c.offs, c.g.offset_bytes));
    if all_on(c.pred) {
        sg.gathera(gr, c.g.width, c.base, &offsets);
    } else {
        sg.gathera_t(gr, c.g.width, c.base, &offsets, sem_vbool(c.g, c.pred));
    }
}

fn probe_staging_and_gather(t: &mut Tally, sg: &mut SuperGather, c: &Case<'_>, port: &MemTable) {
    issue_gathera(sg, c, c.gr);
    let reg = sg.gr(c.gr);
    t.probes += 1;
    t.compare(
        &format!("{} offset image", c.label),
        reg.offset_image(),
        &sem_pack(c.offs, c.g.offset_bytes),
    );
    t.compare(
        &format!("{} sentinels", c.label),
        reg.data_image(),
        &[0xffff_ffff; 16],
    );
    t.compare(
        &format!("{} GSEnable", c.label),
        &reg.enable_image(),
        &sem_enable(c.g, c.pred),
    );
    t.compare(
        &format!("{} marker", c.label),
        &[u32::from(reg.marker())],
        &[u32::from(sem_marker(c.g))],
    );
    let got = sg.gatherd(c.gr, port);
    t.probes += 1;
    let want = sem_pack(
        &sem_gather(c.g, c.table, c.base, c.offs, c.pred),
        c.g.lane_bytes,
    );
    t.compare(&format!("{} gather", c.label), &got.n_2x32(), &want);
}

fn probe_merge(t: &mut Tally, sg: &mut SuperGather, c: &Case<'_>, port: &MemTable) {
    let gr = Gr::new(((c.gr.index() + 1) % 8) as u8).unwrap();
    issue_gathera(sg, c, gr);
    let got = sg.mgatherd(gr, &VecReg::from_n_2x32(c.old), port);
    let gathered = sem_gather(c.g, c.table, c.base, c.offs, c.pred);
    t.probes += 1;
    t.compare(
        &format!("{} merge", c.label),
        &got.n_2x32(),
        &sem_merge(c.g, &gathered, &c.old, c.pred),
    );
}

fn probe_scatter(t: &mut Tally, sg: &mut SuperGather, c: &Case<'_>, increment: bool) {
    let mut port = MemTable::from_bytes(c.table.to_vec());
    let offsets = VecReg::from_n_2x32(sem_pack(c.offs, c.g.offset_bytes));
    let data = VecReg::from_n_2x32(sem_pack(c.data, c.g.lane_bytes));
    let vb = sem_vbool(c.g, c.pred);
    match (increment, all_on(c.pred)) {
        (false, true) => sg.scatter(&mut port, c.g.width, c.base, &offsets, &data),
        (false, false) => sg.scatter_t(&mut port, c.g.width, c.base, &offsets, &data, vb),
        (true, true) => sg.scatterinc(&mut port, c.g.width, c.base, &offsets),
        (true, false) => sg.scatterinc_t(&mut port, c.g.width, c.base, &offsets, vb),
    }
    let what = if increment { "scatterinc" } else { "scatter" };
    t.compare_bytes(
        &format!("{} {what} before scatterw", c.label),
        port.as_bytes(),
        c.table,
    );
    let report = sg.scatterw(&mut port);
    let mut want = c.table.to_vec();
    let want_report = sem_scatter(
        c.g,
        &mut want,
        c.base,
        c.offs,
        c.pred,
        (!increment).then_some(c.data),
    );
    t.probes += 1;
    t.compare_bytes(&format!("{} {what}", c.label), port.as_bytes(), &want);
    t.compare(
        &format!("{} {what} report", c.label),
        &[report.written, report.dead],
        &[want_report.written, want_report.dead],
    );
}

fn offset_cases(g: &Geometry, rng: &mut SplitMix) -> Vec<(&'static str, Vec<u32>)> {
    let (n, t) = (g.lanes as u32, g.table_elems as u32);
    let max = if g.offset_bytes == 2 {
        0xffff
    } else {
        u32::MAX
    };
    let lanes = |f: &dyn Fn(u32) -> u32| (0..n).map(f).collect::<Vec<u32>>();
    vec![
        ("in_bounds", lanes(&|k| (5 * k + 1) % t)),
        ("some_oob", lanes(&|k| if k % 4 == 3 { t + k } else { k })),
        ("all_oob", lanes(&|k| t + 3 * k)),
        ("collide_all", lanes(&|_| 5)),
        ("collide_pairs", lanes(&|k| k / 2)),
        (
            "edge",
            lanes(&|k| match k % 3 {
                0 => t - 1,
                1 => t,
                _ => max,
            }),
        ),
        (
            "random",
            (0..n)
                .map(|_| (rng.next() % u64::from(2 * t)) as u32)
                .collect(),
        ),
    ]
}

fn predicate_cases(lanes: usize, random_masks: &[u64; 6]) -> Vec<(String, Vec<bool>)> {
    let by = |f: &dyn Fn(usize) -> bool| (0..lanes).map(f).collect::<Vec<bool>>();
    let mut cases = vec![
        ("all_on".to_string(), by(&|_| true)),
        ("all_off".to_string(), by(&|_| false)),
        ("alt".to_string(), by(&|k| k & 1 == 1)),
        ("first_only".to_string(), by(&|k| k == 0)),
    ];
    for (i, &m) in random_masks.iter().enumerate() {
        cases.push((format!("rand{i}"), by(&|k| m >> k & 1 == 1)));
    }
    cases
}

#[test]
fn edge_corpus_engine_agrees_with_sem() {
    let mut rng = SplitMix(0x5AB1E);
    let masks: [u64; 6] = std::array::from_fn(|_| rng.next());
    let mut run = Run {
        sg: SuperGather::new(),
        tally: Tally::default(),
        probes_issued: 0,
    };
    for g in &GEOMETRIES {
        run.width(g, &mut rng, &masks);
    }
    let t = &run.tally;
    eprintln!(
        "SuperGather conformance: {} probes, {} lane-words compared, {} mismatches",
        t.probes, t.words, t.mismatches
    );
    assert_eq!(t.mismatches, 0, "first mismatches: {:#?}", t.notes);
    // 3 widths x 7 offset cases x 10 predicate cases x 2 bases x 5 probes.
    assert_eq!(t.probes, 3 * 7 * 10 * 2 * 5);
}

/// The corpus run: one engine for the whole corpus, cycling through gr0..gr7.
struct Run {
    sg: SuperGather,
    tally: Tally,
    probes_issued: u8,
}

impl Run {
    /// Every offset case x predicate case x base of one width, on the seed's TABLE.
    fn width(&mut self, g: &Geometry, rng: &mut SplitMix, masks: &[u64; 6]) {
        let table: Vec<u8> = (0..g.table_elems * g.elem)
            .map(|_| rng.next() as u8)
            .collect();
        assert_eq!(
            table.len(),
            128,
            "{}: the seed's TABLE sizes are 128 bytes",
            g.name
        );
        let port = MemTable::from_bytes(table.clone());
        let lane_max = if g.lane_bytes == 2 {
            0xffff
        } else {
            u64::from(u32::MAX)
        };
        for (oname, offs) in offset_cases(g, rng) {
            for (pname, pred) in predicate_cases(g.lanes, masks) {
                for base in [0u64, 7] {
                    let data: Vec<u32> = (0..g.lanes)
                        .map(|_| (rng.next() & lane_max) as u32)
                        .collect();
                    let c = Case {
                        g,
                        base,
                        offs: &offs,
                        pred: &pred,
                        table: &table,
                        old: std::array::from_fn(|_| rng.next() as u32),
                        data: &data,
                        gr: Gr::new(self.probes_issued % 8).unwrap(),
                        label: format!("{} {oname} {pname} base {base}", g.name),
                    };
                    self.probes_issued = self.probes_issued.wrapping_add(1);
                    self.case(&c, &port);
                }
            }
        }
    }

    fn case(&mut self, c: &Case<'_>, port: &MemTable) {
        let (t, sg) = (&mut self.tally, &mut self.sg);
        probe_staging_and_gather(t, sg, c, port);
        probe_merge(t, sg, c, port);
        probe_scatter(t, sg, c, false);
        probe_scatter(t, sg, c, true);
    }
}

// ---------------------------------------------------------------- directed expectations

fn lane0(g: &Geometry, v: &VecReg) -> u32 {
    sem_unpack(&v.n_2x32(), g.lane_bytes)[0]
}

#[test]
fn elem_sz_scales_the_offset() {
    let port = MemTable::from_bytes((0..128).map(|i| i as u8).collect());
    let mut sg = SuperGather::new();
    let want = [("NX16", 0x0b0a), ("NX8U", 5), ("N_2X32", 0x1716_1514)];
    for (g, (name, expect)) in GEOMETRIES.iter().zip(want) {
        assert_eq!(g.name, name);
        let mut offs = vec![0u32; g.lanes];
        offs[0] = 5;
        let pred: Vec<bool> = (0..g.lanes).map(|k| k == 0).collect();
        let offsets = VecReg::from_n_2x32(sem_pack(&offs, g.offset_bytes));
        let v = sg.gather_t(Gr::GR2, g.width, 0, &offsets, sem_vbool(g, &pred), &port);
        assert_eq!(lane0(g, &v), expect, "{name}");
    }
}

#[test]
fn staging_marker_per_width_and_sixteen_sentinels() {
    let mut sg = SuperGather::new();
    let want = [0x41u16, 0x01, 0x91];
    for (g, marker) in GEOMETRIES.iter().zip(want) {
        let offsets = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32));
        for vb in [VBool::ALL, VBool::NONE, VBool::from_bits(0x5a5a)] {
            sg.gathera_t(Gr::GR6, g.width, 0, &offsets, vb);
            let reg = sg.gr(Gr::GR6);
            assert_eq!(reg.marker(), marker, "{}", g.name);
            assert_eq!(sem_marker(g), marker, "{}: the SEM derivation", g.name);
            let sentinels = reg
                .data_image()
                .iter()
                .filter(|&&w| w == 0xffff_ffff)
                .count();
            assert_eq!(sentinels, 16, "{}", g.name);
        }
    }
}

#[test]
fn scatterinc_collisions_accumulate() {
    let mut sg = SuperGather::new();
    for g in &GEOMETRIES {
        let bytes = g.table_elems * g.elem;
        let mut port = MemTable::zeroed(bytes);
        let all = VecReg::from_n_2x32(sem_pack(&vec![3; g.lanes], g.offset_bytes));
        sg.scatterinc(&mut port, g.width, 0, &all);
        sg.scatterw(&mut port);
        assert_eq!(
            sem_read(port.as_bytes(), 3 * g.elem, g.elem),
            g.lanes as u32,
            "{} collide_all",
            g.name
        );

        let mut port = MemTable::zeroed(bytes);
        let pairs: Vec<u32> = (0..g.lanes as u32).map(|k| k / 2).collect();
        let pairs = VecReg::from_n_2x32(sem_pack(&pairs, g.offset_bytes));
        sg.scatterinc(&mut port, g.width, 0, &pairs);
        assert_eq!(
            sg.scatterw(&mut port),
            ScatterReport {
                written: g.lanes as u32,
                dead: 0
            }
        );
        for a in 0..g.table_elems {
            let want = if a < g.lanes / 2 { 2 } else { 0 };
            assert_eq!(
                sem_read(port.as_bytes(), a * g.elem, g.elem),
                want,
                "{} collide_pairs at {a}",
                g.name
            );
        }
    }
}

#[test]
fn thirty_two_lanes_into_one_nx16_element_give_plus_32() {
    let mut port = MemTable::zeroed(128);
    let mut sg = SuperGather::new();
    sg.scatterinc(&mut port, Width::Nx16, 0, &VecReg::from_nx16([9; 32]));
    sg.scatterw(&mut port);
    assert_eq!(&port.as_bytes()[18..20], &[32, 0]);
}

// ---------------------------------------------------------------- properties vs the SEM

/// One random probe: a width, a base (small or next to the 64-bit end), a table, lanes
/// already cut to the width's offset, data and predicate lanes, and an old register.
#[derive(Debug, Clone)]
struct Drawn {
    g: Geometry,
    base: u64,
    table: Vec<u8>,
    offs: Vec<u32>,
    pred: Vec<bool>,
    data: Vec<u32>,
    old: [u32; 16],
}

impl Drawn {
    fn offsets(&self) -> VecReg {
        VecReg::from_n_2x32(sem_pack(&self.offs, self.g.offset_bytes))
    }
}

fn any_case() -> impl Strategy<Value = Drawn> {
    let base = prop_oneof![0u64..16, (u64::MAX - 16)..=u64::MAX];
    let offs = prop::array::uniform32(prop_oneof![0u32..80, any::<u32>()]);
    let table = prop::collection::vec(any::<u8>(), 0..160);
    let data = prop::array::uniform32(any::<u32>());
    let old = prop::array::uniform16(any::<u32>());
    (0usize..3, base, table, offs, any::<u64>(), data, old).prop_map(
        |(gi, base, table, offs, mask, data, old)| {
            let g = GEOMETRIES[gi];
            let cut = |raw: [u32; 32], bytes: usize| -> Vec<u32> {
                let mask = if bytes == 2 { 0xffff } else { u32::MAX };
                raw.iter().take(g.lanes).map(|&x| x & mask).collect()
            };
            Drawn {
                g,
                base,
                table,
                offs: cut(offs, g.offset_bytes),
                pred: (0..g.lanes).map(|k| mask >> k & 1 == 1).collect(),
                data: cut(data, g.lane_bytes),
                old,
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gather_and_merge_match_sem(d in any_case()) {
        let g = &d.g;
        let port = MemTable::from_bytes(d.table.clone());
        let vb = sem_vbool(g, &d.pred);
        let mut sg = SuperGather::new();
        let got = sg.gather_t(Gr::GR0, g.width, d.base, &d.offsets(), vb, &port);
        let gathered = sem_gather(g, &d.table, d.base, &d.offs, &d.pred);
        prop_assert_eq!(got.n_2x32(), sem_pack(&gathered, g.lane_bytes));
        sg.gathera_t(Gr::GR5, g.width, d.base, &d.offsets(), vb);
        let merged = sg.mgatherd(Gr::GR5, &VecReg::from_n_2x32(d.old), &port);
        prop_assert_eq!(merged.n_2x32(), sem_merge(g, &gathered, &d.old, &d.pred));
    }

    #[test]
    fn scatter_and_scatterinc_match_sem(d in any_case()) {
        let g = &d.g;
        let vb = sem_vbool(g, &d.pred);
        let mut sg = SuperGather::new();
        for increment in [false, true] {
            let mut port = MemTable::from_bytes(d.table.clone());
            if increment {
                sg.scatterinc_t(&mut port, g.width, d.base, &d.offsets(), vb);
            } else {
                let v = VecReg::from_n_2x32(sem_pack(&d.data, g.lane_bytes));
                sg.scatter_t(&mut port, g.width, d.base, &d.offsets(), &v, vb);
            }
            let report = sg.scatterw(&mut port);
            let mut want = d.table.clone();
            let data = (!increment).then_some(&d.data[..]);
            let want_report = sem_scatter(g, &mut want, d.base, &d.offs, &d.pred, data);
            prop_assert_eq!(port.as_bytes(), &want[..]);
            prop_assert_eq!(report, want_report);
        }
    }
    #[test]
    fn movgatherd_then_gatherd_is_identity(words in prop::array::uniform16(any::<u32>()), gr in 0u8..8) {
        let gr = Gr::new(gr).unwrap();
        let mut sg = SuperGather::new();
        let v = VecReg::from_n_2x32(words);
        sg.movgatherd(gr, &v);
        prop_assert_eq!(sg.gatherd(gr, &MemTable::zeroed(0)), v);
    }
}
