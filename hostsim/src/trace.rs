//! Timelines as Chrome trace-event JSON (`--trace FILE.json` of `run`, `replay`,
//! `inspect` and `explain`), the object form `{"traceEvents": [...]}` that Perfetto
//! (ui.perfetto.dev, "Open trace file") and chrome://tracing open.
//!
//! One process per run or queue file; in it one track (thread, named by `thread_name`
//! metadata) per DMA queue, plus, for a run, a track of the scenario's ops, one of the
//! DGE instructions and one of the POOL kernels. A descriptor is one complete (`"X"`)
//! event with `args.bytes`, `args.descriptors` (1), `src`, `dst` and `op`; above
//! [`PER_DESCRIPTOR_EVENTS`] descriptors, back-to-back descriptors of one queue and op
//! become one event carrying their totals. Times are µs from the timing model:
//!
//! - a queue file ([`queue_file_trace`]) is timed whole, as `replay` times it; each
//!   semaphore hand-off (a SIGNAL and the WAIT it releases) is a flow event;
//! - a run ([`run_trace`]) lays its instructions end to end as its report sums them:
//!   each DGE-routed instruction's DGE time (a slice on the DGE track), then its replays
//!   one after another, each timed alone; a flow goes from the DGE slice to each queue's
//!   first descriptor of a replay. POOL kernels are slices with the bytes they store and
//!   no descriptors. The reference route has no timing and draws nothing.

use std::io::{Read, Seek};

use dma::timing::Span;
use dma::{Descriptor, QueueTimeline, TimingModel, VerifiedQueueFile};
use serde_json::{json, Value};

use crate::error::Error;
use crate::runtime::{Cost, RunReport};

/// Descriptors drawn one event each at most; above, back-to-back ones merge.
pub const PER_DESCRIPTOR_EVENTS: u64 = 100_000;

/// Track ids after the 16 queues: the scenario's ops, the DGE, the POOL kernels.
const OPS_TID: u32 = 100;
const DGE_TID: u32 = 101;
const POOL_TID: u32 = 102;

/// µs (the trace format's unit) of `ps`.
fn us(ps: u64) -> f64 {
    ps as f64 / 1e6
}

/// A trace being built.
#[derive(Debug, Default)]
pub struct Trace {
    events: Vec<Value>,
    next_pid: u32,
    next_flow: u64,
}

impl Trace {
    /// A new process named `name`; returns its id.
    pub fn process(&mut self, name: &str) -> u32 {
        self.next_pid += 1;
        let pid = self.next_pid;
        self.meta(pid, 0, "process_name", name);
        pid
    }

