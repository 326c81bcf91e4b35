//! Running a prepared scenario: the fabric with the initial tensors, the ops executed in
//! order by one [`Runtime`] (one [`RunReport`] per op), the final tensors read back as
//! `.npy` arrays, the [`Report`] (`report.json`) and the output folder written only
//! after success.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use dma::{EngineConfig, Fabric};
use serde::Serialize;

use super::ops::PreparedOp;
use super::sanitize::Sanitizer;
use super::Prepared;
use crate::atomic_file::{self, Batch};
use crate::dge_route::RecordedReplays;
use crate::error::Error;
use crate::npy::{self, NpyArray};
use crate::progress::Progress;
use crate::runtime::{Mechanism, RunReport, Runtime};

/// How to execute: record the DGE route's queues, sanitize every op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    pub record: bool,
    pub sanitize: bool,
}

/// What executing the ops left: the fabric, one report per op, and the wall time of the
/// execution alone.
#[derive(Debug)]
pub struct Execution {
    /// The fabric after the last op.
    pub fabric: Fabric,
    /// Report `i` is op `i`'s.
    pub reports: Vec<RunReport>,
    /// Seconds spent executing (no parsing, placement or file I/O).
    pub wall_seconds: f64,
}

impl Prepared {
    /// A fresh fabric of the scenario's generation holding every tensor's initial bytes.
    pub fn initial_fabric(&self) -> Result<Fabric, Error> {
        let mut fabric = Fabric::new(self.generation);
        for (t, bytes) in self.tensors.iter().zip(&self.initial) {
            if let Some(bytes) = bytes {
                t.write(&mut fabric, bytes)?;
            }
        }
        Ok(fabric)
    }

    /// What the queue file `gen` records is for: a digest of the generation, every
    /// tensor's name, placement, dtype and shape, and the initial bytes, read from
    /// `initial` ([`Prepared::initial_fabric`]; `replay` refuses a file made for other
    /// ones; see [`dma::queue_file`], "Versions").
    pub fn origin(&self, initial: &Fabric) -> u64 {
        let mut text = format!("hostsim origin 1: {}\n", self.generation);
        for t in &self.tensors {
            let _ = writeln!(
                text,
                "{} {:?} {:?} {:?} {} {}",
                t.name, t.space, t.dtype, t.shape, t.offset, t.partition
            );
        }
        let _ = write!(text, "{:016x}", initial.digest());
        dma::queue_file::fnv1a64(text.as_bytes())
    }

    /// A runtime for `mechanism` with the scenario's generation and queue count.
    pub fn runtime(&self, mechanism: Mechanism) -> Result<Runtime, Error> {
        let config = EngineConfig {
            queues: self.queues,
            ..EngineConfig::default()
        };
        Runtime::with_engine_config(self.generation, mechanism, config)
    }

    /// Runs every op on `runtime` over `fabric`, in order, drawing `progress` at 0 and
    /// advancing it by one per op; the first failing op stops the run with
    /// [`Error::ScenarioOpFault`]. With a `sanitizer`, each op is checked by it first (a
    /// finding is that op's fault, before it writes anything).
    pub fn run_ops(
        &self,
        runtime: &mut Runtime,
        fabric: &mut Fabric,
        progress: &mut Progress,
        mut sanitizer: Option<&mut Sanitizer>,
    ) -> Result<Vec<RunReport>, Error> {
        progress.inc(0);
        self.ops
            .iter()
            .map(|op| {
                if let Some(s) = sanitizer.as_deref_mut() {
                    s.check(fabric, op).map_err(|e| op_fault(op, e))?;
                }
                let report = run_op(runtime, fabric, op);
                progress.inc(1);
                report
            })
            .collect()
    }

    /// Executes the scenario with its mechanism on a fresh fabric.
    pub fn execute(&self) -> Result<Execution, Error> {
        self.execute_with(self.mechanism)
    }

    /// Executes the scenario with `mechanism` on a fresh fabric.
    pub fn execute_with(&self, mechanism: Mechanism) -> Result<Execution, Error> {
        let hidden = &mut Progress::hidden(0, "run");
        let (exec, _) = self.execute_recording(mechanism, RunOptions::default(), hidden)?;
        Ok(exec)
    }

    /// [`Prepared::execute_with`] as `options` ask (also returning, when they record,
    /// the queues of every replay the DGE route ran), advancing `progress` by one per op.
    pub fn execute_recording(
        &self,
        mechanism: Mechanism,
        options: RunOptions,
        progress: &mut Progress,
    ) -> Result<(Execution, RecordedReplays), Error> {
        let mut fabric = self.initial_fabric()?;
        let mut runtime = self.runtime(mechanism)?;
        runtime.record_queues(options.record);
        let mut sanitizer = options.sanitize.then(|| Sanitizer::new(self)).transpose()?;
        let started = Instant::now();
        let reports = self.run_ops(&mut runtime, &mut fabric, progress, sanitizer.as_mut())?;
        let exec = Execution {
            fabric,
            reports,
            wall_seconds: started.elapsed().as_secs_f64(),
        };
        Ok((exec, runtime.take_recorded()))
    }

