//! The descriptor queues of a scenario as one queue file (`hostsim gen`), and a queue
//! file replayed over the scenario's initial tensors (`hostsim replay`).
//!
//! # Recording
//!
//! [`generate`] runs the scenario's ops with the DGE mechanism on a scratch fabric (the
//! scenario's initial tensors: later ops read what earlier ones wrote, and the DGE reads
//! index values when it generates) while the runtime records every replay the DGE route
//! hands the engine ([`crate::runtime::Runtime::record_queues`]), in order: one per
//! instruction, or per phase of an instruction that is replayed in phases. The file
//! therefore holds descriptors for *these* initial tensors; replaying it over others
//! moves the rows the recorded indices chose.
//!
//! # Ordering the replays in one file: a join tree per replay
//!
//! Replay `k + 1` must start after replay `k` has finished on every queue. A
//! descriptor waits on one semaphore, and each semaphore has one signalling queue
//! (`dma::descriptor`), so no single counting barrier exists; [`join_replays`] builds
//! one from a tree of waits instead. Queue `q` signals semaphore `q` only, at its last
//! descriptor of each replay it takes part in. In replay `k`:
//!
//! - the *root* is the queue with the most descriptors; the other non-empty queues are
//!   taken breadth first by descriptor count, each queue adopting as many of them as it
//!   has descriptors (`join_tree`): its last descriptor waits for its first child's
//!   signal, the one before for the second's, and so on. So the root's signal means every
//!   queue of replay `k` is done;
//! - the first descriptor of every queue in replay `k + 1` waits for that signal of the
//!   root, except on the root itself (a queue is in order) and where the descriptor
//!   already waits for a child (the child's chain of waits leads back to a descriptor that
//!   waited for replay `k`).
//!
//! No no-op descriptors are needed: a queue empty in a replay takes no part in its tree,
//! and an empty replay is left out. With enough descriptors on the root (one per other
//! queue) the tree is a star and a replay costs two semaphore hand-offs in the timing
//! model (children to root, root to the next replay), whatever the queue count; only
//! replays of single descriptors on many queues grow deeper trees. The file's estimate is
//! therefore somewhat above the sum of the separate replays'. The descriptors and the
//! bytes they move are the run's.

use std::fs::File;
use std::io::{BufWriter, Cursor, Read, Seek, Write};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use dma::queue_file::{QueueFileWriter, VerifiedQueueFile};
use dma::{Descriptor, Engine, EngineConfig, Fabric, ReplayReport, SemId, SemWait};

use super::exec::{self, write_atomic_with, OpReport, Report};
use super::Prepared;
use crate::dge_route::RecordedReplays;
use crate::error::Error;
use crate::progress::Progress;
use crate::runtime::Mechanism;

/// A scenario's descriptor queues, ready for a queue file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSet {
    pub generation: dma::Generation,
    /// Queue `q` is DMA ring `q`; `len()` is the file's queue count.
    pub queues: Vec<Vec<Descriptor>>,
    /// Engine replays the run made (joined by semaphore trees).
    pub replays: usize,
}

impl QueueSet {
    /// Descriptors per queue.
    pub fn counts(&self) -> Vec<usize> {
        self.queues.iter().map(Vec::len).collect()
    }
}

/// Runs the scenario's ops through the DGE on a scratch fabric, recording their queues,
/// and joins them into one ordered set of `prepared.queues` queues.
pub fn generate(prepared: &Prepared) -> Result<QueueSet, Error> {
    let mut progress = Progress::new(prepared.ops.len() as u64, "gen");
    let (_, replays) = prepared.execute_recording(
        Mechanism::Dge,
        exec::RunOptions {
            record: true,
            sanitize: false,
        },
        &mut progress,
    )?;
    progress.finish();
    QueueSet::joined(prepared, &replays)
}

impl QueueSet {
    /// The recorded `replays` of `prepared`, joined ([`join_replays`]).
    pub fn joined(prepared: &Prepared, replays: &RecordedReplays) -> Result<QueueSet, Error> {
        Ok(QueueSet {
            generation: prepared.generation,
            queues: join_replays(replays, prepared.queues)?,
            replays: replays.len(),
        })
    }
}

