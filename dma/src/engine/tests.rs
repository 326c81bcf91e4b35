//! The engine's tests: replays against the sequential reference, streamed and async
//! replays, work beside a replay, and the determinism proptests.

use super::*;
use crate::addr::{SBUF_BASE, SBUF_STRIDE};
use crate::compute;
use crate::descriptor::DescOp;
use crate::dtype::Dtype;
use crate::error::AccessKind;
use crate::generation::Generation;
use crate::queue_file::QueueFileWriter;
use crate::test_util::{copy, sem, wait};
use proptest::prelude::*;
use std::io::Cursor;
use std::sync::OnceLock;

const GEN: Generation = Generation::Cayman;
/// The modelled window: HBM `[0, SPAN)`, four pages.
const SPAN: u64 = 4 * PAGE;
const PAGE: u64 = crate::fabric::PAGE_BYTES;
/// Group `g` writes only `[GROUP_BASE + g * GROUP, +GROUP)`; groups straddle pages.
const GROUP_BASE: u64 = 8 * 1024;
const GROUP: u64 = 16 * 1024;
const GROUPS: u64 = 8;
/// Nobody writes `[SHARED, SPAN)`: every queue may read it.
const SHARED: u64 = GROUP_BASE + GROUPS * GROUP;
const MAX_LEN: u64 = 2048;

/// Every replay on the caller's thread.
const ALWAYS: InlineLimit = InlineLimit {
    descriptors: u64::MAX,
    bytes: u64::MAX,
};

/// The schedules the tests run: `workers` 1 or 2, every replay on that many threads,
/// a streamed one in windows of one 7-descriptor batch per queue; 0, every replay on
/// the caller; 3, two threads and windows of 64 batches.
fn config(workers: usize) -> EngineConfig {
    EngineConfig {
        queues: 16,
        workers: workers.clamp(1, 2),
        batch: 7,
        channel_depth: if workers == 3 { 64 } else { 1 },
        inline: if workers == 0 {
            ALWAYS
        } else {
            InlineLimit::OFF
        },
        ..EngineConfig::default()
    }
}

/// Engines by [`config`]'s `workers` (0 to 3), shared by the tests.
fn engine(workers: usize) -> &'static Engine {
    static ENGINES: OnceLock<[Engine; 4]> = OnceLock::new();
    let engines = ENGINES.get_or_init(|| [0, 1, 2, 3].map(|w| Engine::new(config(w)).unwrap()));
    &engines[workers]
}

fn with(workers: usize, f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut c = config(workers);
    f(&mut c);
    Engine::new(c).unwrap()
}

/// The initial contents of the window.
fn image() -> Vec<u8> {
    (0..SPAN)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 11) as u8)
        .collect()
}

fn fabric() -> Fabric {
    let mut f = Fabric::new(GEN);
    f.write(FabricAddr(0), &image()).unwrap();
    f
}

fn window(f: &Fabric) -> Vec<u8> {
    let mut out = vec![0; SPAN as usize];
    f.read(FabricAddr(0), &mut out).unwrap();
    out
}

fn fill(dst: u64, len: u32, element: u64) -> Descriptor {
    Descriptor::fill(FabricAddr(dst), len, Dtype::U8, element).unwrap()
}

/// A descriptor of group `group`: raw fields shaped to the op's rules and the window.
#[derive(Clone, Debug)]
struct Spec {
    group: u64,
    op: DescOp,
    dtype: Dtype,
    /// The source's dtype: a cast where it differs (and the op reads a source).
    src_dtype: Dtype,
    dst_off: u64,
    shared_src: bool,
    src_off: u64,
    len: u64,
    element: u64,
}

impl Spec {
    fn descriptor(&self) -> Descriptor {
        let size = self.dtype.size() as u64;
        let src_dtype = match self.op {
            DescOp::Fill => self.dtype,
            _ => self.src_dtype,
        };
        // whole elements of the wider side, so that neither run passes MAX_LEN
        let wider = size.max(src_dtype.size() as u64);
        let len = if self.op == DescOp::Copy && src_dtype == self.dtype {
            self.len
        } else {
            (self.len / wider).max(1) * size
        };
        let base = GROUP_BASE + self.group * GROUP;
        let src = if self.shared_src {
            SHARED + self.src_off % (SPAN - SHARED - MAX_LEN)
        } else {
            base + self.src_off % (GROUP - MAX_LEN)
        };
        let dst = base + self.dst_off % (GROUP - MAX_LEN);
        let src = if self.op == DescOp::Fill {
            self.element & (u64::MAX >> (64 - 8 * size))
        } else {
            src
        };
        let (src, dst) = (FabricAddr(src), FabricAddr(dst));
        Descriptor::cast(self.op, src, src_dtype, dst, len as u32, self.dtype).unwrap()
    }
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    (
        (0..GROUPS, proptest::sample::select(DescOp::ALL.to_vec())),
        (
            proptest::sample::select(Dtype::ALL.to_vec()),
            proptest::sample::select(Dtype::ALL.to_vec()),
            any::<bool>(),
        ),
        (any::<u64>(), any::<bool>(), any::<u64>()),
        (1..=MAX_LEN, any::<u64>()),
    )
        .prop_map(
            |(
                (group, op),
                (dtype, from, casts),
                (dst_off, shared_src, src_off),
                (len, element),
            )| Spec {
                group,
                op,
                dtype,
                src_dtype: if casts { from } else { dtype },
                dst_off,
                shared_src,
                src_off,
                len,
                element,
            },
        )
}

/// Descriptors in generation order, group `g` to queue `g % queues`.
fn spray(descs: &[(u64, Descriptor)], queues: usize) -> Vec<Vec<Descriptor>> {
    let mut out = vec![Vec::new(); queues];
    for (group, d) in descs {
        out[*group as usize % queues].push(*d);
    }
    out
}

/// The independent reference: the window as a flat Vec, queue after queue, each
/// descriptor with snapshot (memmove) semantics, a cast element by element.
fn reference(queues: &[Vec<Descriptor>]) -> Vec<u8> {
    let mut m = image();
    for d in queues.iter().flatten() {
        let (dst, len) = (d.dst().0 as usize, d.len() as usize);
        let snapshot = match d.source_range() {
            None => {
                let e = d.src().0.to_le_bytes();
                (0..len).map(|i| e[i % d.dtype().size()]).collect()
            }
            Some((src, n)) => m[src.0 as usize..][..n as usize].to_vec(),
        };
        let out = &mut m[dst..dst + len];
        let (from, to) = (d.src_dtype(), d.dtype());
        match d.op().compute_op() {
            Some(op) if d.is_cast() => {
                let pairs = snapshot.chunks(from.size()).zip(out.chunks_mut(to.size()));
                for (s, o) in pairs {
                    crate::cast::cast(op, from, s, to, o).unwrap();
                }
            }
            Some(op) if op != compute::ComputeOp::None => {
                compute::apply(op, d.dtype(), out, &snapshot).unwrap()
            }
            _ => out.copy_from_slice(&snapshot),
        }
    }
    m
}