    /// Every tensor's contents on `fabric` as a `.npy` array (bf16 as raw `<u2` bits), in
    /// scenario order.
    pub fn outputs(&self, fabric: &Fabric) -> Result<Vec<(String, NpyArray)>, Error> {
        self.tensors
            .iter()
            .map(|t| {
                let a = NpyArray {
                    descr: npy::storage_descr(t.dtype).to_string(),
                    shape: t.shape.clone(),
                    data: t.read(fabric)?,
                };
                Ok((t.name.clone(), a))
            })
            .collect()
    }
}

impl Prepared {
    /// The Perfetto trace of a run of this scenario: op `i` reported `reports[i]`, and
    /// the DGE route recorded `replays` ([`crate::trace::run_trace`]).
    pub fn run_trace(
        &self,
        title: &str,
        reports: &[RunReport],
        replays: &[Vec<Vec<dma::Descriptor>>],
    ) -> Result<String, Error> {
        let ops: Vec<(String, &RunReport)> = self
            .ops
            .iter()
            .zip(reports)
            .map(|(op, r)| (op.kind.to_string(), r))
            .collect();
        crate::trace::run_trace(&crate::trace::RunInput {
            title,
            generation: self.generation,
            queues: self.queues,
            ops: &ops,
            replays,
        })
    }
}

/// Runs `op` on `runtime` over `fabric` in its tracing span; a failure is
/// [`Error::ScenarioOpFault`] naming the op.
pub fn run_op(
    runtime: &mut Runtime,
    fabric: &mut Fabric,
    op: &super::PreparedOp,
) -> Result<RunReport, Error> {
    let _span = tracing::debug_span!("scenario_op", index = op.index, op = op.kind).entered();
    runtime
        .run_lowered(fabric, &op.lowered)
        .map_err(|e| op_fault(op, e))
}

/// `e` as op `op`'s fault while running.
fn op_fault(op: &super::PreparedOp, e: Error) -> Error {
    Error::ScenarioOpFault {
        index: op.index,
        op: op.kind,
        operands: op.operands.clone(),
        source: Box::new(e),
    }
}

/// One op's line of `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpReport {
    /// The op's kind (`dma_gather`, ...; `replay` for a queue-file replay).
    pub op: String,
    /// The op's label (its `name`), left out when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The mechanisms that ran its instructions, in order of first use, `+`-joined.
    pub mechanism: String,
    /// The DGEs that generated its descriptors (`hardware`, `software`), in order of
    /// first use, `+`-joined; `null` when no instruction took the DGE route.
    pub dge: Option<String>,
    /// ISA instructions executed.
    pub instructions: u64,
    /// DMA descriptors executed.
    pub descriptors: u64,
    /// Fabric bytes stored.
    pub bytes: u64,
    /// Indices skipped under a soft OOB policy.
    pub oob_skipped: u64,
    /// Instructions whose skips raised the OOB notification (a DMA_INDIRECT skip on a
    /// side whose bound register does not set `bc_disable_oob_error_notif`).
    pub oob_notifications: u64,
    /// The timing model's estimate, ns.
    pub estimated_ns: u64,
    /// The run's warnings (what hardware may do otherwise), left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `report.json`'s `total`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TotalReport {
    pub descriptors: u64,
    pub bytes: u64,
    pub oob_skipped: u64,
    pub oob_notifications: u64,
    pub estimated_ns: u64,
    /// Seconds of execution alone (no file I/O).
    pub wall_seconds: f64,
}

/// `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub ops: Vec<OpReport>,
    pub total: TotalReport,
}

impl Report {
    /// The report of `exec`, op `i` named by `prepared.ops[i]`.
    pub fn of_run(prepared: &Prepared, exec: &Execution) -> Report {
        let ops = prepared
            .ops
            .iter()
            .zip(&exec.reports)
            .map(|(op, r)| op_report(op, r))
            .collect();
        Report::with_total(ops, exec.wall_seconds)
    }

    /// A report of `ops` whose total sums them.
    pub fn with_total(ops: Vec<OpReport>, wall_seconds: f64) -> Report {
        let sum = |f: fn(&OpReport) -> u64| ops.iter().map(f).fold(0u64, u64::saturating_add);
        let total = TotalReport {
            descriptors: sum(|o| o.descriptors),
            bytes: sum(|o| o.bytes),
            oob_skipped: sum(|o| o.oob_skipped),
            oob_notifications: sum(|o| o.oob_notifications),
            estimated_ns: sum(|o| o.estimated_ns),
            wall_seconds,
        };
        Report { ops, total }
    }

