//! The replay report: a deterministic [`ReplaySummary`] (what the queues did, timed by the
//! model) and the measured [`ExecutionStats`] of the run that produced it.

use std::time::Duration;

use crate::generation::Generation;
use crate::timing::{QueueTiming, TimelineReport};

/// Everything about a replay that follows from its queues and the fabric alone: equal for
/// every worker count and schedule (and, per queue, for every run of the same queues).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySummary {
    /// The generation the replay was timed on (the fabric's).
    pub generation: Generation,
    /// Per queue, in queue order, as the timing model timed it (no spans).
    pub queues: Vec<QueueTiming>,
    /// Descriptors executed in all queues.
    pub descriptors: u64,
    /// Bytes written in all queues.
    pub bytes: u64,
    /// Descriptors rejected (a [`super::Session`]'s rejected pushes); none of them ran.
    pub failed: u64,
    /// The queues' busy time summed, ps.
    pub busy_ps: u64,
    /// Estimated end of the replay (the last queue's end), ps.
    pub makespan_ps: u64,
}

impl ReplaySummary {
    /// The summary of a timeline, given the number of rejected descriptors.
    pub(crate) fn new(
        generation: Generation,
        timeline: TimelineReport,
        failed: u64,
    ) -> ReplaySummary {
        let sum = |f: fn(&QueueTiming) -> u64| timeline.queues.iter().map(f).sum();
        ReplaySummary {
            generation,
            descriptors: sum(|q| q.descriptors),
            bytes: sum(|q| q.bytes),
            busy_ps: sum(|q| q.busy_ps),
            failed,
            makespan_ps: timeline.makespan_ps,
            queues: timeline.queues,
        }
    }
}

/// What was measured while the queues executed: the only part of a report that depends on
/// the machine and the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionStats {
    /// Wall time of the execution itself (validation and reservation excluded).
    pub wall: Duration,
    /// Threads the replay was offered to: the caller plus the thread pool's (1 when the
    /// caller ran it alone; a pool thread that did not join in time still counts).
    pub workers: usize,
    /// Units of work run (queue segments or page buckets; over every window of a
    /// streamed replay).
    pub units: u64,
    /// Descriptors copied out of the queues: into page buckets, or, for a streamed
    /// replay, the most held at once (at most `queues * channel_depth * batch`); none
    /// when in-memory queues run in place.
    pub max_buffered: usize,
    /// Whether the units were page buckets (see the engine's "Execution" overview).
    pub page_buckets: bool,
}

/// A replay's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayReport {
    /// The deterministic part.
    pub summary: ReplaySummary,
    /// The measured part.
    pub execution: ExecutionStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(descriptors: u64, bytes: u64, busy_ps: u64, end_ps: u64) -> QueueTiming {
        QueueTiming {
            descriptors,
            bytes,
            busy_ps,
            end_ps,
            spans: Vec::new(),
        }
    }

    #[test]
    fn totals_sum_the_queues() {
        let timeline = TimelineReport {
            queues: vec![timing(3, 300, 50, 60), timing(1, 8, 7, 90)],
            makespan_ps: 90,
        };
        let s = ReplaySummary::new(Generation::Mariana, timeline.clone(), 4);
        assert_eq!(s.queues, timeline.queues);
        assert_eq!((s.descriptors, s.bytes, s.failed), (4, 308, 4));
        assert_eq!((s.busy_ps, s.makespan_ps), (57, 90));
    }
}
