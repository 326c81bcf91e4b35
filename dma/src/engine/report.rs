//! The replay report: a deterministic [`ReplaySummary`] (what the queues did, timed by the
//! model) and the measured [`ExecutionStats`] of the run that produced it.

use std::time::Duration;

use crate::generation::Generation;
use crate::timing::TimelineReport;

/// One queue's share of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueReport {
    /// Descriptors executed.
    pub descriptors: u64,
    /// Bytes they wrote.
    pub bytes: u64,
    /// Time the queue's DMA engine is busy in the timing model, ps.
    pub busy_ps: u64,
    /// End of the queue's last descriptor in the timing model, ps.
    pub end_ps: u64,
}

/// Everything about a replay that follows from its queues and the fabric alone: equal for
/// every worker count and schedule (and, per queue, for every run of the same queues).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySummary {
    /// The generation the replay was timed on (the fabric's).
    pub generation: Generation,
    /// Per queue, in queue order.
    pub queues: Vec<QueueReport>,
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
        let queues: Vec<QueueReport> = timeline
            .queues
            .iter()
            .map(|t| QueueReport {
                descriptors: t.descriptors,
                bytes: t.bytes,
                busy_ps: t.busy_ps,
                end_ps: t.end_ps,
            })
            .collect();
        ReplaySummary {
            generation,
            descriptors: queues.iter().map(|q| q.descriptors).sum(),
            bytes: queues.iter().map(|q| q.bytes).sum(),
            busy_ps: queues.iter().map(|q| q.busy_ps).sum(),
            failed,
            makespan_ps: timeline.makespan_ps,
            queues,
        }
    }

    /// Bytes per executed descriptor (0 without descriptors).
    pub fn average_descriptor_bytes(&self) -> f64 {
        if self.descriptors == 0 {
            return 0.0;
        }
        self.bytes as f64 / self.descriptors as f64
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

impl ExecutionStats {
    /// Bytes per second of wall time (0 for an instantaneous run).
    pub fn bytes_per_second(&self, bytes: u64) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs == 0.0 {
            return 0.0;
        }
        bytes as f64 / secs
    }
}

/// A replay's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayReport {
    /// The deterministic part.
    pub summary: ReplaySummary,
    /// The measured part.
    pub execution: ExecutionStats,
}

impl ReplayReport {
    /// Whether the deterministic parts are equal (wall time and other measurements ignored).
    pub fn deterministic_eq(&self, other: &ReplayReport) -> bool {
        self.summary == other.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::QueueTiming;

    fn timing(descriptors: u64, bytes: u64, busy_ps: u64, end_ps: u64) -> QueueTiming {
        QueueTiming {
            descriptors,
            bytes,
            busy_ps,
            end_ps,
            spans: Vec::new(),
        }
    }

    fn summary() -> ReplaySummary {
        let timeline = TimelineReport {
            queues: vec![timing(3, 300, 50, 60), timing(1, 8, 7, 90)],
            makespan_ps: 90,
        };
        ReplaySummary::new(Generation::Mariana, timeline, 4)
    }

    #[test]
    fn totals_sum_the_queues() {
        let s = summary();
        assert_eq!(
            s.queues[0],
            QueueReport {
                descriptors: 3,
                bytes: 300,
                busy_ps: 50,
                end_ps: 60,
            }
        );
        assert_eq!((s.descriptors, s.bytes, s.failed), (4, 308, 4));
        assert_eq!((s.busy_ps, s.makespan_ps), (57, 90));
        assert_eq!(s.average_descriptor_bytes(), 308.0 / 4.0);
        let empty = TimelineReport {
            queues: vec![timing(0, 0, 0, 0)],
            makespan_ps: 0,
        };
        assert_eq!(
            ReplaySummary::new(Generation::Sunda, empty, 0).average_descriptor_bytes(),
            0.0
        );
    }

    #[test]
    fn deterministic_eq_ignores_measurements() {
        let stats = |ms, units| ExecutionStats {
            wall: Duration::from_millis(ms),
            workers: 1,
            units,
            max_buffered: 10,
            page_buckets: false,
        };
        let a = ReplayReport {
            summary: summary(),
            execution: stats(5, 2),
        };
        let b = ReplayReport {
            summary: summary(),
            execution: stats(9, 7),
        };
        assert!(a.deterministic_eq(&b));
        assert_ne!(a, b);
        let mut c = b.clone();
        c.summary.queues[1].busy_ps += 1;
        assert!(!a.deterministic_eq(&c));
        assert_eq!(stats(500, 1).bytes_per_second(1000), 2000.0);
        assert_eq!(stats(0, 1).bytes_per_second(1000), 0.0);
    }
}