/// The replays, in order, as `queues` queues ordered by the join trees of the module
/// docs.
pub fn join_replays(
    replays: &[Vec<Vec<Descriptor>>],
    queues: usize,
) -> Result<Vec<Vec<Descriptor>>, Error> {
    let mut out: Vec<Vec<Descriptor>> = vec![Vec::new(); queues];
    let mut signals = vec![0u32; queues];
    let mut barrier: Option<(usize, u32)> = None;
    for (k, replay) in replays.iter().enumerate() {
        check_replay(k, replay, queues)?;
        let mut spans = Vec::new();
        for (q, list) in replay.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            let first = out[q].len();
            out[q].extend_from_slice(list);
            if let Some((b, n)) = barrier.filter(|&(b, _)| b != q) {
                out[q][first] = out[q][first].with_wait(wait(b, n)?);
            }
            let last = out[q].len() - 1;
            signals[q] += 1;
            out[q][last] = out[q][last].with_signal(SemId::new(q as u8)?);
            spans.push((q, list.len()));
        }
        // A join wait replaces a barrier wait: the child it waits for waited for the barrier.
        for (parent, slot, child) in join_tree(&mut spans) {
            let at = out[parent].len() - 1 - slot;
            out[parent][at] = out[parent][at].with_wait(wait(child, signals[child])?);
        }
        barrier = spans
            .first()
            .map(|&(root, _)| (root, signals[root]))
            .or(barrier);
    }
    Ok(out)
}

/// The join tree of one replay over its non-empty queues `spans` (queue, descriptors):
/// `(parent, slot, child)` edges, meaning that the parent's descriptor `slot` places
/// from its last waits for the child's last. The root is the queue with the most
/// descriptors; queues are taken breadth first by descriptor count, and a queue takes as
/// many children as it has descriptors. `spans` is reordered root first.
fn join_tree(spans: &mut [(usize, usize)]) -> Vec<(usize, usize, usize)> {
    spans.sort_by_key(|&(q, len)| (std::cmp::Reverse(len), q));
    let mut edges = Vec::with_capacity(spans.len().saturating_sub(1));
    let mut next = 1;
    for &(parent, len) in spans.iter() {
        let take = len.min(spans.len().saturating_sub(next));
        for (slot, &(child, _)) in spans.iter().skip(next).take(take).enumerate() {
            edges.push((parent, slot, child));
        }
        next += take;
    }
    edges
}

/// A recorded replay fits the queue count and uses no semaphores of its own.
fn check_replay(k: usize, replay: &[Vec<Descriptor>], queues: usize) -> Result<(), Error> {
    let bad = |rule: String| Error::Scenario {
        what: format!("recorded replay {k}"),
        rule,
    };
    if replay.len() > queues {
        return Err(bad(format!(
            "uses {} queues, more than {queues}",
            replay.len()
        )));
    }
    let own = replay
        .iter()
        .flatten()
        .any(|d| d.wait().is_some() || d.signal().is_some());
    match own {
        true => Err(bad(
            "its descriptors use semaphores, which the join needs".into()
        )),
        false => Ok(()),
    }
}

fn wait(sem: usize, count: u32) -> Result<SemWait, Error> {
    Ok(SemWait {
        sem: SemId::new(sem as u8)?,
        // Counts start at 1: they follow a signal.
        count: NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN),
    })
}

/// Writes `set` as a queue file at `path` atomically (temporary file, then rename),
/// tagged with `origin` if given ([`Prepared::origin`]).
pub fn write_queue_file(path: &Path, set: &QueueSet, origin: Option<u64>) -> Result<(), Error> {
    write_atomic_with(path, |file: File| {
        write_set(BufWriter::new(file), set, origin).map(drop)
    })
}

/// Writes `set` as a queue file into `w`, tagged with `origin` if given.
fn write_set<W: Write + Seek>(w: W, set: &QueueSet, origin: Option<u64>) -> Result<W, Error> {
    let mut writer = QueueFileWriter::new(w, set.generation, set.queues.len())?;
    if let Some(o) = origin {
        writer = writer.with_origin(o);
    }
    for (q, list) in set.queues.iter().enumerate() {
        for d in list {
            writer.push(q, d)?;
        }
    }
    Ok(writer.finish()?)
}

