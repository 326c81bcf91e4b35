//! Running descriptors on the fabric: one descriptor through a page-lock cache, and one
//! unit of a [`Schedule`](super::schedule::Schedule) in order (what each executor worker
//! does with the unit it claims).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::addr::{FabricAddr, RegionCache};
use crate::block::{Block, Rows};
use crate::compute::ComputeOp;
use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::fabric::{Fabric, PageLocks};

use super::cast::execute_cast;
use super::schedule::Unit;
use super::validate::replay_error;

/// The pattern a FILL repeats: its element's `dtype.size()` little-endian bytes.
pub(crate) fn with_fill_pattern<T>(d: &Descriptor, f: impl FnOnce(&[u8]) -> T) -> T {
    let element = d.src().0.to_le_bytes();
    f(element.get(..d.dtype().size()).unwrap_or(&element))
}

/// Executes one descriptor through the fabric's shared forms, on the lock cache of its
/// unit. The caller reserved the destination pages; the fabric checks both ranges again
/// before writing anything.
pub(crate) fn execute_descriptor<const R: usize>(
    locks: &mut PageLocks<'_, R>,
    d: &Descriptor,
) -> Result<(), Error> {
    let len = u64::from(d.len());
    match d.op().compute_op() {
        _ if d.is_cast() => execute_cast(locks, d),
        None => with_fill_pattern(d, |p| locks.fill(d.dst(), len, p)),
        Some(ComputeOp::None) => locks.copy(d.src(), d.dst(), len),
        Some(op) => locks.reduce(d.src(), d.dst(), len, d.dtype(), op),
    }
}

/// How many descriptors ahead of the one executing a unit prefetches.
const PREFETCH_AHEAD: usize = 8;

/// Prefetches what `d` will read (if `src` asks, and it reads: a fill does not) and write
/// (if `dst` asks).
#[inline(always)]
fn prefetch<const R: usize>(locks: &mut PageLocks<'_, R>, d: &Descriptor, [src, dst]: [bool; 2]) {
    if src && d.op().compute_op().is_some() {
        locks.prefetch(d.src(), d.len());
    }
    if dst {
        locks.prefetch(d.dst(), d.len());
    }
}

/// Runs one unit of a schedule on `fabric` (its destinations reserved), in order, through
/// one [`PageLocks`] ([`run_each`], or for a block's short rows [`PageLocks::gather`]).
/// Adds the descriptors that ran to `ran`, and traces the unit's end. An error names the
/// descriptor's queue and index ([`Unit::at`]).
pub(crate) fn run_unit(
    fabric: &Fabric,
    unit: &Unit<'_>,
    ran: &AtomicU64,
) -> Result<(), ((usize, u64), Error)> {
    let mut locks = fabric.run_locks();
    let done = match unit {
        Unit::Rows(block, rows) => run_rows(fabric, &mut locks, block, rows.clone()),
        _ => {
            let run = unit.descriptors();
            run_each(&mut locks, [true; 2], run.len(), |i| run[i])
        }
    };
    if let Err((i, e)) = done {
        ran.fetch_add(i as u64, Ordering::Relaxed);
        let (queue, index) = unit.at(i);
        return Err(((queue, index), replay_error(queue, index, "execution", e)));
    }
    ran.fetch_add(unit.len() as u64, Ordering::Relaxed);
    // a unit is named by its first descriptor's (queue, index)
    tracing::trace!(unit = ?unit.at(0), descriptors = unit.len(), "unit done");
    Ok(())
}

/// Runs descriptors `desc(0..n)` in order, so that consecutive descriptors on the same
/// pages keep them locked; the locks are released at each SIGNAL, since the unit waiting
/// for it likely touches these pages next. Each descriptor prefetches the sides `fetch`
/// asks (source, destination) of the one [`PREFETCH_AHEAD`] after it, and the first ones
/// are prefetched before the loop, so that a short unit (a page bucket of a few dozen
/// scattered rows) does not wait for its first rows one by one. On failure, the failing
/// descriptor's position and its error.
#[inline(always)]
fn run_each<const R: usize>(
    locks: &mut PageLocks<'_, R>,
    fetch: [bool; 2],
    n: usize,
    desc: impl Fn(usize) -> Descriptor,
) -> Result<(), (usize, Error)> {
    for i in 0..n.min(PREFETCH_AHEAD) {
        prefetch(locks, &desc(i), fetch);
    }
    for i in 0..n {
        if i + PREFETCH_AHEAD < n {
            prefetch(locks, &desc(i + PREFETCH_AHEAD), fetch);
        }
        // Validation proved the ranges and reserved the pages.
        let d = desc(i);
        execute_descriptor(locks, &d).map_err(|e| (i, e))?;
        if d.signal().is_some() {
            locks.release();
        }
    }
    Ok(())
}