    /// `report.json`'s text.
    pub fn to_json(&self) -> String {
        // A struct of numbers and strings always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// A short table: one line per op and the total, the op and mechanism columns as wide
    /// as their longest entry (22 and 16 at least), so that the numbers stay aligned.
    pub fn table(&self) -> String {
        let label = |o: &OpReport| match &o.name {
            Some(name) => format!("{} ({name})", o.op),
            None => o.op.clone(),
        };
        let labels: Vec<String> = self.ops.iter().map(label).collect();
        let ow = labels
            .iter()
            .map(|l| l.chars().count())
            .fold(22, usize::max);
        let mw = self.ops.iter().map(|o| o.mechanism.chars().count());
        let mw = mw.fold(16, usize::max);
        let line = |cells: [&dyn std::fmt::Display; 8]| {
            let [i, op, mech, insts, descs, bytes, skipped, ns] = cells;
            format!(
                "{i:<4} {op:<ow$} {mech:<mw$} {insts:>6} {descs:>11} {bytes:>13} {skipped:>8} {ns:>14}\n"
            )
        };
        let mut out = line([
            &"#",
            &"op",
            &"mechanism",
            &"insts",
            &"descriptors",
            &"bytes",
            &"skipped",
            &"estimated ns",
        ]);
        for (i, (o, op)) in self.ops.iter().zip(&labels).enumerate() {
            out += &line([
                &i,
                op,
                &o.mechanism,
                &o.instructions,
                &o.descriptors,
                &o.bytes,
                &o.oob_skipped,
                &o.estimated_ns,
            ]);
        }
        for (i, o) in self.ops.iter().enumerate() {
            for w in &o.warnings {
                out += &format!("warning: op {i} ({}): {w}\n", o.op);
            }
        }
        let t = &self.total;
        out += &line([
            &"",
            &"total",
            &"",
            &"",
            &t.descriptors,
            &t.bytes,
            &t.oob_skipped,
            &t.estimated_ns,
        ]);
        out + &format!("execution took {:.6} s (wall clock)\n", t.wall_seconds)
    }
}

/// One op's report from its run.
pub fn op_report(op: &PreparedOp, r: &RunReport) -> OpReport {
    let distinct = |names: &mut dyn Iterator<Item = &'static str>| {
        let mut seen: Vec<&str> = Vec::new();
        for n in names {
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        seen.join("+")
    };
    let dge = distinct(&mut r.steps.iter().filter_map(|s| s.dge.map(|d| d.name())));
    OpReport {
        op: op.kind.to_string(),
        name: op.name.clone(),
        mechanism: distinct(&mut r.steps.iter().map(|s| s.taken.name())),
        dge: (!dge.is_empty()).then_some(dge),
        warnings: r.steps.iter().flat_map(|s| s.warnings.clone()).collect(),
        instructions: r.totals.instructions as u64,
        descriptors: r.totals.descriptors,
        bytes: r.totals.bytes_written,
        oob_skipped: r.totals.skipped as u64,
        oob_notifications: r.totals.notifications as u64,
        estimated_ns: r.estimated_ns(),
    }
}

/// An output folder and what goes in it: the tensors' arrays, and the report.
pub type Folder<'a> = (&'a Path, &'a [OutArray<'a>], &'a Report);

/// One `<name>.npy` of an output folder.
pub struct OutArray<'a> {
    pub name: &'a str,
    pub descr: &'a str,
    pub shape: &'a [u64],
    pub payload: Payload<'a>,
}

/// Where an [`OutArray`]'s payload comes from.
pub enum Payload<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// A tensor's final contents, streamed from the fabric as the file is written.
    Tensor(&'a super::Placed, &'a Fabric),
}

impl<'a> OutArray<'a> {
    /// `a` named `name`.
    pub fn of(name: &'a str, a: &'a NpyArray) -> OutArray<'a> {
        OutArray {
            name,
            descr: &a.descr,
            shape: &a.shape,
            payload: Payload::Bytes(&a.data),
        }
    }

    /// The final contents of every tensor of `p` on `fabric`.
    pub fn tensors(p: &'a Prepared, fabric: &'a Fabric) -> Vec<OutArray<'a>> {
        let array = |t: &'a super::Placed| OutArray {
            name: &t.name,
            descr: npy::storage_descr(t.dtype),
            shape: &t.shape,
            payload: Payload::Tensor(t, fabric),
        };
        p.tensors.iter().map(array).collect()
    }

    /// Writes the `.npy` file into `file`.
    fn write(&self, file: File, path: &Path) -> Result<(), Error> {
        let fail = |e| io_error(path, "written", e);
        let mut out = std::io::BufWriter::new(file);
        out.write_all(&npy::header(self.descr, self.shape))
            .map_err(fail)?;
        match self.payload {
            Payload::Bytes(bytes) => out.write_all(bytes).map_err(fail)?,
            Payload::Tensor(t, fabric) => t.stream(fabric, &mut out)?,
        }
        out.flush().map_err(fail)
    }
}