    /// Names track `tid` of `pid`, sorted by its id.
    fn track(&mut self, pid: u32, tid: u32, name: &str) {
        self.meta(pid, tid, "thread_name", name);
        self.events
            .push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid,
            "tid": tid, "args": {"sort_index": tid}}));
    }

    fn meta(&mut self, pid: u32, tid: u32, what: &str, name: &str) {
        self.events
            .push(json!({"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}));
    }

    /// A complete event.
    fn slice(&mut self, at: (u32, u32), name: &str, span: Span, args: Value) {
        let dur = span.end_ps.saturating_sub(span.start_ps);
        self.events
            .push(json!({"ph": "X", "name": name, "pid": at.0, "tid": at.1,
            "ts": us(span.start_ps), "dur": us(dur), "args": args}));
    }

    /// A flow from the slice enclosing `from` to the one enclosing `to` (times in ps).
    fn flow(&mut self, name: &str, from: (u32, u32, u64), to: (u32, u32, u64)) {
        self.next_flow += 1;
        let id = self.next_flow;
        self.events
            .push(json!({"ph": "s", "name": name, "cat": "handoff", "id": id,
            "pid": from.0, "tid": from.1, "ts": us(from.2)}));
        self.events
            .push(json!({"ph": "f", "bp": "e", "name": name, "cat": "handoff",
            "id": id, "pid": to.0, "tid": to.1, "ts": us(to.2)}));
    }

    /// The trace's JSON text.
    pub fn to_json(&self) -> String {
        let root = json!({"traceEvents": self.events, "displayTimeUnit": "ns"});
        // A tree of numbers and strings always serializes.
        serde_json::to_string(&root).unwrap_or_default() + "\n"
    }
}

/// The event a queue's track is building: one descriptor, or back-to-back ones of one op.
#[derive(Clone, Copy, Debug)]
struct Open {
    span: Span,
    bytes: u64,
    descriptors: u64,
    first: Descriptor,
}

/// One queue's track: descriptors in, events out.
#[derive(Debug)]
struct Lane {
    at: (u32, u32),
    merge: bool,
    open: Option<Open>,
}

impl Lane {
    fn new(pid: u32, queue: usize, merge: bool) -> Lane {
        Lane {
            at: (pid, queue as u32),
            merge,
            open: None,
        }
    }

    /// Adds descriptor `d`, timed `span`.
    fn push(&mut self, trace: &mut Trace, d: &Descriptor, span: Span) {
        if let Some(o) = self
            .open
            .as_mut()
            .filter(|o| self.merge && o.first.op() == d.op() && o.span.end_ps == span.start_ps)
        {
            o.span.end_ps = span.end_ps;
            o.bytes += u64::from(d.len());
            o.descriptors += 1;
            return;
        }
        self.flush(trace);
        self.open = Some(Open {
            span,
            bytes: u64::from(d.len()),
            descriptors: 1,
            first: *d,
        });
    }

    /// Emits the open event.
    fn flush(&mut self, trace: &mut Trace) {
        let Some(o) = self.open.take() else { return };
        let op = o.first.op().name();
        let (name, args) = match o.descriptors {
            1 => (
                op.to_string(),
                json!({"bytes": o.bytes, "descriptors": 1, "op": op,
                    "src": format!("{:#x}", o.first.src().0), "dst": format!("{:#x}", o.first.dst().0)}),
            ),
            n => (
                format!("{op} x{n}"),
                json!({"bytes": o.bytes, "descriptors": n, "op": op}),
            ),
        };
        trace.slice(self.at, &name, o.span, args);
    }
}

/// The trace of a verified queue file timed whole on its generation's model (`replay`,
/// `inspect`): one process named `title`.
pub fn queue_file_trace<R: Read + Seek>(
    file: &mut VerifiedQueueFile<R>,
    title: &str,
) -> Result<String, Error> {
    let generation = file.header().generation();
    let report = file.timeline(TimingModel::new(generation), true)?;
    let mut trace = Trace::default();
    let pid = trace.process(&format!("{title} ({generation})"));
    let queues = file.header().queues();
    let merge = file.summary().descriptors > PER_DESCRIPTOR_EVENTS;
    // Per semaphore, the start of each SIGNAL's descriptor; the WAITs as (sem, nth, queue, start).
    let mut signals: Vec<Vec<(usize, u64)>> =
        vec![Vec::new(); dma::descriptor::SEMAPHORES as usize];
    let mut waits = Vec::new();
    let mut batch = Vec::with_capacity(dma::queue_file::MAX_BATCH);
    file.rewind();
    for (q, timing) in report.queues.iter().enumerate().take(queues) {
        trace.track(pid, q as u32, &format!("DMA queue {q}"));
        let mut lane = Lane::new(pid, q, merge);
        let mut spans = timing.spans.iter();
        while file.read_queue(q, dma::queue_file::MAX_BATCH, &mut batch)? > 0 {
            for (d, span) in batch.iter().zip(spans.by_ref()) {
                if let Some(s) = d.signal() {
                    signals[usize::from(s.get())].push((q, span.start_ps));
                }
                if let Some(w) = d.wait() {
                    waits.push((w.sem.get(), w.count.get(), q, span.start_ps));
                }
                lane.push(&mut trace, d, *span);
            }
        }
        lane.flush(&mut trace);
    }
    file.rewind();
    for (sem, nth, q, at) in waits {
        let from = signals[usize::from(sem)].get(nth as usize - 1);
        if let Some(&(sq, st)) = from {
            trace.flow(
                &format!("semaphore {sem}"),
                (pid, sq as u32, st),
                (pid, q as u32, at),
            );
        }
    }
    Ok(trace.to_json())
}

/// What [`run_trace`] draws: the run's ops in order (their names and reports) and the
/// replays the DGE route recorded while they ran.
#[derive(Clone, Copy, Debug)]
pub struct RunInput<'a> {
    /// The process name.
    pub title: &'a str,
    pub generation: dma::Generation,
    /// DMA queues of the run's engine.
    pub queues: usize,
    /// Each op's name and report, in order.
    pub ops: &'a [(String, &'a RunReport)],
    /// Every replay the DGE route ran, in order.
    pub replays: &'a [Vec<Vec<Descriptor>>],
}