/// The longest row [`run_rows`] gathers ([`PageLocks::gather`]) rather than copies.
const GATHER_ROW: usize = 64;

/// Runs `rows` of `block` (validated whole, so in any order): plain copies of short rows
/// to consecutive ones inside one region gathered, every other row as its descriptor
/// ([`run_each`]). On failure, the failing row's position in `rows` and its error.
fn run_rows<const R: usize>(
    fabric: &Fabric,
    locks: &mut PageLocks<'_, R>,
    block: &Block,
    rows: Range<usize>,
) -> Result<(), (usize, Error)> {
    let (d, first) = (block.template(), rows.start);
    let (src, dst) = block.sides();
    let row = u64::from(d.len());
    // small rows: a call to copy each costs more than the bytes; gathered, they are
    // written as one range, which must lie in one region (rows apart in neighbouring
    // partitions are each in theirs)
    let one_region = || {
        let (at, bytes) = (dst.addr(first), rows.len() as u64 * row);
        RegionCache::default().holds(fabric.map(), at, at + (bytes - 1))
    };
    let plain = d.op().compute_op() == Some(ComputeOp::None) && !d.is_cast();
    let consecutive = matches!(dst, Rows::Strided { stride, .. } if *stride == row);
    if plain && consecutive && row as usize <= GATHER_ROW && one_region() {
        let to = FabricAddr(dst.addr(first));
        let gathered = locks.gather(rows, |i| src.addr(i), row as usize, to);
        return gathered.map_err(|(i, e)| (i - first, e));
    }
    // a strided side's rows follow one another, as the hardware prefetcher or the cache
    // has them (a tile's rows, an output): only listed sides are prefetched
    let fetch = [src, dst].map(|r| matches!(r, Rows::Listed(_)));
    run_each(locks, fetch, rows.len(), |i| block.descriptor(first + i))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::{DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use crate::engine::execute_sequential;
    use crate::engine::executor;
    use crate::engine::pool::ThreadPool;
    use crate::engine::schedule::Schedule;
    use crate::generation::Generation;
    use std::num::NonZeroU32;

    /// Runs `queues` (as page buckets, grouped, if `by_page`, else as queue segments) on
    /// `fabric` with the executor, on the caller and `pool`: the outcome, the workers and
    /// the descriptors that ran.
    fn run(
        pool: Option<&ThreadPool>,
        fabric: &Fabric,
        queues: &[Vec<Descriptor>],
        by_page: bool,
    ) -> (Result<(), Error>, usize, u64) {
        let schedule = match by_page {
            true => Schedule::page_buckets(queues, true, &Default::default()),
            false => match Schedule::segments(queues) {
                Ok(s) => s,
                Err(e) => return (Err(e), 0, 0),
            },
        };
        let ran = AtomicU64::new(0);
        let run = |u: &Unit<'_>| run_unit(fabric, u, &ran);
        let (outcome, workers) = executor::execute(&schedule, run, |job| match pool {
            Some(c) => c.run(job, || ()).0,
            None => {
                job();
                1
            }
        });
        (outcome, workers, ran.into_inner())
    }

    /// A pool of `helpers` threads.
    fn pool(helpers: usize) -> ThreadPool {
        ThreadPool::new(helpers).unwrap()
    }

    fn wait(sem: SemId, count: u32) -> SemWait {
        SemWait {
            sem,
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    #[test]
    fn fills_use_the_element_bytes() {
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(0), 16).unwrap();
        let d = Descriptor::fill(FabricAddr(2), 8, Dtype::U16, 0xbeef).unwrap();
        execute_descriptor(&mut f.page_locks(), &d).unwrap();
        let mut out = [0u8; 12];
        f.read(FabricAddr(0), &mut out).unwrap();
        assert_eq!(
            out,
            [0, 0, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0, 0]
        );
        let unreserved = Descriptor::fill(FabricAddr(1 << 20), 4, Dtype::U8, 1).unwrap();
        assert!(matches!(
            execute_descriptor(&mut f.page_locks(), &unreserved),
            Err(Error::NotReserved { .. })
        ));
    }

    #[test]
    fn semaphores_hold_a_queue_until_signalled() {
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(0), &[5; 8]).unwrap();
        f.reserve(FabricAddr(0x100), 16).unwrap();
        let sem = SemId::new(4).unwrap();
        let copy = |s: u64, d: u64| {
            Descriptor::new(DescOp::Copy, FabricAddr(s), FabricAddr(d), 8, Dtype::U8).unwrap()
        };
        // queue 0 copies what queue 1 writes, after queue 1's signal: on one worker, queue
        // 0's unit comes first and must wait
        let queues = vec![
            vec![copy(0x100, 0x108).with_wait(wait(sem, 1))],
            vec![copy(0, 0x100).with_signal(sem)],
        ];
        let (outcome, workers, ran) = run(None, &f, &queues, false);
        assert_eq!((outcome, workers, ran), (Ok(()), 1, 2));
        let mut out = [0u8; 8];
        f.read(FabricAddr(0x108), &mut out).unwrap();
        assert_eq!(out, [5; 8]);
    }

    #[test]
    fn a_failing_queue_stops_the_run_before_its_waiters() {
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(0), &[9; 4]).unwrap();
        let sem = SemId::new(0).unwrap();
        // queue 1's destination was never reserved: it fails before signalling, so queue
        // 0's wait is never met and it does not run
        let fill = |at: u64| Descriptor::fill(FabricAddr(at), 4, Dtype::U8, 1).unwrap();
        let queues = vec![
            vec![fill(0).with_wait(wait(sem, 1))],
            vec![fill(1 << 30).with_signal(sem)],
        ];
        let (e, _, ran) = run(Some(&pool(1)), &f, &queues, false);
        let Err(Error::ReplayDescriptor {
            queue,
            index,
            what,
            source,
        }) = e
        else {
            panic!("{e:?}")
        };
        assert_eq!((queue, index, what, ran), (1, 0, "execution", 0));
        assert!(matches!(*source, Error::NotReserved { .. }));
        let mut out = [0u8; 4];
        f.read(FabricAddr(0), &mut out).unwrap();
        assert_eq!(out, [9; 4]);
    }

    /// A wait past every signal (which validation rejects) is refused when the schedule
    /// is made, before anything runs.
    #[test]
    fn a_wait_no_signal_can_meet_fails_instead_of_hanging() {
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(0), 64).unwrap();
        let sem = SemId::new(2).unwrap();
        let fill = |at: u64| Descriptor::fill(FabricAddr(at), 8, Dtype::U8, 3).unwrap();
        let queues = vec![
            vec![fill(0).with_signal(sem)],
            vec![fill(8), fill(16).with_wait(wait(sem, 2)), fill(24)],
        ];
        let want = Error::SemaphoreDeadlock {
            queue: 1,
            index: 1,
            sem: 2,
            count: 2,
            reached: 1,
        };
        assert_eq!(run(None, &f, &queues, false).0, Err(want));
        let mut out = [0u8; 32];
        f.read(FabricAddr(0), &mut out).unwrap();
        assert_eq!(out, [0; 32]);
    }

    /// Four queues of fills and copies over one reserved 64 KiB window.
    fn four_queues() -> Vec<Vec<Descriptor>> {
        (0..4u64)
            .map(|q| {
                (0..300u64)
                    .map(|i| match i % 3 {
                        0 => {
                            Descriptor::fill(FabricAddr(q * 0x4000 + i * 8), 8, Dtype::U8, i & 0xff)
                                .unwrap()
                        }
                        _ => Descriptor::new(
                            DescOp::Copy,
                            FabricAddr(q * 0x4000 + (i - 1) * 8),
                            FabricAddr(q * 0x4000 + 0x2000 + i * 8),
                            8,
                            Dtype::U8,
                        )
                        .unwrap(),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn queues_run_on_the_pool_equal_them_in_order() {
        let queues = four_queues();
        let mut want = Fabric::new(Generation::Cayman);
        let (mut together, mut alone) = (want.clone(), want.clone());
        for f in [&mut together, &mut alone] {
            f.reserve(FabricAddr(0), 0x10000).unwrap();
        }
        execute_sequential(&mut want, &queues).unwrap();
        let (outcome, workers, ran) = run(Some(&pool(1)), &together, &queues, false);
        assert_eq!((outcome, workers, ran), (Ok(()), 2, 1200));
        assert_eq!(together.first_difference(&want), None);
        // without a thread pool the caller runs them all, to the same memory
        let (outcome, workers, _) = run(None, &alone, &queues, false);
        assert_eq!((outcome, workers), (Ok(()), 1));
        assert_eq!(alone.first_difference(&want), None);
        let mut out = [0u8; 8];
        // copy 4 of queue 3 moved what fill 3 wrote
        together
            .read(FabricAddr(3 * 0x4000 + 0x2000 + 32), &mut out)
            .unwrap();
        assert_eq!(out, [3; 8]);
    }

    /// `queues` with descriptor 5 of queue 1 and descriptor 0 of queue 3 replaced by a fill
    /// of a page no test reserves (it fails when it executes).
    fn with_two_unreserved(mut queues: Vec<Vec<Descriptor>>) -> Vec<Vec<Descriptor>> {
        let unreserved = Descriptor::fill(FabricAddr(1 << 30), 4, Dtype::U8, 1).unwrap();
        queues[1][5] = unreserved;
        queues[3][0] = unreserved;
        queues
    }

    #[test]
    fn a_run_returns_the_first_failing_queue_and_keeps_what_ran() {
        let queues = with_two_unreserved(four_queues());
        let pool = pool(1);
        for _ in 0..10 {
            let mut f = Fabric::new(Generation::Cayman);
            f.reserve(FabricAddr(0), 0x10000).unwrap();
            let (e, _, ran) = run(Some(&pool), &f, &queues, false);
            let Err(Error::ReplayDescriptor { queue, index, .. }) = e else {
                panic!("{e:?}")
            };
            assert_eq!((queue, index), (1, 5));
            // queue 3 fails at once; queue 1 runs 5 descriptors; the others may or may
            // not have run when the failures stopped the claiming
            assert!((5..=5 + 2 * 300).contains(&ran), "{ran}");
            // what queue 1 did before its failure is there
            let mut out = [0u8; 8];
            f.read(FabricAddr(0x4000 + 3 * 8), &mut out).unwrap();
            assert_eq!(out, [3; 8]);
        }
    }

    /// Four round-robin queues gathering 64-byte rows from a table at 0 (not written) to
    /// rows at 1 MiB, over several pages, each queue also adding twice into its own row
    /// of a sum block (duplicates stay in one queue, in order).
    pub(crate) fn gather_queues() -> Vec<Vec<Descriptor>> {
        let mut queues = vec![Vec::new(); 4];
        for i in 0..4096u64 {
            let row = (i * 7919) % 1000;
            let copy = Descriptor::new(
                DescOp::Copy,
                FabricAddr(row * 64),
                FabricAddr((1 << 20) + i * 64),
                64,
                Dtype::U8,
            );
            queues[(i % 4) as usize].push(copy.unwrap());
        }
        for (q, list) in queues.iter_mut().enumerate() {
            for k in 0..2u64 {
                let add = Descriptor::new(
                    DescOp::Add,
                    FabricAddr(k * 64 + q as u64 * 4),
                    FabricAddr((2 << 20) + q as u64 * 64),
                    64,
                    Dtype::F32,
                );
                list.push(add.unwrap());
            }
        }
        queues
    }

    #[test]
    fn page_buckets_equal_the_queues_in_order() {
        let queues = gather_queues();
        let mut f = Fabric::new(Generation::Cayman);
        let table: Vec<u8> = (0..64_000u32).map(|i| (i * 31 % 256) as u8).collect();
        f.write(FabricAddr(0), &table).unwrap();
        let mut want = f.clone();
        execute_sequential(&mut want, &queues).unwrap();
        let pool = pool(1);
        for _ in 0..5 {
            let mut g = f.clone();
            g.close_pages();
            g.reserve(FabricAddr(1 << 20), 4096 * 64).unwrap();
            g.reserve(FabricAddr(2 << 20), 256).unwrap();
            let (outcome, _, ran) = run(Some(&pool), &g, &queues, true);
            assert_eq!((outcome, ran), (Ok(()), 4096 + 8));
            assert_eq!(g.first_difference(&want), None);
        }
    }

    #[test]
    fn page_buckets_name_the_failing_descriptor_by_queue_and_index() {
        let queues = with_two_unreserved(gather_queues());
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(1 << 20), 4096 * 64).unwrap();
        f.reserve(FabricAddr(2 << 20), 256).unwrap();
        let e = run(Some(&pool(1)), &f, &queues, true).0;
        let Err(Error::ReplayDescriptor { queue, index, .. }) = e else {
            panic!("{e:?}")
        };
        // both are on one page, so in one bucket, in round order: queue 3's comes first
        assert_eq!((queue, index), (3, 0));
    }
}