/// The SVG timeline (`crate::timeline`) of `set` on its generation's timing model.
pub fn timeline_svg(set: &QueueSet, title: &str) -> Result<String, Error> {
    let mut buf = write_set(Cursor::new(Vec::new()), set, None)?;
    buf.set_position(0);
    let mut file = VerifiedQueueFile::open(buf)?;
    file_svg(&mut file, title)
}

/// The SVG timeline of a verified queue file.
pub fn file_svg<R: Read + Seek>(
    file: &mut VerifiedQueueFile<R>,
    title: &str,
) -> Result<String, Error> {
    let ops = crate::timeline::queue_ops(file)?;
    crate::timeline::queue_file_svg(file, &ops, title)
}

/// What replaying a queue file did.
#[derive(Debug)]
pub struct Replayed {
    pub fabric: Fabric,
    pub report: ReplayReport,
    pub wall_seconds: f64,
}

/// Replays the queue file at `path` over the scenario's initial tensors, through the
/// engine's async face ([`Engine::replay_file_async`]). The file is verified whole first;
/// its generation must be the scenario's.
pub async fn replay(prepared: &Prepared, path: &Path) -> Result<Replayed, Error> {
    let named = |source| Error::QueueFileInput {
        file: path.display().to_string(),
        source,
    };
    let file = VerifiedQueueFile::open_path(path).map_err(named)?;
    let fabric = prepared.initial_fabric()?;
    // A file gen made says what for: other initial tensors are refused (another
    // generation is named as such by the engine).
    let same_generation = file.header().generation() == prepared.generation;
    if let Some(stored) = file.summary().origin.filter(|_| same_generation) {
        let scenario = prepared.origin(&fabric);
        if stored != scenario {
            return Err(Error::QueueFileOrigin {
                file: path.display().to_string(),
                stored,
                scenario,
            });
        }
    }
    let config = EngineConfig {
        queues: file.header().queues(),
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(config)?);
    // The engine reports nothing until the replay ends: the bar shows the count to do,
    // then all of it done.
    let mut progress = Progress::new(file.summary().descriptors, "replay");
    progress.inc(0);
    let started = Instant::now();
    let (fabric, _, report) = engine.replay_file_async(fabric, file).await;
    let report = report.map_err(named)?;
    progress.inc(report.summary.descriptors);
    progress.finish();
    Ok(Replayed {
        fabric,
        report,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

impl Replayed {
    /// `report.json` of a replay: one `replay` entry with the engine's totals.
    pub fn report(&self) -> Report {
        let s = &self.report.summary;
        let op = OpReport {
            op: "replay".into(),
            name: None,
            mechanism: "dma".into(),
            // A queue file holds descriptors: which DGE made them was decided at `gen`.
            dge: None,
            instructions: 0,
            descriptors: s.descriptors,
            bytes: s.bytes,
            // A queue file holds descriptors, not indices: skips happened at `gen`.
            oob_skipped: 0,
            oob_notifications: 0,
            estimated_ns: s.makespan_ps.div_ceil(1000),
            warnings: Vec::new(),
        };
        Report::with_total(vec![op], self.wall_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{DescOp, Dtype, FabricAddr};

    fn copy(k: u64) -> Descriptor {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(k * 64),
            FabricAddr(0x10000 + k * 64),
            64,
            Dtype::U8,
        )
        .unwrap()
    }

    /// A descriptor's wait as (sem, count) and its signal.
    type Mark = (Option<(u8, u32)>, Option<u8>);

    /// The mark of every descriptor of every queue.
    fn marks(queues: &[Vec<Descriptor>]) -> Vec<Vec<Mark>> {
        queues
            .iter()
            .map(|q| {
                q.iter()
                    .map(|d| {
                        (
                            d.wait().map(|w| (w.sem.get(), w.count.get())),
                            d.signal().map(SemId::get),
                        )
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn replays_are_joined_by_semaphore_trees() {
        let (a, b, c, d, e, f, g) = (
            copy(0),
            copy(1),
            copy(2),
            copy(3),
            copy(4),
            copy(5),
            copy(6),
        );
        let replays = vec![
            vec![vec![a, b], vec![c]],
            vec![vec![], vec![d], vec![e, f]],
            vec![],
            vec![vec![], vec![], vec![g]],
        ];
        let q = join_replays(&replays, 4).unwrap();
        let want = vec![
            vec![(None, None), (Some((1, 1)), Some(0))],
            vec![(None, Some(1)), (Some((0, 1)), Some(1))],
            vec![
                (Some((0, 1)), None),
                (Some((1, 2)), Some(2)),
                (None, Some(2)),
            ],
            vec![],
        ];
        assert_eq!(marks(&q), want);
        assert_eq!(q[2][2].src(), g.src(), "descriptors keep their order");
        let mut fabric = Fabric::new(dma::Generation::Cayman);
        dma::engine::execute_sequential(&mut fabric, &q).unwrap();
        let too_many = join_replays(&[vec![vec![a], vec![b]]], 1).unwrap_err();
        assert_eq!(
            too_many.to_string(),
            "recorded replay 0: uses 2 queues, more than 1"
        );
        let signalled = a.with_signal(SemId::new(3).unwrap());
        assert!(join_replays(&[vec![vec![signalled]]], 1).is_err());
    }

    #[test]
    fn join_trees_are_stars_when_the_root_has_room() {
        let mut star = [(0, 1), (1, 5), (2, 2), (3, 1)];
        assert_eq!(
            join_tree(&mut star),
            [(1, 0, 2), (1, 1, 0), (1, 2, 3)],
            "(parent, slot from the last, child)"
        );
        let mut thin = [(0, 1), (1, 1), (2, 2), (3, 1), (4, 1)];
        assert_eq!(
            join_tree(&mut thin),
            [(2, 0, 0), (2, 1, 1), (0, 0, 3), (1, 0, 4)]
        );
        assert_eq!(join_tree(&mut [(7, 3)]), []);
    }

    /// Replay `k` from `(counts, rotation)`: queue `q` copies `counts[q]` distinct source
    /// rows onto block `(q + rotation) % 4`, so queues of one replay never overlap and
    /// the blocks pass from queue to queue between replays.
    fn rotating_replays(plan: &[(Vec<usize>, usize)]) -> Vec<Vec<Vec<Descriptor>>> {
        let mut row = 0u64;
        let mut replays = Vec::new();
        for (counts, rotation) in plan {
            let mut replay = vec![Vec::new(); counts.len()];
            for (q, &n) in counts.iter().enumerate() {
                let block = ((q + rotation) % counts.len()) as u64;
                for _ in 0..n {
                    let d = Descriptor::new(
                        DescOp::Copy,
                        FabricAddr(row * 64),
                        FabricAddr(0x10000 + block * 64),
                        64,
                        Dtype::U8,
                    )
                    .unwrap();
                    replay[q].push(d);
                    row += 1;
                }
            }
            replays.push(replay);
        }
        replays
    }

    fn source_fabric() -> Fabric {
        let mut fabric = Fabric::new(dma::Generation::Cayman);
        let rows: Vec<u8> = (0..64 * 64).map(|i| (i * 7 + i / 64) as u8).collect();
        fabric.write(FabricAddr(0), &rows).unwrap();
        fabric
    }

    fn blocks(fabric: &Fabric) -> Vec<u8> {
        let mut out = vec![0u8; 4 * 64];
        fabric.read(FabricAddr(0x10000), &mut out).unwrap();
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        #[test]
        fn joined_replays_run_in_replay_order_on_the_engine(
            plan in proptest::collection::vec(
                (proptest::collection::vec(0usize..4, 4), 0usize..4),
                1..6,
            ),
        ) {
            let replays = rotating_replays(&plan);
            let mut want = source_fabric();
            for replay in &replays {
                dma::engine::execute_sequential(&mut want, replay).unwrap();
            }
            let joined = join_replays(&replays, 4).unwrap();
            let config = EngineConfig {
                queues: 4,
                workers: 2,
                race_check: dma::RaceCheck::On,
                ..EngineConfig::default()
            };
            let mut got = source_fabric();
            // The race check rejects any cross-queue overlap the semaphores leave unordered.
            Engine::new(config).unwrap().run(&mut got, &joined).unwrap();
            proptest::prop_assert_eq!(blocks(&got), blocks(&want));
            let mut sequential = source_fabric();
            dma::engine::execute_sequential(&mut sequential, &joined).unwrap();
            proptest::prop_assert_eq!(blocks(&sequential), blocks(&want));
        }
    }
}