/// Writes a run's outputs, all or none (one [`atomic_file::Batch`]): each of `files`
/// (the SVG timeline, the trace) at its path, and in the `folder` (created if needed)
/// `<name>.npy` for every array and `report.json`. If anything fails nothing is in
/// place, and a folder this created is removed again. Call only after success.
pub fn write_outputs(files: &[(&Path, &str)], folder: Option<Folder<'_>>) -> Result<(), Error> {
    let mut batch = Batch::default();
    for (path, text) in files {
        stage(&mut batch, path, text.as_bytes())?;
    }
    let Some((dir, arrays, report)) = folder else {
        return batch.commit(io_error);
    };
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| Error::Scenario {
        what: dir.display().to_string(),
        rule: format!("the output folder cannot be created: {e}"),
    })?;
    let staged = arrays
        .iter()
        .try_for_each(|a| {
            let path = dir.join(format!("{}.npy", a.name));
            let fail = |stage, e| io_error(&path, stage, e);
            batch.stage(&path, |file| a.write(file, &path), fail)
        })
        .and_then(|()| {
            stage(
                &mut batch,
                &dir.join("report.json"),
                report.to_json().as_bytes(),
            )
        });
    let done = staged.and_then(|()| batch.commit(io_error));
    if done.is_err() && created {
        // the batch is gone (its partial files with it): the folder is empty again
        let _ = std::fs::remove_dir(dir);
    }
    done
}

/// Stages `bytes` for `path` in `batch`.
fn stage(batch: &mut Batch, path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let fail = |stage, e| io_error(path, stage, e);
    batch.stage(path, atomic_file::bytes_into(bytes, &fail), fail)
}

/// Writes `bytes` to `path` atomically ([`atomic_file::write_bytes`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    atomic_file::write_bytes(path, bytes, |stage, e| io_error(path, stage, e))
}