/// Row copies of 64 bytes from `rows[i].0 * 64` to `rows[i].1 * 64`, dealt round-robin
/// over 16 queues.
fn row_queues(rows: &[(u64, u64)]) -> Vec<Vec<Descriptor>> {
    let mut queues = vec![Vec::new(); 16];
    for (i, &(src, dst)) in rows.iter().enumerate() {
        queues[i % 16].push(copy(src * 64, dst * 64, 64));
    }
    queues
}

/// What `writes` beside a replay of `rows` must do: write where the replay neither
/// reads (between its lowest and highest page read) nor writes, on pages with storage
/// (the window's four), and nowhere else.
fn beside_admits(rows: &[(u64, u64)], at: u64, len: u64) -> bool {
    let page = |row: u64| row * 64 / PAGE;
    let lo = rows.iter().map(|r| page(r.0)).min().unwrap_or(u64::MAX);
    let hi = rows.iter().map(|r| page(r.0)).max().unwrap_or(0);
    let (first, last) = (at / PAGE, (at + len - 1) / PAGE);
    let written = rows.iter().any(|r| (first..=last).contains(&page(r.1)));
    last < SPAN / PAGE && !(first <= hi && lo <= last) && !written
}

#[test]
fn work_beside_a_replay_writes_only_where_the_replay_does_not_reach() {
    // rows of page 0 into page 2
    let rows: Vec<(u64, u64)> = (0..200).map(|i| (i * 7 % 1024, 2048 + i)).collect();
    let queues = row_queues(&rows);
    for e in [engine(3), engine(1)] {
        let mut f = fabric();
        let mut want = fabric();
        let validated = e.validate(&f, queues.clone()).unwrap();
        let writes = [
            (0, 8),
            (PAGE + 8, 8),
            (2 * PAGE, 8),
            (3 * PAGE + 64, 64),
            (5 * PAGE, 4),
        ];
        let (report, (done, saw)) = e
            .run_beside(&mut f, &validated, |b| {
                let done: Vec<bool> = writes
                    .iter()
                    .map(|&(at, n)| b.write(FabricAddr(at), &vec![0xee; n as usize]).unwrap())
                    .collect();
                let mut row = [0u8; 8];
                b.fabric().read(FabricAddr(PAGE + 8), &mut row).unwrap();
                let before = b.read_the_replay();
                b.fabric().read(FabricAddr(2 * PAGE), &mut row).unwrap();
                (done, (before, b.read_the_replay()))
            })
            .unwrap();
        assert_eq!(done, [false, true, false, true, false]);
        for (&(at, n), &ok) in writes.iter().zip(&done) {
            assert_eq!(ok, beside_admits(&rows, at, n));
        }
        assert_eq!(saw, (false, true), "only the replay's page counts");
        assert_eq!(report.summary.descriptors, 200);
        execute_sequential(&mut want, &queues).unwrap();
        want.write(FabricAddr(PAGE + 8), &[0xee; 8]).unwrap();
        want.write(FabricAddr(3 * PAGE + 64), &[0xee; 64]).unwrap();
        assert_eq!(f.first_difference(&want), None);
        assert_eq!(e.recycle(validated), queues);
    }
}

#[test]
fn work_beside_may_write_up_to_the_first_page_the_replay_reads() {
    // rows of page 1 into page 3: pages 0 and 2 are free, page 1 is read
    let rows: Vec<(u64, u64)> = (0..64).map(|i| (1024 + i * 13 % 1024, 3072 + i)).collect();
    let queues = row_queues(&rows);
    let e = engine(2);
    let mut f = fabric();
    let validated = e.validate(&f, queues.clone()).unwrap();
    let writes = [
        (PAGE - 8, 8),
        (PAGE - 4, 8),
        (2 * PAGE - 4, 8),
        (2 * PAGE, 8),
    ];
    let (_, done) = e
        .run_beside(&mut f, &validated, |b| {
            writes
                .iter()
                .map(|&(at, n)| b.write(FabricAddr(at), &[0x5a; 8][..n as usize]).unwrap())
                .collect::<Vec<bool>>()
        })
        .unwrap();
    assert_eq!(done, [true, false, false, true]);
    for (&(at, n), &ok) in writes.iter().zip(&done) {
        assert_eq!(ok, beside_admits(&rows, at, n));
    }
}

#[test]
fn a_validated_round_robin_gather_is_dealt_ahead_and_again_when_run_again() {
    let queues = round_robin_gather();
    let (mut f, mut want) = (fabric(), fabric());
    execute_sequential(&mut want, &queues).unwrap();
    let validated = engine(2).validate(&f, queues.clone()).unwrap();
    assert!(
        lock(&validated.buckets).is_some(),
        "bucketed when validated"
    );
    for _ in 0..2 {
        let (report, ()) = engine(2).run_beside(&mut f, &validated, |_| ()).unwrap();
        assert!(report.execution.page_buckets);
        assert_eq!(f.first_difference(&want), None);
    }
    assert_eq!(engine(2).recycle(validated), queues);
}

#[test]
fn a_panic_beside_a_replay_unwinds_after_it_with_the_fabric_in_place() {
    let rows: Vec<(u64, u64)> = (0..300).map(|i| (i % 1024, 2048 + i)).collect();
    let queues = row_queues(&rows);
    let mut want = fabric();
    execute_sequential(&mut want, &queues).unwrap();
    for e in [engine(3), engine(0), engine(1)] {
        let mut f = fabric();
        let validated = e.validate(&f, queues.clone()).unwrap();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.run_beside(&mut f, &validated, |b| {
                assert!(b.write(FabricAddr(3 * PAGE), &[7; 4]).unwrap());
                panic!("beside fails");
            })
        }));
        assert!(ran.is_err());
        want.write(FabricAddr(3 * PAGE), &[7; 4]).unwrap();
        assert_eq!(
            f.first_difference(&want),
            None,
            "the replay ran, its fabric kept"
        );
        // the engine goes on
        assert!(e.run(&mut f, &queues).is_ok());
    }
}