/// Where [`run_trace`] is: the time and the replays not yet drawn.
struct Cursor<'a> {
    pid: u32,
    now_ps: u64,
    replays: std::slice::Iter<'a, Vec<Vec<Descriptor>>>,
    lanes: Vec<Lane>,
}

/// The trace of a run laid out as its report sums it (module docs); one process.
pub fn run_trace(input: &RunInput) -> Result<String, Error> {
    let mut trace = Trace::default();
    let pid = trace.process(&format!("{} ({})", input.title, input.generation));
    trace.track(pid, OPS_TID, "scenario ops");
    trace.track(pid, DGE_TID, "DGE instructions");
    trace.track(pid, POOL_TID, "POOL kernels (IVP core)");
    let total: u64 = input.ops.iter().map(|(_, r)| r.totals.descriptors).sum();
    let merge = total > PER_DESCRIPTOR_EVENTS;
    let mut at = Cursor {
        pid,
        now_ps: 0,
        replays: input.replays.iter(),
        lanes: (0..input.queues)
            .map(|q| Lane::new(pid, q, merge))
            .collect(),
    };
    for q in 0..input.queues {
        trace.track(pid, q as u32, &format!("DMA queue {q}"));
    }
    let model = TimingModel::new(input.generation);
    for (k, (name, report)) in input.ops.iter().enumerate() {
        let start = at.now_ps;
        for step in &report.steps {
            draw_step(&mut trace, &mut at, &model, step)?;
        }
        let span = Span {
            start_ps: start,
            end_ps: at.now_ps,
        };
        trace.slice(
            (pid, OPS_TID),
            &format!("op {k} {name}"),
            span,
            json!({"op": k}),
        );
    }
    at.lanes.iter_mut().for_each(|l| l.flush(&mut trace));
    Ok(trace.to_json())
}

/// One instruction: its POOL kernel slice, or its DGE slice and replays.
fn draw_step(
    trace: &mut Trace,
    at: &mut Cursor,
    model: &TimingModel,
    step: &crate::runtime::StepReport,
) -> Result<(), Error> {
    let opcode = format!("{} {:#04x}", step.opcode.name(), step.opcode.code());
    match step.cost {
        Cost::Pool(c) => {
            let span = advance(at, c.estimated_ps);
            let args = json!({"bytes": step.outcome.bytes_written, "descriptors": 0});
            trace.slice((at.pid, POOL_TID), &opcode, span, args);
        }
        Cost::Dge {
            dge_ps,
            dge_instructions,
            dma,
        } => {
            let dge = advance(at, dge_ps.unwrap_or(0));
            let served = step.dge.map_or("", |d| d.name());
            let args = json!({"dge_instructions": dge_instructions, "dge": served});
            trace.slice((at.pid, DGE_TID), &opcode, dge, args);
            for _ in 0..dma.replays {
                let queues = at.replays.next().ok_or_else(|| Error::Scenario {
                    what: "the trace".into(),
                    rule: "a step reports more replays than the run recorded".into(),
                })?;
                draw_replay(trace, at, model, queues, dge.start_ps)?;
            }
        }
        Cost::Unmodelled => {}
    }
    Ok(())
}

