//! The bodies of `hostsim run`, `hostsim gen` and `hostsim replay`: each checks its
//! input whole, does its work, writes its outputs only on success, and returns the text
//! the command prints (the binary only parses arguments and prints).

use std::fmt::Write;
use std::path::Path;

use dma::Generation;

use super::{exec, load, prepare, queues, Overrides, Prepared};
use crate::error::Error;
use crate::progress::Progress;
use crate::runtime::Mechanism;

/// The settings `run` may override, as the command line spells them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub generation: Option<String>,
    pub mechanism: Option<String>,
    pub queues: Option<usize>,
    /// Check every op's accesses against the tensors it names ([`super::sanitize`]).
    pub sanitize: bool,
}

impl Settings {
    /// The overrides, names parsed.
    pub fn overrides(&self) -> Result<Overrides, Error> {
        let generation = self
            .generation
            .as_deref()
            .map(Generation::from_name)
            .transpose()?;
        let mechanism = match self.mechanism.as_deref() {
            None => None,
            Some(m) => Some(Mechanism::from_name(m).ok_or_else(|| Error::Scenario {
                what: format!("--mechanism {m}"),
                rule: "must be auto, pool, dge or reference".into(),
            })?),
        };
        Ok(Overrides {
            generation,
            mechanism,
            queues: self.queues,
        })
    }
}

fn prepared(scenario: &Path, settings: &Settings) -> Result<Prepared, Error> {
    prepare(&load(scenario)?, settings.overrides()?)
}

/// `hostsim run` without a timeline: executes the scenario, writes `out` (if given,
/// only on success) and returns the summary.
pub fn run(scenario: &Path, out: Option<&Path>, settings: &Settings) -> Result<String, Error> {
    let outputs = Outputs {
        dir: out,
        ..Outputs::default()
    };
    run_with(scenario, outputs, settings)
}

/// Where `run` and `replay` write: the output folder, the SVG timeline, the Perfetto
/// trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outputs<'a> {
    pub dir: Option<&'a Path>,
    pub timeline: Option<&'a Path>,
    pub trace: Option<&'a Path>,
}

impl Outputs<'_> {
    /// Checks that the timeline and the trace can be written, before any work.
    pub fn check(&self) -> Result<(), Error> {
        let flags = [("--timeline", self.timeline), ("--trace", self.trace)];
        for (flag, path) in flags {
            path.map_or(Ok(()), |p| crate::timeline::check_output_path(flag, p))?;
        }
        Ok(())
    }
}

/// The drawings `run` and `replay` can write, each made only when asked for.
struct Drawings<S, T> {
    svg: S,
    trace: T,
}

/// `hostsim run --timeline/--trace`: executes the scenario, writes the outputs asked for
/// (only on success) and returns the summary. The timeline draws the DGE route's
/// descriptor queues (replays joined as `gen` joins them); the trace lays the run out as
/// its report sums it (`crate::trace`). A progress bar counts the ops on stderr when it
/// is a terminal.
pub fn run_with(
    scenario: &Path,
    outputs: Outputs<'_>,
    settings: &Settings,
) -> Result<String, Error> {
    outputs.check()?;
    let p = prepared(scenario, settings)?;
    let mut progress = Progress::new(p.ops.len() as u64, "run");
    let options = exec::RunOptions {
        record: outputs.timeline.is_some() || outputs.trace.is_some(),
        sanitize: settings.sanitize,
    };
    let (exec, replays) = p.execute_recording(p.mechanism, options, &mut progress)?;
    progress.finish();
    let report = exec::Report::of_run(&p, &exec);
    let title = format!("hostsim run {}", scenario.display());
    let svg = || queues::timeline_svg(&queues::QueueSet::joined(&p, &replays)?, &title);
    let sanitized = if settings.sanitize { ", sanitized" } else { "" };
    let trace = || p.run_trace(&title, &exec.reports, &replays);
    let header = format!(
        "{}: {} ops on {} (mechanism {}, {} queues{sanitized})\n",
        scenario.display(),
        p.ops.len(),
        p.generation,
        p.mechanism.name(),
        p.queues
    );
    finish(
        header,
        &p,
        &exec.fabric,
        &report,
        outputs,
        Drawings { svg, trace },
    )
}