#[test]
fn validated_queues_run_only_where_they_were_validated() {
    let queues = row_queues(&[(0, 2048)]);
    let validated = engine(3).validate(&fabric(), queues.clone()).unwrap();
    let mut f = fabric();
    let e = engine(2)
        .run_beside(&mut f, &validated, |_| ())
        .unwrap_err();
    assert!(matches!(e, Error::NotValidatedHere { .. }), "{e}");
    let mut sunda = Fabric::new(Generation::Sunda);
    let e = engine(3)
        .run_beside(&mut sunda, &validated, |_| ())
        .unwrap_err();
    assert!(e.to_string().contains("cayman"), "{e}");
    assert_eq!(f.first_difference(&fabric()), None, "nothing ran");
    // a bad queue is refused when validated, as by `run`
    let bad = vec![vec![copy(0, SPAN * 1024 * 1024 * 1024, 64)]];
    assert!(engine(3).validate(&fabric(), bad).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Rows copied within the window while random writes are tried beside the replay:
    /// the writes the engine takes are exactly those that meet nothing of the replay,
    /// and the memory is the replay's followed by theirs.
    #[test]
    fn work_beside_a_replay_equals_the_replay_then_the_writes_it_took(
        rows in proptest::collection::vec((0..4096u64, 0..4096u64), 1..120),
        writes in proptest::collection::vec((0..SPAN + PAGE, 1..300u64), 0..12),
        workers in 0..4usize,
    ) {
        // distinct destination rows, read from pages no row writes: queues that race
        // on no byte, so any schedule gives the memory of the queues in order
        let mut seen = std::collections::HashSet::new();
        let rows: Vec<(u64, u64)> = rows.into_iter().filter(|r| seen.insert(r.1)).collect();
        let written: std::collections::HashSet<u64> = rows.iter().map(|r| r.1 / 1024).collect();
        let rows: Vec<(u64, u64)> = rows.into_iter().filter(|r| !written.contains(&(r.0 / 1024))).collect();
        let queues = row_queues(&rows);
        let e = engine(workers);
        let mut f = fabric();
        let validated = e.validate(&f, queues.clone()).unwrap();
        let (_, done) = e.run_beside(&mut f, &validated, |b| {
            writes.iter().map(|&(at, n)| b.write(FabricAddr(at), &vec![0xa5; n as usize])).collect::<Vec<_>>()
        }).unwrap();
        let mut want = fabric();
        execute_sequential(&mut want, &queues).unwrap();
        for (&(at, n), ok) in writes.iter().zip(done) {
            let admitted = beside_admits(&rows, at, n);
            prop_assert_eq!(ok.unwrap(), admitted);
            if admitted {
                want.write(FabricAddr(at), &vec![0xa5; n as usize]).unwrap();
            }
        }
        prop_assert_eq!(f.first_difference(&want), None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn engine_equals_the_flat_reference(
        specs in proptest::collection::vec(arb_spec(), 1..120),
        queues in 1..=16usize,
        workers in 0..=3usize,
    ) {
        let descs: Vec<(u64, Descriptor)> = specs.iter().map(|s| (s.group, s.descriptor())).collect();
        let queues = spray(&descs, queues);
        let mut f = fabric();
        let report = engine(workers).run(&mut f, &queues).unwrap();
        prop_assert_eq!(window(&f), reference(&queues));
        let mut g = fabric();
        execute_sequential(&mut g, &queues).unwrap();
        prop_assert_eq!(f.first_difference(&g), None);
        let bytes: u64 = descs.iter().map(|(_, d)| u64::from(d.len())).sum();
        prop_assert_eq!(report.summary.descriptors, descs.len() as u64);
        prop_assert_eq!(report.summary.bytes, bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Row gathers and row adds from a table nothing writes into rows over four
    /// pages, every row's writers in one queue: a run on two threads deals them by page
    /// where they write two pages or more (here, two buckets), some page has two
    /// queues, and the pages are dense (a quarter written on average) or the queues
    /// were validated ahead; and equals the queues run in order either way.
    #[test]
    fn runs_page_buckets_equal_the_sequential_reference(
        moves in proptest::collection::vec((0..64u64, 0..256u64, any::<bool>()), 1..300),
        queues in 2..=16usize,
    ) {
        const ROW: u64 = 1024;
        const OUT: u64 = 1 << 20;
        let mut lists = vec![Vec::new(); queues];
        for &(src, dst, add) in &moves {
            let (op, dtype) = if add { (DescOp::Add, Dtype::F32) } else { (DescOp::Copy, Dtype::U8) };
            let (from, to) = (FabricAddr(src * ROW), FabricAddr(OUT + dst * ROW));
            let d = Descriptor::new(op, from, to, ROW as u32, dtype).unwrap();
            lists[dst as usize % queues].push(d);
        }
        let pages: std::collections::BTreeSet<u64> =
            moves.iter().map(|m| m.1 * ROW / PAGE).collect();
        let queue_pages: std::collections::BTreeSet<(u64, u64)> =
            moves.iter().map(|m| (m.1 * ROW / PAGE, m.1 % queues as u64)).collect();
        let shared = queue_pages.len() > pages.len() && pages.len() > 1;
        let dense = moves.len() as u64 * ROW >= pages.len() as u64 * PAGE / 4;
        let mut f = Fabric::new(GEN);
        f.write(FabricAddr(0), &image()[..64 * ROW as usize]).unwrap();
        let mut want = f.clone();
        execute_sequential(&mut want, &lists).unwrap();
        let mut ahead = f.clone();
        let report = engine(3).run(&mut f, &lists).unwrap();
        prop_assert_eq!(report.execution.page_buckets, dense && shared);
        prop_assert_eq!(f.first_difference(&want), None);
        let validated = engine(3).validate(&ahead, lists).unwrap();
        let (report, ()) = engine(3).run_beside(&mut ahead, &validated, |_| ()).unwrap();
        prop_assert_eq!(report.execution.page_buckets, shared);
        prop_assert_eq!(ahead.first_difference(&want), None);
    }
}

/// A gather of 4096 four-byte elements into one page, sprayed round-robin over 16
/// queues (a chunk of `hostsim bench`'s elem_gather): dealt, it would be one bucket
/// that one thread runs, after a pass over every descriptor; validated ahead, it runs
/// by queues instead, with the memory of the queues in order. So does its second half
/// moved 16 pages on (the same bucket); moved one page on, it is dealt.
#[test]
fn a_replay_into_one_bucket_is_not_dealt_even_ahead() {
    for (second_half, dealt) in [(0, false), (16, false), (1, true)] {
        let mut queues = vec![Vec::new(); 16];
        for i in 0..4096u64 {
            let src = (i * 7919) % 16384 * 4;
            let dst = (1 << 20) + i * 4 + (i / 2048) * second_half * PAGE;
            queues[(i % 16) as usize].push(copy(src, dst, 4));
        }
        let (mut f, mut want) = (fabric(), fabric());
        execute_sequential(&mut want, &queues).unwrap();
        let e = engine(3);
        let validated = e.validate(&f, queues).unwrap();
        let (report, ()) = e.run_beside(&mut f, &validated, |_| ()).unwrap();
        assert_eq!(report.execution.page_buckets, dealt, "{second_half}");
        assert_eq!(f.first_difference(&want), None);
    }
}

/// 16 queues of 600 rows each, dealt round-robin over 16 pages of 64-byte rows: far
/// more than a queue's channel holds on engine 2 (batches of 7, depth 1).
fn round_robin_gather() -> Vec<Vec<Descriptor>> {
    let rows = 16 * 600u64;
    let mut queues = vec![Vec::new(); 16];
    for i in 0..rows {
        let src = (i * 7919) % 4096 * 64;
        queues[(i % 16) as usize].push(copy(src, (1 << 20) + i * 64, 64));
    }
    queues
}

#[test]
fn a_round_robin_gather_longer_than_the_channels_is_page_buckets() {
    let queues = round_robin_gather();
    let (mut f, mut want) = (fabric(), fabric());
    execute_sequential(&mut want, &queues).unwrap();
    let report = engine(2).run(&mut f, &queues).unwrap();
    assert!(report.execution.page_buckets);
    assert_eq!(f.first_difference(&want), None);
    // past the most a replay dealt by page copies, it runs as queue segments
    let e = engine(2);
    let plan = e.plan(&f, &mut Slices::new(&queues)).unwrap();
    assert!(e.page_buckets(&queues, &plan, false).is_some());
    let huge = vec![vec![queues[0][0]; schedule::DEALT_MAX / 2 + 1]; 2];
    assert!(e.page_buckets(&huge, &plan, false).is_none());
}

/// Mailbox `k` is `[k * MAILBOX, +MAILBOX)`, below the groups. Every write to a mailbox
/// starts at its base, so any two overlap, and writers of one mailbox may sit in any
/// queue: only semaphores order them across queues.
const MAILBOX: u64 = 4096;
const MAILBOXES: u64 = GROUP_BASE / MAILBOX;

/// Engines with the race check on, by [`config`]'s `workers` (0 to 3).
fn checking_engine(workers: usize) -> &'static Engine {
    static ENGINES: OnceLock<[Engine; 4]> = OnceLock::new();
    let engines =
        ENGINES.get_or_init(|| [0, 1, 2, 3].map(|w| with(w, |c| c.race_check = RaceCheck::On)));
    &engines[workers]
}

/// Builds `queues` queues from `items` (group `g` to queue `g % queues`). An item with
/// a mailbox writes there instead of its group's region; when the mailbox's last
/// writer is in another queue `p`, queue `p`'s latest descriptor (at or after that
/// write) SIGNALs semaphore `p` and, if `ordered`, the item WAITs for that signal:
/// well-formed cross-queue orderings, chained through each mailbox's writers. Returns
/// the queues and each item's place, in generation order (a valid linearisation).
fn mailbox_queues(
    items: &[(Spec, Option<u64>)],
    queues: usize,
    ordered: bool,
) -> (Vec<Vec<Descriptor>>, Vec<(usize, usize)>) {
    let mut out: Vec<Vec<Descriptor>> = vec![Vec::new(); queues];
    let mut signals = vec![0u32; queues];
    let mut last_writer: [Option<usize>; MAILBOXES as usize] = [None; MAILBOXES as usize];
    let mut order = Vec::new();
    for (spec, mailbox) in items {
        let q = spec.group as usize % queues;
        let mut d = spec.descriptor();
        if let Some(k) = *mailbox {
            let at = FabricAddr(k * MAILBOX);
            d = Descriptor::cast(d.op(), d.src(), d.src_dtype(), at, d.len(), d.dtype()).unwrap();
            if let Some(p) = last_writer[k as usize].filter(|&p| p != q) {
                let last = out[p].last_mut().unwrap();
                if last.signal().is_none() {
                    *last = last.with_signal(sem(p as u8));
                    signals[p] += 1;
                }
                if ordered {
                    d = d.with_wait(wait(p as u8, signals[p]));
                }
            }
            last_writer[k as usize] = Some(q);
        }
        order.push((q, out[q].len()));
        out[q].push(d);
    }
    (out, order)
}

/// The lowest mailbox written from two different queues.
fn contested(items: &[(Spec, Option<u64>)], queues: usize) -> Option<u64> {
    (0..MAILBOXES).find(|&k| {
        let mut writers = items
            .iter()
            .filter(|(_, m)| *m == Some(k))
            .map(|(s, _)| s.group as usize % queues);
        writers
            .next()
            .is_some_and(|first| writers.any(|q| q != first))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn semaphore_ordered_queues_equal_the_references_and_pass_the_race_check(
        items in proptest::collection::vec(
            (arb_spec(), proptest::option::weighted(0.3, 0..MAILBOXES)),
            1..100,
        ),
        queues in 1..=16usize,
        workers in 0..=3usize,
    ) {
        let (sprayed, order) = mailbox_queues(&items, queues, true);
        let in_order: Vec<Descriptor> = order.iter().map(|&(q, i)| sprayed[q][i]).collect();
        let mut f = fabric();
        let report = checking_engine(workers).run(&mut f, &sprayed).unwrap();
        prop_assert_eq!(window(&f), reference(std::slice::from_ref(&in_order)));
        let mut g = fabric();
        execute_sequential(&mut g, &sprayed).unwrap();
        prop_assert_eq!(f.first_difference(&g), None);
        prop_assert_eq!(report.summary.descriptors, items.len() as u64);
        // the same writes without the WAITs: two queues writing one mailbox race
        let (loose, _) = mailbox_queues(&items, queues, false);
        let mut h = fabric();
        let result = checking_engine(workers).run(&mut h, &loose);
        match contested(&items, queues) {
            None => prop_assert!(result.is_ok(), "{:?}", result),
            Some(k) => {
                let Err(Error::Race { first_queue, second_queue, first_access, second_access, lo, .. }) = result else {
                    return Err(TestCaseError::fail(format!("no race: {result:?}")));
                };
                prop_assert_ne!(first_queue, second_queue);
                prop_assert_eq!((first_access, second_access), (AccessKind::Write, AccessKind::Write));
                prop_assert_eq!(lo, k * MAILBOX);
                prop_assert_eq!(h.first_difference(&fabric()), None);
            }
        }
    }
}

/// A fixed workload of 3000 descriptors over HBM, SBUF and PSUM: group `g` writes only
/// its own region and reads its own region or the shared one.
fn workload() -> Vec<(u64, Descriptor)> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..3000)
        .map(|_| {
            let r = next();
            let spec = Spec {
                group: r % GROUPS,
                op: DescOp::ALL[(r >> 8) as usize % 6],
                dtype: Dtype::ALL[(r >> 16) as usize % 9],
                // one in four casts (from a dtype that may be the same)
                src_dtype: Dtype::ALL[(r >> if r >> 40 & 3 == 0 { 32 } else { 16 }) as usize % 9],
                dst_off: next(),
                shared_src: r >> 24 & 1 == 1,
                src_off: next(),
                len: 1 + next() % MAX_LEN,
                element: next(),
            };
            let mut d = spec.descriptor();
            // groups 6 and 7 live in SBUF partition 9 and PSUM partition 2
            if spec.group >= 6 {
                let at = if spec.group == 6 {
                    SBUF_BASE + 9 * SBUF_STRIDE
                } else {
                    crate::addr::PSUM_BASE + 2 * crate::addr::PSUM_STRIDE
                };
                let off = d.dst().0 % 8192;
                let src = if d.op() == DescOp::Fill || spec.shared_src {
                    d.src()
                } else {
                    FabricAddr(at + d.src().0 % 8192)
                };
                let dst = FabricAddr(at + off);
                d = Descriptor::cast(d.op(), src, d.src_dtype(), dst, d.len(), d.dtype()).unwrap();
            }
            (spec.group, d)
        })
        .collect()
}

#[test]
fn any_queue_count_and_worker_count_gives_the_same_memory_and_report() {
    let descs = workload();
    let mut baseline = fabric();
    execute_sequential(&mut baseline, &spray(&descs, 1)).unwrap();
    let mut totals = Vec::new();
    for queues in [1, 2, 4, 16] {
        let sprayed = spray(&descs, queues);
        let mut summaries = Vec::new();
        for workers in [0, 1, 2, 3] {
            for batch in [1, 64, 4096] {
                let e = with(workers, |c| c.batch = batch);
                let mut f = fabric();
                let report = e.run(&mut f, &sprayed).unwrap();
                assert_eq!(
                    f.first_difference(&baseline),
                    None,
                    "{queues} {workers} {batch}"
                );
                assert_eq!(f.digest(), baseline.digest());
                f.assert_zero_outside_extents();
                summaries.push(report);
            }
        }
        assert!(summaries.iter().all(|r| r.summary == summaries[0].summary));
        let s = &summaries[0].summary;
        assert_eq!(s.queues.len(), queues);
        totals.push((s.descriptors, s.bytes, s.busy_ps, s.failed));
    }
    let bytes: u64 = descs.iter().map(|(_, d)| u64::from(d.len())).sum();
    let busy: u64 = descs
        .iter()
        .map(|(_, d)| TimingModel::new(GEN).descriptor_ps(d))
        .sum();
    assert!(
        totals.iter().all(|t| *t == (3000, bytes, busy, 0)),
        "{totals:?}"
    );
}

use crate::timing::{QueueTiming, TimingModel};

#[test]
fn the_report_times_each_queue_on_the_model() {
    let model = TimingModel::new(GEN);
    let queues = vec![
        vec![copy(SHARED, 0, 4096), fill(8192, 256, 1)],
        vec![copy(SHARED, 0x4000, 100)],
    ];
    let mut f = fabric();
    let r = engine(1).run(&mut f, &queues).unwrap().summary;
    let q0 = model.transfer_ps(4096, DescOp::Copy) + model.transfer_ps(256, DescOp::Fill);
    let q1 = model.transfer_ps(100, DescOp::Copy);
    assert_eq!(
        r.queues[0],
        QueueTiming {
            descriptors: 2,
            bytes: 4352,
            busy_ps: q0,
            end_ps: q0,
            spans: Vec::new(),
        }
    );
    assert_eq!(
        r.queues[1],
        QueueTiming {
            descriptors: 1,
            bytes: 100,
            busy_ps: q1,
            end_ps: q1,
            spans: Vec::new(),
        }
    );
    assert_eq!(
        (r.descriptors, r.bytes, r.busy_ps, r.makespan_ps),
        (3, 4452, q0 + q1, q0)
    );
    assert_eq!(r.generation, GEN);
}

#[test]
fn semaphores_order_a_cross_queue_read() {
    // queue 1 copies what queue 0 wrote, after queue 0's signal; both worker counts,
    // many times, with the race check on
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    for workers in [1, 2] {
        let e = with(workers, |c| c.race_check = RaceCheck::On);
        for _ in 0..20 {
            let mut f = fabric();
            f.write(FabricAddr(SHARED), &data).unwrap();
            let queues = vec![
                vec![
                    fill(0x100, 64, 0),
                    copy(SHARED, 0x8000, 4096).with_signal(sem(5)),
                ],
                vec![copy(0x8000, 0x3_0000, 4096).with_wait(wait(5, 1))],
            ];
            e.run(&mut f, &queues).unwrap();
            let mut out = vec![0; 4096];
            f.read(FabricAddr(0x3_0000), &mut out).unwrap();
            assert_eq!(out, data);
        }
    }
}

/// Runs `queues` expecting an error, and checks the fabric did not change.
fn rejected(e: &Engine, queues: &[Vec<Descriptor>]) -> Error {
    let mut f = fabric();
    f.write(FabricAddr(SBUF_BASE + 5 * SBUF_STRIDE), &[0xab; 300])
        .unwrap();
    let before = f.clone();
    let err = e.run(&mut f, queues).unwrap_err();
    assert_eq!(f.first_difference(&before), None, "{err}");
    assert_eq!(f.digest(), before.digest());
    err
}

/// Queues whose first descriptors would change memory, then `bad` in queue 1 at index 2.
fn with_bad(bad: Descriptor) -> Vec<Vec<Descriptor>> {
    vec![
        vec![fill(0, 4096, 0x11), copy(SHARED, 0x5000, 512)],
        vec![
            fill(0x9000, 64, 0x22),
            fill(0x9100, 64, 0x33),
            bad,
            fill(0x9200, 64, 0x44),
        ],
    ]
}

fn assert_bad(err: Error, what: &str) -> Error {
    let Error::ReplayDescriptor {
        queue,
        index,
        what: w,
        source,
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!((queue, index, w), (1, 2, what));
    *source
}

#[test]
fn a_bad_source_rejects_the_replay() {
    let gap = GEN.hbm_bytes() + 0x40; // past HBM, below SBUF
    let err = rejected(engine(2), &with_bad(copy(gap, 0x100, 8)));
    assert!(
        err.to_string()
            .contains("queue 1 descriptor 2: source range"),
        "{err}"
    );
    assert_eq!(
        assert_bad(err, "source range"),
        Error::Unmapped { addr: gap }
    );
}

#[test]
fn a_bad_destination_rejects_the_replay() {
    let end = GEN.hbm_bytes() - 4;
    let src = assert_bad(
        rejected(engine(1), &with_bad(copy(0, end, 8))),
        "destination range",
    );
    assert!(
        matches!(src, Error::OutOfRegion { addr, len: 8, .. } if addr == end),
        "{src:?}"
    );
}

#[test]
fn a_partition_crossing_rejects_the_replay() {
    let p5 = SBUF_BASE + 5 * SBUF_STRIDE;
    let last = p5 + GEN.sbuf_partition_bytes() - 16;
    let err = rejected(engine(2), &with_bad(copy(p5, last, 32)));
    assert!(matches!(
        assert_bad(err, "destination range"),
        Error::OutOfRegion { .. }
    ));
    let err = rejected(engine(2), &with_bad(copy(last, p5, 32)));
    assert!(matches!(
        assert_bad(err, "source range"),
        Error::OutOfRegion { .. }
    ));
}

#[test]
fn a_race_is_reported_before_anything_runs() {
    let e = with(2, |c| c.race_check = RaceCheck::On);
    let err = rejected(&e, &with_bad(fill(0x80, 64, 0x55)));
    let want = Error::Race {
        first_queue: 0,
        first_from: 0,
        first_to: 0,
        first_access: AccessKind::Write,
        second_queue: 1,
        second_from: 2,
        second_to: 2,
        second_access: AccessKind::Write,
        lo: 0x80,
        end: 0xbf,
    };
    assert_eq!(err, want);
    // a read of another queue's destination is a race too
    let err = rejected(&e, &with_bad(copy(0x5100, 0x9400, 16)));
    assert!(
        matches!(
            err,
            Error::Race {
                first_access: AccessKind::Write,
                second_access: AccessKind::Read,
                lo: 0x5100,
                ..
            }
        ),
        "{err:?}"
    );
    // without the check the DGE's promise is trusted and the replay runs
    let mut f = fabric();
    assert!(engine(2)
        .run(&mut f, &with_bad(fill(0x80, 64, 0x55)))
        .is_ok());
}

#[test]
fn a_wait_cycle_is_a_deadlock() {
    let queues = vec![
        vec![
            fill(0, 64, 1),
            fill(64, 8, 2).with_wait(wait(1, 1)).with_signal(sem(0)),
        ],
        vec![
            fill(0x9000, 64, 3),
            fill(0x9100, 8, 4).with_wait(wait(0, 1)).with_signal(sem(1)),
        ],
    ];
    let want = Error::SemaphoreDeadlock {
        queue: 0,
        index: 1,
        sem: 1,
        count: 1,
        reached: 0,
    };
    assert_eq!(rejected(engine(1), &queues), want);
    assert_eq!(
        rejected(&with(2, |c| c.race_check = RaceCheck::On), &queues),
        want
    );
}

#[test]
fn a_wait_never_reached_is_rejected() {
    let queues = vec![
        vec![fill(0, 64, 1).with_signal(sem(2))],
        vec![
            fill(0x9000, 64, 3),
            fill(0x9100, 8, 4).with_wait(wait(2, 2)),
        ],
    ];
    let want = Error::SemaphoreNeverReached {
        sem: 2,
        count: 2,
        queue: 1,
        index: 1,
        signals: 1,
    };
    assert_eq!(rejected(engine(2), &queues), want);
}

#[test]
fn a_semaphore_signalled_by_two_queues_is_rejected() {
    let queues = vec![
        vec![fill(0, 64, 1).with_signal(sem(2))],
        vec![fill(0x9000, 64, 3), fill(0x9100, 8, 4).with_signal(sem(2))],
    ];
    let want = Error::SemaphoreOwner {
        sem: 2,
        queue: 1,
        index: 1,
        owner: 0,
    };
    assert_eq!(rejected(engine(1), &queues), want);
}

#[test]
fn queue_counts_beyond_the_rings_are_rejected() {
    let e = with(1, |c| c.queues = 2);
    let three = vec![vec![fill(0, 8, 1)]; 3];
    assert_eq!(rejected(&e, &three), Error::QueueCount { count: 3, max: 2 });
    assert_eq!(rejected(&e, &[]), Error::QueueCount { count: 0, max: 2 });
}

#[test]
fn config_fields_are_checked() {
    let bad = [
        (
            EngineConfig {
                queues: 17,
                ..config(1)
            },
            "queues",
            17,
        ),
        (
            EngineConfig {
                queues: 0,
                ..config(1)
            },
            "queues",
            0,
        ),
        (
            EngineConfig {
                workers: 0,
                ..config(1)
            },
            "workers",
            0,
        ),
        (
            EngineConfig {
                batch: 8193,
                ..config(1)
            },
            "batch",
            8193,
        ),
        (
            EngineConfig {
                channel_depth: 0,
                ..config(1)
            },
            "channel_depth",
            0,
        ),
    ];
    for (c, field, value) in bad {
        let e = Engine::new(c).unwrap_err();
        assert!(
            matches!(e, Error::EngineConfig { field: f, value: v, .. } if f == field && v == value),
            "{e:?}"
        );
    }
    assert_eq!(EngineConfig::default().check(), Ok(()));
    assert_eq!(engine(2).config().workers, 2);
}

#[test]
fn the_engine_may_be_called_from_async_code() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let queues = vec![vec![fill(0x40, 8, 9)]];
    for workers in [0, 1] {
        let mut f = fabric();
        let r = rt
            .block_on(async { engine(workers).run(&mut f, &queues) })
            .unwrap();
        assert_eq!(r.summary.bytes, 8);
        let mut out = [0u8; 8];
        f.read(FabricAddr(0x40), &mut out).unwrap();
        assert_eq!(out, [9; 8]);
    }
}

#[test]
fn small_replays_run_on_the_caller_and_larger_ones_and_those_beside_work_on_the_workers() {
    let limit = InlineLimit {
        descriptors: 4,
        bytes: 64,
    };
    assert!(limit.admits(4, 64) && limit.admits(0, 0));
    assert!(!limit.admits(5, 1) && !limit.admits(1, 65));
    assert!(InlineLimit::OFF.admits(0, 0) && !InlineLimit::OFF.admits(1, 1));
    let e = with(2, |c| c.inline = limit);
    // the limit decides where a replay runs, with semaphores or without
    let signalled = |d: Descriptor| d.with_signal(sem(0));
    let small = vec![vec![signalled(fill(0x40, 8, 9))], vec![fill(0x80, 8, 7)]];
    let many = vec![(0..5)
        .map(|i| signalled(fill(0x40 + 8 * i, 8, 1)))
        .collect()];
    let wide = vec![vec![signalled(fill(0x40, 65, 3))]];
    // without one, the same
    let plain = vec![vec![fill(0x40, 8, 9)], vec![fill(0x80, 8, 7)]];
    let plain_many = vec![(0..5).map(|i| fill(0x40 + 8 * i, 8, 1)).collect()];
    for (queues, workers) in [
        (small, 1),
        (many, 2),
        (wide, 2),
        (plain, 1),
        (plain_many, 2),
    ] {
        let mut f = fabric();
        let report = e.run(&mut f, &queues).unwrap();
        assert_eq!(report.execution.workers, workers);
        let mut g = fabric();
        execute_sequential(&mut g, &queues).unwrap();
        assert_eq!(f.first_difference(&g), None);
        // work beside a replay overlaps it: the limit is not run_beside's
        let mut h = fabric();
        let validated = e.validate(&h, queues.clone()).unwrap();
        let (beside, ()) = e.run_beside(&mut h, &validated, |_| ()).unwrap();
        assert_eq!(beside.execution.workers, 2);
        assert_eq!(h.first_difference(&g), None);
    }
}

fn file_of(
    generation: Generation,
    queues: &[Vec<Descriptor>],
) -> VerifiedQueueFile<Cursor<Vec<u8>>> {
    let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), generation, queues.len()).unwrap();
    for (q, descs) in queues.iter().enumerate() {
        for d in descs {
            w.push(q, d).unwrap();
        }
    }
    let bytes = w.finish().unwrap().into_inner();
    VerifiedQueueFile::open(Cursor::new(bytes)).unwrap()
}

/// A queue whose first descriptor waits for the last of another holds at most one window
/// (and the next read while one runs), however long the other is: reading ahead stops at
/// a window's worth of what a queue still holds.
#[test]
fn a_blocked_queue_of_a_file_holds_at_most_a_window() {
    const WINDOW: usize = 8 * 2;
    let n = 20 * WINDOW as u64;
    let mut waiting: Vec<Descriptor> = (0..n).map(|i| fill(i % 64 * 8, 8, 1)).collect();
    waiting[0] = waiting[0].with_wait(wait(0, 1));
    let mut other: Vec<Descriptor> = (0..n).map(|i| fill(0x1000 + i % 64 * 8, 8, 2)).collect();
    if let Some(last) = other.last_mut() {
        *last = last.with_signal(sem(0));
    }
    let queues = vec![waiting, other];
    let e = with(2, |c| {
        c.batch = 8;
        c.channel_depth = 2;
    });
    let mut f = fabric();
    let report = e.replay_file(&mut f, &mut file_of(GEN, &queues)).unwrap();
    let mut want = fabric();
    e.run(&mut want, &queues).unwrap();
    assert_eq!(f.first_difference(&want), None);
    // each queue: a window held and the next read beside it
    assert!(
        report.execution.max_buffered <= 2 * 2 * WINDOW,
        "{report:?}"
    );
}

#[test]
fn a_file_replays_like_its_queues_in_memory() {
    let queues = spray(&workload(), 4);
    let mut file = file_of(GEN, &queues);
    let (mut a, mut b) = (fabric(), fabric());
    let from_file = engine(2).replay_file(&mut a, &mut file).unwrap();
    let in_memory = engine(1).run(&mut b, &queues).unwrap();
    assert_eq!(from_file.summary, in_memory.summary);
    assert_eq!(a.first_difference(&b), None);
    // a second replay of the same (rewound) file gives the same report
    let again = engine(1).replay_file(&mut fabric(), &mut file).unwrap();
    assert_eq!(again.summary, in_memory.summary);
}

#[test]
fn a_bad_file_descriptor_or_generation_changes_nothing() {
    let mut file = file_of(GEN, &with_bad(copy(GEN.hbm_bytes() + 0x40, 0x100, 8)));
    let mut f = fabric();
    let before = f.clone();
    let err = engine(2).replay_file(&mut f, &mut file).unwrap_err();
    assert_bad(err, "source range");
    assert_eq!(f.first_difference(&before), None);
    let mut other = file_of(Generation::Mariana, &[vec![fill(0, 8, 1)]]);
    let err = engine(2).replay_file(&mut f, &mut other).unwrap_err();
    assert_eq!(
        err,
        Error::GenerationMismatch {
            file: "mariana",
            fabric: "cayman"
        }
    );
    assert_eq!(f.first_difference(&before), None);
}

/// 1 048 576 fills in 4 queues of a file: the replay holds a bounded window only.
#[test]
fn a_large_file_replays_in_a_bounded_window() {
    const N: u64 = 1 << 18; // per queue
    const SLOTS: u64 = 1024;
    let base = |q: u64| q * SLOTS * 64;
    let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), GEN, 4).unwrap();
    for q in 0..4 {
        for i in 0..N {
            w.push(
                q as usize,
                &fill(base(q) + i % SLOTS * 64, 64, (i + q) & 0xff),
            )
            .unwrap();
        }
    }
    let bytes = w.finish().unwrap().into_inner();
    let mut file = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
    let e = with(2, |c| {
        c.queues = 4;
        c.batch = 1024;
        c.channel_depth = 2;
    });
    let mut f = Fabric::new(GEN);
    let report = e.replay_file(&mut f, &mut file).unwrap();
    assert_eq!(
        (report.summary.descriptors, report.summary.bytes),
        (4 * N, 4 * N * 64)
    );
    // windows of 2 batches of 1024 per queue, one unit per queue each, the next window
    // read while one runs
    assert_eq!(report.execution.units, 4 * N / 2048);
    assert_eq!(report.execution.max_buffered, 2 * 4 * 2 * 1024);
    assert!(file.max_buffered() <= MAX_BATCH);
    // slot j of queue q was last written by i = j + SLOTS * ((N - 1 - j) / SLOTS)
    for (q, j) in [(0, 0), (1, 5), (2, 1023), (3, 700)] {
        let i = j + SLOTS * ((N - 1 - j) / SLOTS);
        let mut out = [0u8; 64];
        f.read(FabricAddr(base(q) + j * 64), &mut out).unwrap();
        assert_eq!(out, [((i + q) & 0xff) as u8; 64], "queue {q} slot {j}");
    }
}