/// Moves the cursor on by `ps`; returns the span passed over.
fn advance(at: &mut Cursor, ps: u64) -> Span {
    let start_ps = at.now_ps;
    at.now_ps = start_ps.saturating_add(ps);
    Span {
        start_ps,
        end_ps: at.now_ps,
    }
}

/// One replay timed alone from the cursor, with a flow from the DGE slice starting at
/// `dge_ps` to each queue's first descriptor.
fn draw_replay(
    trace: &mut Trace,
    at: &mut Cursor,
    model: &TimingModel,
    queues: &[Vec<Descriptor>],
    dge_ps: u64,
) -> Result<(), Error> {
    let timed = time_replay(*model, queues)?;
    let base = at.now_ps;
    for (q, (list, timing)) in queues.iter().zip(&timed.queues).enumerate() {
        let lane = at.lanes.get_mut(q).ok_or_else(|| Error::Scenario {
            what: "the trace".into(),
            rule: format!("a replay uses queue {q}, past the run's queues"),
        })?;
        for (d, s) in list.iter().zip(&timing.spans) {
            let span = Span {
                start_ps: base + s.start_ps,
                end_ps: base + s.end_ps,
            };
            lane.push(trace, d, span);
        }
        if let Some(first) = timing.spans.first() {
            let to = (at.pid, q as u32, base + first.start_ps);
            trace.flow("DGE hand-off", (at.pid, DGE_TID, dge_ps), to);
        }
    }
    advance(at, timed.makespan_ps);
    Ok(())
}