/// `hostsim gen`: records the scenario's DGE queues into the queue file `out`, on the
/// generation and queue count `settings` give (the mechanism is the DGE's).
pub fn gen(scenario: &Path, out: &Path, settings: &Settings) -> Result<String, Error> {
    let p = prepared(scenario, settings)?;
    let set = queues::generate(&p)?;
    queues::write_queue_file(out, &set, Some(p.origin(&p.initial_fabric()?)))?;
    let counts = set.counts();
    let mut text = format!(
        "{}: {} descriptors from {} ops ({} engine replays joined by semaphores) on {}, {} queues\n",
        out.display(),
        counts.iter().sum::<usize>(),
        p.ops.len(),
        set.replays,
        p.generation,
        counts.len()
    );
    for (q, n) in counts.iter().enumerate() {
        let _ = writeln!(text, "queue {q:>2}: {n} descriptors");
    }
    Ok(text)
}

/// `hostsim replay`: replays the queue file over the scenario's initial tensors (on the
/// generation `settings` gives; the file gives the queue count) and writes the outputs
/// asked for (only on success).
pub fn replay(
    file: &Path,
    scenario: &Path,
    settings: &Settings,
    outputs: Outputs<'_>,
) -> Result<String, Error> {
    outputs.check()?;
    let p = prepared(scenario, settings)?;
    // The replay runs on a tokio runtime, through the engine's async face.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| dma::Error::EngineRuntime {
            message: e.to_string(),
        })?;
    let done = runtime.block_on(queues::replay(&p, file))?;
    let report = done.report();
    let title = format!("hostsim replay {}", file.display());
    let svg = || {
        let mut f = dma::queue_file::VerifiedQueueFile::open_path(file)?;
        queues::file_svg(&mut f, &title)
    };
    let trace = || {
        let mut f = dma::queue_file::VerifiedQueueFile::open_path(file)?;
        crate::trace::queue_file_trace(&mut f, &title)
    };
    let header = format!(
        "{}: replayed over the tensors of {}\n",
        file.display(),
        scenario.display()
    );
    finish(
        header,
        &p,
        &done.fabric,
        &report,
        outputs,
        Drawings { svg, trace },
    )
}

/// The end of `run` and `replay`: the summary (`header` and the report's table), then
/// what `outputs` asks for, written all or none: the SVG and the trace `draw` makes, and
/// the folder (tensors of `fabric` and `report`).
fn finish<S, T>(
    header: String,
    p: &Prepared,
    fabric: &dma::Fabric,
    report: &exec::Report,
    outputs: Outputs<'_>,
    draw: Drawings<S, T>,
) -> Result<String, Error>
where
    S: FnOnce() -> Result<String, Error>,
    T: FnOnce() -> Result<String, Error>,
{
    let svg = outputs.timeline.map(|_| (draw.svg)()).transpose()?;
    let trace = outputs.trace.map(|_| (draw.trace)()).transpose()?;
    let mut text = header + &report.table();
    let arrays = outputs.dir.map(|_| exec::OutArray::tensors(p, fabric));
    let files: Vec<(&Path, &str, &str)> = [
        (outputs.timeline, svg.as_deref(), "the timeline"),
        (outputs.trace, trace.as_deref(), "the trace"),
    ]
    .into_iter()
    .filter_map(|(path, body, what)| Some((path?, body?, what)))
    .collect();
    let folder = outputs
        .dir
        .zip(arrays.as_deref())
        .map(|(d, a)| (d, a, report));
    let writes: Vec<(&Path, &str)> = files.iter().map(|&(p, b, _)| (p, b)).collect();
    exec::write_outputs(&writes, folder)?;
    for (path, _, what) in &files {
        let _ = writeln!(text, "wrote {what} to {}", path.display());
    }
    if let Some((dir, ..)) = folder {
        let (n, d) = (p.tensors.len(), dir.display());
        let _ = writeln!(text, "wrote {n} tensors and report.json to {d}");
    }
    Ok(text)
}