/// Serves one file image until `after` seeks, then another of the same length: a file
/// rewritten between the validation pass and the execution pass.
struct Rewritten {
    now: Cursor<Vec<u8>>,
    later: Vec<u8>,
    seeks: usize,
    after: usize,
}

impl std::io::Read for Rewritten {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.now.read(buf)
    }
}

impl std::io::Seek for Rewritten {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.seeks += 1;
        if self.seeks > self.after && !self.later.is_empty() {
            let at = self.now.position();
            self.now = Cursor::new(std::mem::take(&mut self.later));
            self.now.set_position(at);
        }
        self.now.seek(pos)
    }
}

/// A WAIT raised past its signals after verification: whichever pass reads the
/// rewritten chunk refuses it (never a hang, never an unvalidated descriptor run), and
/// a rewrite seen by the validation pass changes nothing.
#[test]
fn a_file_rewritten_mid_replay_is_refused_by_its_chunk_digests() {
    use zerocopy::IntoBytes;
    let signal = copy(0x100, 0x9000, 64).with_signal(sem(1));
    let (ok, bad) = (
        copy(0x200, 0xa000, 64).with_wait(wait(1, 1)),
        copy(0x200, 0xa000, 64).with_wait(wait(1, 2)),
    );
    let queues = [vec![signal], vec![ok]];
    let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), GEN, 2).unwrap();
    for (q, descs) in queues.iter().enumerate() {
        descs.iter().for_each(|d| w.push(q, d).unwrap());
    }
    let image = w.finish().unwrap().into_inner();
    let (from, to) = (ok.encode(), bad.encode());
    let at = image
        .windows(32)
        .position(|x| x == from.as_bytes())
        .unwrap();
    let later = [&image[..at], to.as_bytes(), &image[at + 32..]].concat();
    let want = Error::QueueFileChanged {
        queue: 1,
        chunk: 0,
        first: 0,
        offset: crate::queue_file::HEADER_BYTES + 32,
    };
    let (mut refused, mut untouched) = (0, 0);
    for (after, future) in (1..8).flat_map(|a| [(a, false), (a, true)]) {
        let r = Rewritten {
            now: Cursor::new(image.clone()),
            later: later.clone(),
            seeks: 0,
            after,
        };
        let mut file = VerifiedQueueFile::open(r).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (f, out) = match future {
                false => {
                    let mut f = fabric();
                    let out = engine(2).replay_file(&mut f, &mut file);
                    (f, out)
                }
                // the async face: the same refusal
                true => {
                    let e = Arc::new(with(2, |_| ()));
                    let (f, _, out) = runtime(0).block_on(e.replay_file_async(fabric(), file));
                    (f, out)
                }
            };
            let _ = tx.send((out.map(|_| ()), f));
        });
        let (out, f) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("replay hung");
        match out {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, want, "after {after}");
                // queue 1's copy never ran, whatever happened to queue 0's
                let w = window(&f);
                assert_eq!(w[0xa000..0xa040], self::image()[0xa000..0xa040]);
                refused += 1;
                untouched += usize::from(f.first_difference(&fabric()).is_none());
            }
        }
    }
    assert!(refused >= 4, "{refused}");
    assert!(untouched >= 2, "no rewrite reached the validation pass");
}