/// One replay's queues timed by `model`, with spans.
pub fn time_replay(
    model: TimingModel,
    queues: &[Vec<Descriptor>],
) -> Result<dma::TimelineReport, Error> {
    let mut t = QueueTimeline::new(model, queues.len().max(1), true)?;
    for (q, list) in queues.iter().enumerate() {
        t.push_all(q, list)?;
    }
    Ok(t.finish()?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dma::{DescOp, Dtype, FabricAddr, SemId, SemWait};
    use std::collections::HashMap;

    /// Checks a trace's event format and returns the sums of `args.bytes` and
    /// `args.descriptors`: only the phases M, X, s, f; a `traceEvents` object; every X
    /// with a name, a non-negative duration, on a named track of a named process, never
    /// starting before the previous X of its track ends; every flow start matched by one
    /// finish.
    pub(crate) fn check(text: &str) -> (u64, u64) {
        let root: Value = serde_json::from_str(text).unwrap();
        let events = root["traceEvents"].as_array().unwrap();
        let mut named = std::collections::HashSet::new();
        let mut ends: HashMap<(u64, u64), f64> = HashMap::new();
        let mut flows: HashMap<u64, (u32, u32)> = HashMap::new();
        let (mut bytes, mut descriptors) = (0, 0);
        for e in events {
            let at = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            match e["ph"].as_str().unwrap() {
                "M" => {
                    if e["name"] == "thread_name" || e["name"] == "process_name" {
                        assert!(!e["args"]["name"].as_str().unwrap().is_empty());
                        named.insert((e["name"].as_str().unwrap().to_string(), at));
                    }
                }
                "X" => {
                    assert!(!e["name"].as_str().unwrap().is_empty());
                    assert!(named.contains(&("thread_name".into(), at)), "{e}");
                    assert!(named.contains(&("process_name".into(), (at.0, 0))), "{e}");
                    let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                    assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                    let end = ends.entry(at).or_insert(0.0);
                    assert!(ts >= *end - 1e-9, "back in time on {at:?}: {e}");
                    *end = ts + dur;
                    bytes += e["args"]["bytes"].as_u64().unwrap_or(0);
                    descriptors += e["args"]["descriptors"].as_u64().unwrap_or(0);
                }
                "s" => flows.entry(e["id"].as_u64().unwrap()).or_default().0 += 1,
                "f" => flows.entry(e["id"].as_u64().unwrap()).or_default().1 += 1,
                ph => panic!("phase {ph}"),
            }
        }
        assert!(flows.values().all(|&n| n == (1, 1)), "{flows:?}");
        (bytes, descriptors)
    }

    fn copy(k: u64, len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(k * 4096),
            FabricAddr(0x100000 + k * 4096),
            len,
            Dtype::U8,
        )
        .unwrap()
    }

    /// Two queues; queue 1's second descriptor waits for queue 0's signal.
    fn handoff() -> Vec<Vec<Descriptor>> {
        let sem = SemId::new(0).unwrap();
        let wait = SemWait {
            sem,
            count: std::num::NonZeroU32::MIN,
        };
        vec![
            vec![copy(0, 1024), copy(1, 2048).with_signal(sem)],
            vec![copy(2, 512), copy(3, 256).with_wait(wait)],
        ]
    }

    #[test]
    fn a_queue_file_trace_has_a_track_per_queue_and_flows_for_semaphores() {
        let set = crate::scenario::queues::QueueSet {
            generation: dma::Generation::Cayman,
            queues: handoff(),
            replays: 1,
        };
        let file = std::env::temp_dir().join(format!("hostsim-trace-{}.dmaq", std::process::id()));
        crate::scenario::queues::write_queue_file(&file, &set, None).unwrap();
        let mut f = VerifiedQueueFile::open_path(&file).unwrap();
        let text = queue_file_trace(&mut f, "t").unwrap();
        assert_eq!(check(&text), (1024 + 2048 + 512 + 256, 4));
        let v: Value = serde_json::from_str(&text).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["DMA queue 0", "DMA queue 1"]);
        let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 4);
        assert_eq!(
            x[0]["args"],
            json!({"bytes": 1024, "descriptors": 1, "op": "copy", "src": "0x0", "dst": "0x100000"})
        );
        // the waiting descriptor starts 1.3 us (the semaphore latency) after the signal's end
        let end = x[1]["ts"].as_f64().unwrap() + x[1]["dur"].as_f64().unwrap();
        assert!(
            (x[3]["ts"].as_f64().unwrap() - end - 1.3).abs() < 1e-6,
            "{}",
            x[3]
        );
        let flow: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "s" || e["ph"] == "f")
            .collect();
        assert_eq!(
            (flow.len(), flow[0]["tid"].as_u64(), flow[1]["tid"].as_u64()),
            (2, Some(0), Some(1))
        );
        assert_eq!(flow[0]["ts"], x[1]["ts"]);
        assert_eq!(flow[1]["ts"], x[3]["ts"]);
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn many_descriptors_merge_back_to_back_runs_of_one_op() {
        let mut trace = Trace::default();
        let pid = trace.process("p");
        trace.track(pid, 0, "DMA queue 0");
        let mut lane = Lane::new(pid, 0, true);
        let spans = [(0, 10), (10, 20), (25, 30)];
        for (k, &(start_ps, end_ps)) in spans.iter().enumerate() {
            lane.push(&mut trace, &copy(k as u64, 64), Span { start_ps, end_ps });
        }
        lane.flush(&mut trace);
        assert_eq!(check(&trace.to_json()), (192, 3));
        let x: Vec<&Value> = trace.events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x[0]["name"], "copy x2");
        assert_eq!(
            x[0]["args"],
            json!({"bytes": 128, "descriptors": 2, "op": "copy"})
        );
        assert_eq!(x[1]["name"], "copy");
    }
}