/// Fills `path` atomically through `write` ([`atomic_file::write_with`]).
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(File) -> Result<(), Error>,
) -> Result<(), Error> {
    atomic_file::write_with(path, write, |stage, e| io_error(path, stage, e))
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Scenario {
        what: path.display().to_string(),
        rule: format!("cannot be {what}: {e}"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scenario::{parse, prepare_with, Format, Loaded, Overrides};

    /// A `.npy` array of u32 values.
    pub(crate) fn u32_array(shape: &[u64], v: &[u32]) -> NpyArray {
        NpyArray {
            descr: "<u4".into(),
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Prepares scenario `text` whose `.npy` files are `files`.
    pub(crate) fn prepared(
        text: &str,
        files: &[(&str, NpyArray)],
        over: Overrides,
    ) -> Result<Prepared, Error> {
        let loaded = Loaded {
            scenario: parse("t.toml", text, Format::Toml)?,
            dir: Default::default(),
            file: "t.toml".into(),
        };
        let read = |p: &Path| {
            files
                .iter()
                .find(|(n, _)| Path::new(n) == p)
                .map(|(_, a)| a.clone())
                .ok_or_else(|| Error::Npy {
                    file: p.display().to_string(),
                    rule: "missing".into(),
                })
        };
        prepare_with(&loaded, over, &read)
    }

    /// The final contents of tensor `name` as little-endian words of 4 (or 2) bytes.
    fn words(out: &[(String, NpyArray)], name: &str, size: usize) -> Vec<u64> {
        let a = &out.iter().find(|(n, _)| n == name).unwrap().1;
        a.data
            .chunks(size)
            .map(|c| c.iter().rev().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
            .collect()
    }

    fn f32s(v: &[f32]) -> Vec<u64> {
        v.iter().map(|x| u64::from(x.to_bits())).collect()
    }

    /// Runs `text` with every mechanism that serves it on `generations` and checks that
    /// tensor `name` ends as `want` (words of `size` bytes) on each.
    fn check(text: &str, files: &[(&str, NpyArray)], name: &str, size: usize, want: &[u64]) {
        check_on(
            &[dma::Generation::Sunda, dma::Generation::Cayman],
            text,
            files,
            (name, size),
            want,
        )
    }

    /// [`check`] on `generations`.
    fn check_on(
        generations: &[dma::Generation],
        text: &str,
        files: &[(&str, NpyArray)],
        (name, size): (&str, usize),
        want: &[u64],
    ) {
        let mechanisms = [Mechanism::Auto, Mechanism::Reference];
        check_with(generations, &mechanisms, text, files, (name, size), want)
    }

    /// Runs `text` on `generations` with `mechanisms` (3 queues) and checks that tensor
    /// `name` ends as `want` (words of `size` bytes) on each.
    pub(crate) fn check_with(
        generations: &[dma::Generation],
        mechanisms: &[Mechanism],
        text: &str,
        files: &[(&str, NpyArray)],
        (name, size): (&str, usize),
        want: &[u64],
    ) {
        for &g in generations {
            for &m in mechanisms {
                let over = Overrides {
                    generation: Some(g),
                    mechanism: Some(m),
                    queues: Some(3),
                };
                let p = prepared(text, files, over).unwrap();
                let exec = p.execute().unwrap();
                let got = words(&p.outputs(&exec.fabric).unwrap(), name, size);
                assert_eq!(got, want, "{g} {}", m.name());
            }
        }
    }

    /// A table of 4 rows of 3 f32 (iota), an index tensor and a gather of 3 rows.
    const GATHER: &str = "[[tensor]]\nname = \"table\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4, 3]\ninit = \"iota\"\n\
         [[tensor]]\nname = \"idx\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 3]\ninit = \"idx.npy\"\n\
         [[tensor]]\nname = \"out\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [3, 3]\n\
         [[op]]\nop = \"dma_gather\"\nsrc = \"table\"\nindex = \"idx\"\ndst = \"out\"\n";

    /// [`GATHER`]'s index file: rows 2, 0 and 9 (out of range).
    fn gather_files() -> [(&'static str, NpyArray); 1] {
        [("idx.npy", u32_array(&[1, 3], &[2, 0, 9]))]
    }

    #[test]
    fn the_table_widens_its_text_columns_to_the_longest_entry() {
        let op = |name: Option<&str>, mechanism: &str| OpReport {
            op: "dma_copy".into(),
            name: name.map(String::from),
            mechanism: mechanism.into(),
            dge: None,
            instructions: 1,
            descriptors: 128,
            bytes: 32768,
            oob_skipped: 0,
            oob_notifications: 0,
            estimated_ns: 1402,
            warnings: Vec::new(),
        };
        let short = Report::with_total(vec![op(None, "dge")], 0.0).table();
        let row = short.lines().nth(1).unwrap();
        assert_eq!(row.find("dge"), Some(28), "{short}");
        let long = vec![
            op(Some("load_the_embedding_rows_into_the_tile"), "dge"),
            op(None, "reference+pool+dge+more"),
        ];
        let table = Report::with_total(long, 0.0).table();
        let lines: Vec<&str> = table.lines().collect();
        // every line's numbers end where the header's columns do
        let ends = |l: &str| l.len();
        assert!(
            lines[1..4].iter().all(|l| ends(l) == ends(lines[0])),
            "{table}"
        );
        let mech = lines[0].find("mechanism").unwrap();
        assert_eq!(lines[1].find("dge"), Some(mech), "{table}");
        assert_eq!(lines[2].find("reference"), Some(mech), "{table}");
    }

    #[test]
    fn dma_gather_skips_out_of_range_rows() {
        let text = format!("{GATHER}oob = \"skip\"\n");
        let files = gather_files();
        let want = f32s(&[6., 7., 8., 0., 1., 2., 0., 0., 0.]);
        check(&text, &files, "out", 4, &want);
        let p = prepared(&text, &files, Overrides::default()).unwrap();
        let report = Report::of_run(&p, &p.execute().unwrap());
        let op = &report.ops[0];
        assert_eq!(
            (
                op.op.as_str(),
                op.mechanism.as_str(),
                op.instructions,
                op.bytes,
                op.oob_skipped
            ),
            ("dma_gather", "dge", 1, 24, 1)
        );
        assert_eq!(report.total.descriptors, op.descriptors);
    }

    #[test]
    fn dma_scatter_add_accumulates_duplicates() {
        let text = "[[tensor]]\nname = \"g\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4, 2]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"idx\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 4]\ninit = \"idx.npy\"\n\
             [[tensor]]\nname = \"acc\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [3, 2]\n\
             [[op]]\nop = \"dma_scatter\"\nsrc = \"g\"\nindex = \"idx\"\ndst = \"acc\"\ncompute = \"add\"\nunique_indices = false\noob = \"skip\"\n";
        let files = [("idx.npy", u32_array(&[1, 4], &[1, 1, 0, 5]))];
        check(text, &files, "acc", 4, &f32s(&[4., 5., 2., 4., 0., 0.]));
    }

    #[test]
    fn dma_copy_transposes_by_patterns() {
        let text = "[[tensor]]\nname = \"m\"\nspace = \"hbm\"\ndtype = \"i32\"\nshape = [2, 3]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"t\"\nspace = \"hbm\"\ndtype = \"i32\"\nshape = [3, 2]\n\
             [[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"m\", ap = [[1, 3], [3, 2]] }\ndst = { tensor = \"t\", ap = [[2, 3], [1, 2]] }\n";
        check(text, &[], "t", 4, &[0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn dma_gather_transpose_writes_columns_to_partitions() {
        let text = "[[tensor]]\nname = \"s\"\nspace = \"hbm\"\ndtype = \"u16\"\nshape = [4, 3]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 2]\ninit = \"i.npy\"\n\
             [[tensor]]\nname = \"d\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [3, 2]\npartition = 4\n\
             [[op]]\nop = \"dma_gather_transpose\"\nsrc = \"s\"\nindex = \"i\"\ndst = \"d\"\n";
        let files = [("i.npy", u32_array(&[1, 2], &[3, 1]))];
        let trn2_on = [dma::Generation::Cayman, dma::Generation::Maverick];
        check_on(&trn2_on, text, &files, ("d", 2), &[9, 3, 10, 4, 11, 5]);
        // NKI's indirect dma_transpose is trn2 and later
        let sunda = Overrides {
            generation: Some(dma::Generation::Sunda),
            ..Overrides::default()
        };
        let e = prepared(text, &files, sunda).unwrap_err();
        assert!(
            e.to_string().contains("needs trn2 (cayman) or later"),
            "{e}"
        );
        // oob = "skip": index 7 moves nothing of its column, which keeps its zeros
        let skip = format!("{text}oob = \"skip\"\n");
        let files = [("i.npy", u32_array(&[1, 2], &[7, 1]))];
        check_on(&trn2_on, &skip, &files, ("d", 2), &[0, 3, 0, 4, 0, 5]);
        let axes = format!("{text}axes = [0, 1]\n");
        let e = prepared(&axes, &files, Overrides::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("dma_gather_transpose: axes: [0, 1] is not a permutation NKI's dma_transpose documents: [1, 0] (2-D), [2, 1, 0] (3-D) or [3, 1, 2, 0] (4-D)"),
            "{e}"
        );
    }

    #[test]
    fn nc_n_gather_zeroes_misses() {
        let text = "[[tensor]]\nname = \"d\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [2, 4]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [2, 3]\ninit = \"i.npy\"\n\
             [[tensor]]\nname = \"o\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [2, 3]\n\
             [[op]]\nop = \"nc_n_gather\"\ndata = \"d\"\nindex = \"i\"\ndst = \"o\"\n";
        let files = [("i.npy", u32_array(&[2, 3], &[3, 0, 7, 1, 1, 2]))];
        check(text, &files, "o", 4, &f32s(&[3., 0., 0., 5., 5., 6.]));
    }

    #[test]
    fn local_gather_copies_runs_at_element_offsets() {
        let text = "[[tensor]]\nname = \"s\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 8]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 1]\ninit = \"i.npy\"\n\
             [[tensor]]\nname = \"o\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 4]\n\
             [[op]]\nop = \"local_gather\"\nsrc = \"s\"\nindex = \"i\"\ndst = \"o\"\nnum_elem_per_idx = 2\nnum_valid_indices = 2\n";
        let mut idx = vec![0u8; 32];
        idx[0] = 3;
        let files = [(
            "i.npy",
            NpyArray {
                descr: "<u2".into(),
                shape: vec![16, 1],
                data: idx,
            },
        )];
        let want: Vec<u64> = (0..16u64)
            .flat_map(|p| [8 * p + 3, 8 * p + 4, 8 * p, 8 * p + 1])
            .collect();
        check(text, &files, "o", 2, &want);
    }

    #[test]
    fn embedding_update_reduces_in_index_order() {
        let text = "[[tensor]]\nname = \"t\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [3, 2]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 3]\ninit = \"i.npy\"\n\
             [[tensor]]\nname = \"d\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [1, 3, 2]\ninit = \"iota\"\npartition = 2\n\
             [[op]]\nop = \"embedding_update\"\ntable = \"t\"\nindex = \"i\"\ndata = \"d\"\nreduce = \"add\"\n";
        let files = [("i.npy", u32_array(&[1, 3], &[2, 7, 2]))];
        check(text, &files, "t", 4, &f32s(&[0., 1., 2., 3., 8., 11.]));
    }

    #[test]
    fn isa_runs_a_raw_instruction() {
        let copy = "[[tensor]]\nname = \"m\"\nspace = \"hbm\"\ndtype = \"i32\"\nshape = [2, 3]\ninit = \"iota\"\n\
             [[tensor]]\nname = \"t\"\nspace = \"hbm\"\ndtype = \"i32\"\nshape = [2, 3]\n";
        let placed = prepared(copy, &[], Overrides::default()).unwrap();
        let at = |i: usize| crate::nki::AccessPattern {
            addr: dma::FabricAddr(placed.tensors[i].offset).into(),
            ap: [[3, 2], [1, 3]],
        };
        let g = dma::Generation::Cayman;
        let none = dma::ComputeOp::None;
        let lowered = crate::nki::dma_copy(g, &at(0), &at(1), dma::Dtype::I32, none).unwrap();
        let bytes = lowered.instructions[0].encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{copy}[[op]]\nop = \"isa\"\nhex = \"0x{hex}\"\n");
        check(&text, &[], "t", 4, &[0, 1, 2, 3, 4, 5]);
        let inst = &lowered.instructions[0];
        let fields = crate::isa::text::to_toml(inst, None);
        let text = format!("{copy}[[op]]\nop = \"isa\"\n[op.fields]\n{fields}");
        check(&text, &[], "t", 4, &[0, 1, 2, 3, 4, 5]);
    }

    /// A `[2][2][3][2]` u32 tensor (iota) gathered along Y by an `isa` DMA_INDIRECT whose
    /// shape register 8 the op's `shapes` sets: rows y = 2 then y = 0 of each (w, z).
    #[test]
    fn isa_shapes_set_the_shape_registers() {
        use crate::isa::{
            BoundCheckReg, DmaIndirect1d, DmaIndirectFlags, DmaSide, IndirectDim, IndirectMode,
            ShapeReg,
        };
        use dma::{Addr4, ComputeOp, Dtype, FabricAddr, Space};
        let tensors = "[[tensor]]\nname = \"x\"\nspace = \"hbm\"\ndtype = \"u32\"\nshape = [2, 2, 3, 2]\ninit = \"iota\"\naddr = 4096\n\
             [[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 2]\ninit = \"i.npy\"\naddr = 0\n\
             [[tensor]]\nname = \"o\"\nspace = \"hbm\"\ndtype = \"u32\"\nshape = [4, 4]\naddr = 8192\n";
        let files = [("i.npy", u32_array(&[1, 2], &[2, 0]))];
        let flags = DmaIndirectFlags::new(
            IndirectMode::Src,
            true,
            false,
            IndirectDim::Y,
            IndirectDim::X,
        );
        let src = DmaSide {
            start_addr: FabricAddr(4096),
            idx_start_addr: Addr4::encode(Space::Sbuf, 0, 0).unwrap(),
            elem_size: 4,
            step_elem: 0,
            bound: BoundCheckReg::DISABLED,
        };
        let dst = DmaSide {
            start_addr: FabricAddr(8192),
            idx_start_addr: Addr4(0),
            step_elem: 1,
            ..src
        };
        let inst = DmaIndirect1d::new(flags, src, dst, 2, Dtype::U32, ComputeOp::None)
            .with_shape_reg(ShapeReg::at(8).unwrap());
        let fields = crate::isa::text::to_toml(&inst.into(), None);
        let op =
            |shapes: &str| format!("{tensors}[[op]]\nop = \"isa\"\n{shapes}[op.fields]\n{fields}");
        let text = op("shapes = [{ reg = 8, xyzw = [2, 3, 2, 2] }]\n");
        let want = [4, 5, 0, 1, 10, 11, 6, 7, 16, 17, 12, 13, 22, 23, 18, 19];
        check(&text, &files, "o", 4, &want);
        // without the shape the registers hold zeros: refused naming the extent, nothing
        // is written
        let p = prepared(&op(""), &files, Overrides::default()).unwrap();
        let e = p.execute().unwrap_err().to_string();
        assert!(
            e.ends_with("DMA_INDIRECT1D.shape_reg.x = 0: a shape's extents X, Y, Z, W (registers reg..reg+3) must each be at least 1"),
            "{e}"
        );
        // the registers a shape takes, an unknown key, a register set twice
        let rejected = [
            (
                "shapes = [{ reg = 61, xyzw = [2, 3, 2, 2] }]\n",
                "op 0 (isa): shapes[0]: BOUND_REGISTERS.reg = 61: a shape reads the four registers reg..=reg+3, so reg must be <= 60",
            ),
            (
                "shapes = [{ reg = 8, xyzw = [2, 3, 2, 2], w = 1 }]\n",
                "unknown field `w`",
            ),
            (
                "bounds = [{ reg = 10, bound = 3 }]\nshapes = [{ reg = 8, xyzw = [2, 3, 2, 2] }]\n",
                "op 0 (isa): shapes[0] (registers 8..=11) sets a register bounds[0] (registers 10..=11) already sets",
            ),
            // a shape the op sets for its own instruction is checked before anything runs
            (
                "shapes = [{ reg = 8, xyzw = [2, 3, 0, 2] }]\n",
                "op 0 (isa): DMA_INDIRECT1D.shape_reg.z = 0: a shape's extents X, Y, Z, W (registers reg..reg+3) must each be at least 1",
            ),
            (
                "shapes = [{ reg = 8, xyzw = [2, 3, 2, 4294967295] }]\n",
                "op 0 (isa): DMA_INDIRECT1D.shape_reg.elements = 34359738360: a shaped DMA_INDIRECT moves at most 2^20 elements",
            ),
        ];
        for (shapes, want) in rejected {
            let e = prepared(&op(shapes), &files, Overrides::default()).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(want), "want {want}\n got {e}");
        }
    }

    #[test]
    fn a_hard_oob_index_stops_the_run_naming_op_position_value_and_bound() {
        let p = prepared(GATHER, &gather_files(), Overrides::default()).unwrap();
        let e = p.execute().unwrap_err();
        assert_eq!(crate::scenario::exit_code(&e), 1);
        let msg = e.to_string();
        assert!(
            msg.starts_with("op 0 (dma_gather src=table index=idx dst=out) failed while running"),
            "{msg}"
        );
        assert!(
            msg.ends_with("src index 9 at position 2 is out of bounds (bound 4)"),
            "{msg}"
        );
        // an op's name labels its errors too, at run time and before
        let named = format!("{GATHER}name = \"load rows\"\n");
        let e = prepared(&named, &gather_files(), Overrides::default()).unwrap();
        let msg = e.execute().unwrap_err().to_string();
        let want = "op 0 (dma_gather name=\"load rows\" src=table index=idx dst=out) failed";
        assert!(msg.starts_with(want), "{msg}");
        let refused = format!("{named}unique_indices = false\n");
        let msg = prepared(&refused, &gather_files(), Overrides::default()).unwrap_err();
        assert!(
            msg.to_string()
                .starts_with("op 0 (dma_gather name=\"load rows\""),
            "{msg}"
        );
    }

    #[test]
    fn reports_serialize_exactly_the_issue_fields() {
        let op = OpReport {
            op: "dma_copy".into(),
            name: None,
            mechanism: "dge".into(),
            dge: Some("software".into()),
            instructions: 1,
            descriptors: 2,
            bytes: 3,
            oob_skipped: 4,
            oob_notifications: 1,
            estimated_ns: 5,
            warnings: Vec::new(),
        };
        let r = Report::with_total(vec![op.clone(), op], 0.5);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let want = serde_json::json!({
            "ops": [
                {"op": "dma_copy", "mechanism": "dge", "dge": "software", "instructions": 1, "descriptors": 2, "bytes": 3, "oob_skipped": 4, "oob_notifications": 1, "estimated_ns": 5},
                {"op": "dma_copy", "mechanism": "dge", "dge": "software", "instructions": 1, "descriptors": 2, "bytes": 3, "oob_skipped": 4, "oob_notifications": 1, "estimated_ns": 5}
            ],
            "total": {"descriptors": 4, "bytes": 6, "oob_skipped": 8, "oob_notifications": 2, "estimated_ns": 10, "wall_seconds": 0.5}
        });
        assert_eq!(v, want);
        assert_eq!(r.table().lines().count(), 5);
    }

    #[test]
    fn outputs_are_written_atomically_only_when_asked() {
        let dir = std::env::temp_dir().join(format!("hostsim-exec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = u32_array(&[2], &[1, 2]);
        let r = Report::with_total(Vec::new(), 0.0);
        write_outputs(&[], Some((&dir, &[OutArray::of("x", &a)], &r))).unwrap();
        assert_eq!(npy::read(&dir.join("x.npy")).unwrap(), a);
        assert_eq!(
            std::fs::read_to_string(dir.join("report.json")).unwrap(),
            r.to_json()
        );
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["report.json", "x.npy"]);
        let failed = write_atomic_with(&dir.join("y"), |_| {
            Err(Error::Scenario {
                what: "w".into(),
                rule: "r".into(),
            })
        });
        assert!(failed.is_err());
        assert!(!dir.join("y").exists() && !dir.join("y.partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tensors_stream_into_their_files_as_they_read() {
        // an SBUF tensor over three partitions and an HBM one, after a run
        let text = format!(
            "{GATHER}[[tensor]]\nname = \"tile\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [3, 5]\npartition = 2\ninit = \"iota\"\n"
        );
        let files = [("idx.npy", u32_array(&[1, 3], &[3, 0, 2]))];
        let p = prepared(&text, &files, Overrides::default()).unwrap();
        let exec = p.execute().unwrap();
        let dir = std::env::temp_dir().join(format!("hostsim-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Report::of_run(&p, &exec);
        let arrays = OutArray::tensors(&p, &exec.fabric);
        write_outputs(&[], Some((&dir, &arrays, &r))).unwrap();
        for (name, want) in p.outputs(&exec.fabric).unwrap() {
            assert_eq!(
                npy::read(&dir.join(format!("{name}.npy"))).unwrap(),
                want,
                "{name}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failed_outputs_leave_no_folder_they_made_and_no_timeline() {
        let base = std::env::temp_dir().join(format!("hostsim-none-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let (dir, svg) = (base.join("out"), base.join("t.svg"));
        let r = Report::with_total(Vec::new(), 0.0);
        // the second array cannot be staged (no such subfolder)
        let (x, y) = (u32_array(&[1], &[1]), u32_array(&[1], &[2]));
        let arrays = [OutArray::of("x", &x), OutArray::of("sub/y", &y)];
        let e = write_outputs(&[(&svg, "<svg/>")], Some((&dir, &arrays, &r)));
        assert!(e.unwrap_err().to_string().contains("sub/y.npy"));
        assert!(!dir.exists() && !svg.exists());
        let listed: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
        assert!(listed.is_empty(), "{listed:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