/// `queues` with semaphores: every 50th descriptor of queue 0 signals 1, and the
/// `k`-th 50th of each other queue waits for its `k`-th signal (as many as there are).
fn with_semaphores(mut queues: Vec<Vec<Descriptor>>) -> Vec<Vec<Descriptor>> {
    let Some((first, rest)) = queues.split_first_mut() else {
        return queues;
    };
    let mut signals = 0;
    for d in first.iter_mut().step_by(50) {
        *d = d.with_signal(sem(1));
        signals += 1;
    }
    for queue in rest {
        for (k, d) in (1..=signals).zip(queue.iter_mut().step_by(50)) {
            *d = d.with_wait(wait(1, k));
        }
    }
    queues
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    match threads {
        0 => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(threads);
            b
        }
    }
    .build()
    .unwrap()
}

/// The futures give the fabric and report the synchronous calls give, for queue
/// counts, worker counts and batch sizes, with semaphores and without.
#[test]
fn the_async_face_gives_the_same_memory_and_report_as_the_sync_calls() {
    let descs = workload();
    for (queues, semaphores) in [(1, false), (2, true), (4, false), (4, true), (16, true)] {
        let mut sprayed = spray(&descs, queues);
        if semaphores {
            sprayed = with_semaphores(sprayed);
        }
        for workers in [0, 1, 2, 3] {
            let e = Arc::new(with(workers, |c| c.batch = 1 + 31 * (queues % 3)));
            let rt = runtime(workers % 2);
            let mut sync = fabric();
            let want = e.run(&mut sync, &sprayed).unwrap();
            let mut sync_file = fabric();
            let mut file = file_of(GEN, &sprayed);
            let want_file = e.replay_file(&mut sync_file, &mut file).unwrap();
            assert_eq!(sync_file.first_difference(&sync), None);

            let (f, got) = rt.block_on(e.replay_async(fabric(), sprayed.clone()));
            let got = got.unwrap();
            let at = format!("{queues} queues, {workers} workers, {semaphores}");
            assert_eq!(f.first_difference(&sync), None, "{at}");
            assert_eq!(f.digest(), sync.digest(), "{at}");
            assert_eq!(got.summary, want.summary, "{at}");

            let (f, file, got) = rt.block_on(e.replay_file_async(fabric(), file));
            let got = got.unwrap();
            assert_eq!(f.first_difference(&sync), None, "{at}");
            assert_eq!(f.digest(), sync_file.digest(), "{at}");
            assert_eq!(got.summary, want_file.summary, "{at}");
            let measured = |r: &ReplayReport| (r.execution.units, r.execution.max_buffered);
            assert_eq!(measured(&got), measured(&want_file), "{at}");
            // the file comes back rewound: it replays again
            let (_, _, again) = rt.block_on(e.replay_file_async(fabric(), file));
            assert_eq!(again.unwrap().summary, want_file.summary, "{at}");
        }
    }
}

/// A bad file through the futures: the sync calls' error, the fabric unchanged.
#[test]
fn a_bad_file_through_the_async_face_gives_the_sync_error() {
    let e = Arc::new(with(2, |_| ()));
    let rt = runtime(1);
    let bad = with_bad(copy(GEN.hbm_bytes() + 0x40, 0x100, 8));
    let want = engine(2).replay_file(&mut fabric(), &mut file_of(GEN, &bad));
    let (f, _, got) = rt.block_on(e.replay_file_async(fabric(), file_of(GEN, &bad)));
    assert_eq!(got.map(|_| ()), want.map(|_| ()));
    assert_eq!(f.first_difference(&fabric()), None);
    let (f, got) = rt.block_on(e.replay_async(fabric(), bad));
    assert_bad(got.unwrap_err(), "source range");
    assert_eq!(f.first_difference(&fabric()), None);
    let other = file_of(Generation::Mariana, &[vec![fill(0, 8, 1)]]);
    let (f, _, got) = rt.block_on(e.replay_file_async(fabric(), other));
    assert_eq!(
        got.unwrap_err(),
        Error::GenerationMismatch {
            file: "mariana",
            fabric: "cayman"
        }
    );
    assert_eq!(f.first_difference(&fabric()), None);
}
