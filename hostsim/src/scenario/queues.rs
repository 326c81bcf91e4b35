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
//! # Ordering the replays in one file: a semaphore chain
//!
//! Replay `k + 1` must start after replay `k` has finished on every queue. A
//! descriptor waits on one semaphore, and each semaphore has one signalling queue
//! (`dma::descriptor`), so no single counting barrier exists; [`chain_replays`] builds
//! one from a chain instead. Queue `q` signals semaphore `q` only. In replay `k`, taken
//! over its non-empty queues `q1 < q2 < ... < qm`:
//!
//! - the last descriptor of `q1` signals `q1`;
//! - the last descriptor of `qi` (`i > 1`) waits for `q(i-1)`'s signal of replay `k`,
//!   then signals `qi`: so `qm`'s signal means every queue of replay `k` is done;
//! - the first descriptor of every queue in replay `k + 1` waits for that signal of
//!   `qm`, except where the wait is implied: on `qm` itself (a queue is in order), and on
//!   a queue whose only descriptor in replay `k + 1` already waits on the chain (that
//!   chain leads back to a descriptor that waited for replay `k`).
//!
//! No no-op descriptors are needed: a queue empty in a replay takes no part in its chain,
//! and an empty replay is left out. The chain costs one hand-off per queue at the end of
//! every replay in the timing model, so the file's estimate is somewhat above the sum of
//! the separate replays'. The descriptors and the bytes they move are the run's.

use std::fs::File;
use std::io::{BufWriter, Cursor, Read, Seek, Write};
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Instant;

use dma::queue_file::{QueueFileWriter, VerifiedQueueFile};
use dma::{Descriptor, Engine, EngineConfig, Fabric, ReplayReport, SemId, SemWait};

use super::exec::{write_atomic_with, OpReport, Report};
use super::Prepared;
use crate::dge_route::RecordedReplays;
use crate::error::Error;
use crate::runtime::Mechanism;

/// A scenario's descriptor queues, ready for a queue file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSet {
    pub generation: dma::Generation,
    /// Queue `q` is DMA ring `q`; `len()` is the file's queue count.
    pub queues: Vec<Vec<Descriptor>>,
    /// Engine replays the run made (joined by the semaphore chain).
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
    let (_, replays) = prepared.execute_recording(Mechanism::Dge, true)?;
    QueueSet::chained(prepared, &replays)
}

impl QueueSet {
    /// The recorded `replays` of `prepared`, chained ([`chain_replays`]).
    pub fn chained(prepared: &Prepared, replays: &RecordedReplays) -> Result<QueueSet, Error> {
        Ok(QueueSet {
            generation: prepared.generation,
            queues: chain_replays(replays, prepared.queues)?,
            replays: replays.len(),
        })
    }
}

/// The replays, in order, as `queues` queues ordered by the semaphore chain of the
/// module docs.
pub fn chain_replays(
    replays: &[Vec<Vec<Descriptor>>],
    queues: usize,
) -> Result<Vec<Vec<Descriptor>>, Error> {
    let mut out: Vec<Vec<Descriptor>> = vec![Vec::new(); queues];
    let mut signals = vec![0u32; queues];
    let mut barrier: Option<(usize, u32)> = None;
    for (k, replay) in replays.iter().enumerate() {
        check_replay(k, replay, queues)?;
        let mut prev: Option<(usize, u32)> = None;
        for (q, list) in replay.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            let (first, last) = (out[q].len(), out[q].len() + list.len() - 1);
            out[q].extend_from_slice(list);
            let implied = first == last && prev.is_some();
            if let Some((b, n)) = barrier.filter(|&(b, _)| b != q && !implied) {
                out[q][first] = out[q][first].with_wait(wait(b, n)?);
            }
            if let Some((p, n)) = prev {
                out[q][last] = out[q][last].with_wait(wait(p, n)?);
            }
            signals[q] += 1;
            out[q][last] = out[q][last].with_signal(SemId::new(q as u8)?);
            prev = Some((q, signals[q]));
        }
        barrier = prev.or(barrier);
    }
    Ok(out)
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
            "its descriptors use semaphores, which the chain needs".into()
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

/// Writes `set` as a queue file at `path` atomically (temporary file, then rename).
pub fn write_queue_file(path: &Path, set: &QueueSet) -> Result<(), Error> {
    write_atomic_with(path, |file: File| {
        write_set(BufWriter::new(file), set).map(drop)
    })
}

/// Writes `set` as a queue file into `w`.
fn write_set<W: Write + Seek>(w: W, set: &QueueSet) -> Result<W, Error> {
    let mut writer = QueueFileWriter::new(w, set.generation, set.queues.len())?;
    for (q, list) in set.queues.iter().enumerate() {
        for d in list {
            writer.push(q, d)?;
        }
    }
    Ok(writer.finish()?)
}

/// The SVG timeline (`crate::timeline`) of `set` on its generation's timing model.
pub fn timeline_svg(set: &QueueSet, title: &str) -> Result<String, Error> {
    let mut buf = write_set(Cursor::new(Vec::new()), set)?;
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

/// Replays the queue file at `path` over the scenario's initial tensors. The file is
/// verified whole first; its generation must be the scenario's.
pub fn replay(prepared: &Prepared, path: &Path) -> Result<Replayed, Error> {
    let mut file = VerifiedQueueFile::open_path(path)?;
    let mut fabric = prepared.initial_fabric()?;
    let config = EngineConfig {
        queues: file.header().queues(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config)?;
    let started = Instant::now();
    let report = engine.replay_file(&mut fabric, &mut file)?;
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
            mechanism: "dma".into(),
            instructions: 0,
            descriptors: s.descriptors,
            bytes: s.bytes,
            // A queue file holds descriptors, not indices: skips happened at `gen`.
            oob_skipped: 0,
            estimated_ns: s.makespan_ps.div_ceil(1000),
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
    fn replays_are_chained_by_semaphores() {
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
        let q = chain_replays(&replays, 4).unwrap();
        let want = vec![
            vec![(None, None), (None, Some(0))],
            vec![(Some((0, 1)), Some(1)), (None, Some(1))],
            vec![
                (Some((1, 1)), None),
                (Some((1, 2)), Some(2)),
                (None, Some(2)),
            ],
            vec![],
        ];
        assert_eq!(marks(&q), want);
        assert_eq!(q[2][2].src(), g.src(), "descriptors keep their order");
        let mut fabric = Fabric::new(dma::Generation::Cayman);
        dma::engine::execute_sequential(&mut fabric, &q).unwrap();
        let too_many = chain_replays(&[vec![vec![a], vec![b]]], 1).unwrap_err();
        assert_eq!(
            too_many.to_string(),
            "recorded replay 0: uses 2 queues, more than 1"
        );
        let signalled = a.with_signal(SemId::new(3).unwrap());
        assert!(chain_replays(&[vec![vec![signalled]]], 1).is_err());
    }
}
