//! # `hostsim fuzz --scenario FILE`: fuzzing a user's own scenario
//!
//! The user's tensors and ops are kept; each case edits a few things ([`mutate`]): index
//! values at a few positions, an op's OOB policy or `unique_indices`, an `isa` op's
//! bound and shape registers (only tighter), the generation. Each case is checked ([`Checker::check`]):
//!
//! - the sanitizer ([`crate::scenario::sanitize`]) stays clean on the reference route;
//! - an op that fails leaves the fabric as it was;
//! - a reduction under `unique_indices` whose moving destination indices repeat is an
//!   error (an independent count of the repeats);
//! - every route agrees with the reference, byte for byte and in the kind of error
//!   ([`super::routes::Routes`], the one cross-route comparison, which the `oob` target
//!   and the conformance suite use too);
//! - preparing and checking the edited scenario does not panic.
//!
//! A finding is shrunk (by `shrink`) to the fewest edits of the user's values and the
//! fewest ops that still show it, and written to `DIR/case-K/` as a runnable scenario.
//! The same finding (kind, op, route) is written once. Cases are a pure function of the
//! seed and the case number.

pub mod mutate;
mod shrink;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use dma::{Fabric, Generation};

use super::case::{Case, Op};
use super::routes::{panic_message, Routes};
use super::{jobs, Budget, Rng};
use crate::error::Error;
use crate::nki::ApDma;
use crate::progress::Progress;
use crate::runtime::Mechanism;
use crate::scenario::model::{OpSpec, Scenario};
use crate::scenario::sanitize::Sanitizer;
use crate::scenario::{self, Prepared};
pub use mutate::{Base, Mutation};

/// What one op did in one case (on the reference route).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It ran and skipped no index.
    Wrote,
    /// It ran and skipped at least one out-of-bounds index.
    Skipped,
    /// It failed (the case stops there).
    Errored,
}

/// A finding: which check, at which op (of the case's kept ops), on which route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// `sanitizer`, `fail-open`, `duplicates` or `routes`.
    pub check: &'static str,
    pub op: Option<usize>,
    pub mechanism: Option<Mechanism>,
    pub what: String,
}

/// A case's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check passed: each kept op's fate, up to the first that failed.
    Clean(Vec<Fate>),
    /// A check failed.
    Finding(Found),
}

/// Checks cases: the routes, built on first use and reused.
#[derive(Default)]
pub struct Checker {
    routes: Routes,
}

impl Checker {
    /// The verdict on prepared case `p` (`scenario` is what it was prepared from).
    pub fn check(&mut self, scenario: &Scenario, p: &Prepared) -> Verdict {
        let fates = match sanitized(scenario, p) {
            Ok(fates) => fates,
            Err(found) => return Verdict::Finding(found),
        };
        let (case, owners) = match as_case(p) {
            Ok(c) => c,
            Err(e) => return Verdict::Finding(found("routes", None, None, e.to_string())),
        };
        match self.routes.compare(&case) {
            Ok(_) => Verdict::Clean(fates),
            Err(d) => {
                let op = d.op.map(|i| owners[i]);
                Verdict::Finding(found("routes", op, Some(d.mechanism), d.what))
            }
        }
    }
}

fn found(check: &'static str, op: Option<usize>, m: Option<Mechanism>, what: String) -> Found {
    Found {
        check,
        op,
        mechanism: m,
        what,
    }
}

/// The reference route op by op with the sanitizer: each op's fate, or the finding.
fn sanitized(scenario: &Scenario, p: &Prepared) -> Result<Vec<Fate>, Found> {
    let setup = |e: Error| found("routes", None, None, format!("cannot run: {e}"));
    let mut fabric = p.initial_fabric().map_err(setup)?;
    let mut runtime = p.runtime(Mechanism::Reference).map_err(setup)?;
    let mut sanitizer = Sanitizer::new(p).map_err(setup)?;
    let mut fates = Vec::new();
    for (i, (spec, op)) in scenario.ops.iter().zip(&p.ops).enumerate() {
        if let Err(e) = sanitizer.check(&fabric, op) {
            return Err(found("sanitizer", Some(i), None, format!("op {i}: {e}")));
        }
        let before = fabric.clone();
        let repeats = unique_repeats(spec, p, &op.lowered.ap_dmas, &fabric);
        match runtime.run_lowered(&mut fabric, &op.lowered) {
            Ok(report) => {
                if let Some(what) = repeats {
                    return Err(found(
                        "duplicates",
                        Some(i),
                        None,
                        format!("op {i}: {what}"),
                    ));
                }
                let skipped = report.steps.iter().any(|s| s.outcome.skips() > 0);
                fates.push(if skipped { Fate::Skipped } else { Fate::Wrote });
            }
            Err(e) => {
                if let Some(at) = fabric.first_difference(&before) {
                    let what = format!("op {i} failed ({e}) but changed the fabric at {at}");
                    return Err(found("fail-open", Some(i), None, what));
                }
                fates.push(Fate::Errored);
                break;
            }
        }
    }
    Ok(fates)
}

/// Why op `spec` should have failed on duplicates: a reduction promised unique whose
/// moving destination indices repeat (counted here, apart from the routes' own rule).
fn unique_repeats(spec: &OpSpec, p: &Prepared, aps: &[ApDma], fabric: &Fabric) -> Option<String> {
    let reduces = |c: &crate::scenario::model::Compute| *c != crate::scenario::model::Compute::None;
    match spec {
        OpSpec::DmaScatter(o) if reduces(&o.compute) && o.unique_indices != Some(false) => {
            let index = p.tensors.iter().find(|t| t.name == o.index)?;
            let rows = p.tensors.iter().find(|t| t.name == o.dst)?.shape[0];
            let values = mutate::values(index, fabric).ok()?;
            repeat(values.into_iter().filter(|&v| 0 <= v && (v as u64) < rows))
        }
        OpSpec::DmaCopy(_) => aps.iter().find_map(|d| ap_repeats(d, fabric)),
        _ => None,
    }
}

/// A reduction DMA promised unique whose in-bounds destination indices repeat (where
/// the source side is indexed too, both indices of a position must be in bounds).
fn ap_repeats(d: &ApDma, fabric: &Fabric) -> Option<String> {
    if d.op == dma::ComputeOp::None || !d.unique_indices {
        return None;
    }
    let dst = d.dst.index_values(fabric).ok()??;
    let src = match d.coupled() {
        true => d.src.index_values(fabric).ok()?,
        false => None,
    };
    let (db, sb) = (d.dst.index_bound(), d.src.index_bound());
    let moving = dst
        .iter()
        .enumerate()
        .filter(|(k, &v)| u64::from(v) < db && src.as_ref().is_none_or(|s| u64::from(s[*k]) < sb));
    repeat(moving.map(|(_, &v)| i64::from(v)))
}

/// The first value `values` repeats, in words.
fn repeat(values: impl Iterator<Item = i64>) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    for (k, v) in values.enumerate() {
        if !seen.insert(v) {
            return Some(format!(
                "destination index {v} repeats (moving position {k}) under unique_indices, \
                 yet the op ran"
            ));
        }
    }
    None
}

/// The prepared scenario as a stream case for [`Routes`]: each op's register settings,
/// instructions and access-pattern DMAs in order; `owners[i]` is the op of stream op `i`.
fn as_case(p: &Prepared) -> Result<(Case, Vec<usize>), Error> {
    let mut stream = Vec::new();
    let mut owners = Vec::new();
    for (i, op) in p.ops.iter().enumerate() {
        let l = &op.lowered;
        if !l.bounds.is_empty() || !l.shapes.is_empty() {
            let settings = crate::nki::Lowered {
                bounds: l.bounds.clone(),
                shapes: l.shapes.clone(),
                ..crate::nki::Lowered::default()
            };
            stream.push(Op::Set(Box::new(settings)));
        }
        stream.extend(l.instructions.iter().map(|inst| Op::Inst(*inst)));
        stream.extend(l.ap_dmas.iter().map(|d| Op::Ap(Box::new(d.clone()))));
        owners.resize(stream.len(), i);
    }
    let case = Case {
        generation: p.generation,
        fabric: p.initial_fabric()?,
        regions: Vec::new(),
        bounds: Vec::new(),
        shapes: Vec::new(),
        tensors: Vec::new(),
        labels: vec!["scenario"; stream.len()],
        stream,
    };
    Ok((case, owners))
}

/// The settings of a `fuzz --scenario` run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub scenario: PathBuf,
    pub seed: u64,
    pub budget: Budget,
    /// `None`: the scenario's own generation; `all`: the four.
    pub generation: Option<String>,
    pub out: PathBuf,
    /// Threads that run cases ([`jobs::in_order`]).
    pub jobs: usize,
}

/// Per op, generation and policy: cases, and how many wrote, skipped or errored.
type Tally = BTreeMap<(usize, String, &'static str, String), [u64; 4]>;

/// A run's result.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub cases: u64,
    /// Cases whose edits made a scenario the CLI refuses.
    pub refused: u64,
    /// Cases that found something (a new finding or one found before).
    pub found: u64,
    /// Distinct findings (check, op, route), each with its reproducer folder.
    pub findings: Vec<(Found, PathBuf)>,
    /// Cases whose edits could not be drawn: the draw panicked.
    pub generator_panics: u64,
    pub interrupted: bool,
    tally: Tally,
}

impl Summary {
    /// The last line: `fuzz: N cases, M findings`, and `, K generator panics` when
    /// there were any.
    pub fn line(&self) -> String {
        let panics = match self.generator_panics {
            0 => String::new(),
            k => format!(", {k} generator panics"),
        };
        format!(
            "fuzz: {} cases, {} findings{panics}",
            self.cases,
            self.findings.len()
        )
    }

    /// The table of op x generation x policy.
    pub fn table(&self) -> String {
        // the policy column as wide as its longest label (`oob=skip unique=false`)
        let w = self.tally.keys().map(|k| k.3.len()).fold(18, usize::max);
        let mut t = format!(
            "op  kind                   generation  {:<w$}  cases    wrote  skipped  errored\n",
            "policy"
        );
        for ((op, kind, g, policy), [cases, wrote, skipped, errored]) in &self.tally {
            let _ = writeln!(
                t,
                "{op:<3} {kind:<22} {g:<11} {policy:<w$} {cases:>7} {wrote:>8} {skipped:>8} {errored:>8}"
            );
        }
        let _ = writeln!(t, "refused (edits the CLI rejects): {}", self.refused);
        let _ = writeln!(
            t,
            "found (cases with a finding, new or seen before; not in the rows): {}",
            self.found
        );
        t
    }

    fn count(&mut self, scenario: &Scenario, keep: &[bool], g: Generation, fates: &[Fate]) {
        let originals = (0..keep.len()).filter(|&i| keep[i]);
        for ((op, spec), fate) in originals.zip(&scenario.ops).zip(fates) {
            let key = (op, spec.kind().to_string(), g.name(), policy(spec));
            let row = self.tally.entry(key).or_default();
            row[0] += 1;
            row[1 + *fate as usize] += 1;
        }
    }
}

/// An op's OOB policy and duplicate promise, as the table shows them.
fn policy(spec: &OpSpec) -> String {
    let oob = |o: &crate::scenario::model::Oob| format!("oob={}", o.name());
    let unique = |u: Option<bool>| u.map(|u| format!(" unique={u}")).unwrap_or_default();
    match spec {
        OpSpec::DmaGather(o) => oob(&o.oob),
        OpSpec::DmaScatter(o) => oob(&o.oob) + &unique(o.unique_indices),
        OpSpec::DmaGatherTranspose(o) => oob(&o.oob),
        OpSpec::DmaCopy(o) => {
            let (src, dst) = (o.src.vector_offset(), o.dst.vector_offset());
            // the policy acts on indices and on run-time start addresses
            let scalar = o.src.scalar_offset().or(o.dst.scalar_offset());
            let oob = match src.or(dst).or(scalar) {
                Some(_) => oob(&o.oob.unwrap_or_default()),
                None => "-".into(),
            };
            oob + &unique(dst.map(|_| o.unique_indices.unwrap_or(true)))
        }
        _ => "-".into(),
    }
}

/// The generations `--generation` names for `scenario` (default: its own).
fn generations(g: Option<&str>, own: Generation) -> Result<Vec<Generation>, Error> {
    match g {
        None => Ok(vec![own]),
        Some("all") => Ok(Generation::ALL.to_vec()),
        Some(name) => Ok(vec![Generation::from_name(name)?]),
    }
}

/// Runs `plan` until its budget is spent or `stop` is raised, emitting each finding
/// (and its reproducer) as it is made, then the table and the summary line.
pub fn run(plan: &Plan, stop: &AtomicBool, emit: &mut dyn FnMut(&str)) -> Result<Summary, Error> {
    let loaded = scenario::load(&plan.scenario)?;
    let own = loaded.scenario.generation.0;
    let base = Base::new(loaded, generations(plan.generation.as_deref(), own)?)?;
    for (g, why) in &base.skipped {
        emit(&format!(
            "generation {g} skipped: the scenario is invalid there: {why}"
        ));
    }
    let total = match plan.budget {
        Budget::Iters(n) => n,
        Budget::Seconds(_) => 0,
    };
    let mut progress = Progress::new(total, "fuzz scenario");
    let mut shrinker = Checker::default();
    let mut summary = Summary::default();
    let work = jobs::Work {
        state: Checker::default,
        case: |checker: &mut Checker, index| -> Result<(Mutation, Came), String> {
            let m = drawn(&base, Rng::case_seed(plan.seed, index))?;
            let came = case(&base, checker, &m);
            Ok((m, came))
        },
    };
    let ran = jobs::in_order(plan.jobs, plan.budget, stop, work, |index, drawn| {
        summary.cases += 1;
        progress.inc(1);
        let (m, came) = match drawn {
            Ok(case) => case,
            Err(message) => {
                summary.generator_panics += 1;
                let again = format!(
                    "hostsim fuzz --scenario {} --seed {} --iters {}",
                    plan.scenario.display(),
                    plan.seed,
                    index + 1
                );
                let line = format!(
                    "generator panic in case {index}: {message}; make it again with `{again}`"
                );
                return progress.aside(|| emit(&line));
            }
        };
        let f = match came {
            Came::Refused => return summary.refused += 1,
            Came::Clean(scenario, fates) => {
                return summary.count(&scenario, &m.keep, m.generation, &fates)
            }
            Came::Found(f) => f,
        };
        summary.found += 1;
        let finding = (index, m, f);
        progress.aside(|| report(plan, &base, &mut shrinker, finding, &mut summary, emit));
    });
    summary.interrupted = ran.interrupted;
    progress.finish();
    emit(summary.table().trim_end());
    emit(&summary.line());
    Ok(summary)
}

/// The case of `seed` drawn from `base`, or the message of the draw's panic (a fault of
/// the fuzzer itself: there is no scenario to write a reproducer of).
fn drawn(base: &Base, seed: u64) -> Result<Mutation, String> {
    catch_unwind(AssertUnwindSafe(|| base.draw(&mut Rng::new(seed))))
        .map_err(|payload| panic_message(payload.as_ref()))
}

/// What a case came to, on the thread that ran it.
enum Came {
    /// Its edits made a scenario the CLI refuses.
    Refused,
    /// Every check passed: the edited scenario and its kept ops' fates.
    Clean(Scenario, Vec<Fate>),
    /// A check failed.
    Found(Found),
}

/// Runs case `m`. A panic while its scenario is prepared or checked (bad input must get
/// an error, never a panic) is a finding; `checker` is then built again, as the panic may
/// have left its routes half-way through an op.
fn case(base: &Base, checker: &mut Checker, m: &Mutation) -> Came {
    let ran = catch_unwind(AssertUnwindSafe(|| {
        let (scenario, p) = base.prepare(m)?;
        Some(match checker.check(&scenario, &p) {
            Verdict::Clean(fates) => Came::Clean(scenario, fates),
            Verdict::Finding(f) => Came::Found(f.with_original_op(&m.keep)),
        })
    }));
    match ran {
        Ok(came) => came.unwrap_or(Came::Refused),
        Err(payload) => {
            *checker = Checker::default();
            let message = panic_message(payload.as_ref());
            let what = format!("preparing or checking the edited scenario panicked: {message}");
            Came::Found(found("panic", None, None, what))
        }
    }
}

impl Found {
    /// The finding with its op numbered in the user's scenario (not among the kept).
    fn with_original_op(mut self, keep: &[bool]) -> Found {
        self.op = self
            .op
            .and_then(|i| (0..keep.len()).filter(|&o| keep[o]).nth(i));
        self
    }

    /// What makes two findings the same one.
    fn signature(&self) -> (&'static str, Option<usize>, Option<Mechanism>) {
        (self.check, self.op, self.mechanism)
    }
}

/// A new finding of case `index`: shrunk, written and emitted (a repeat of an earlier
/// one is only counted in the table as nothing).
fn report(
    plan: &Plan,
    base: &Base,
    checker: &mut Checker,
    (index, m, f): (u64, Mutation, Found),
    summary: &mut Summary,
    emit: &mut dyn FnMut(&str),
) {
    if summary
        .findings
        .iter()
        .any(|(g, _)| g.signature() == f.signature())
    {
        return;
    }
    let (m, f) = shrink::shrink(base, checker, m, f);
    // the next folder not taken, so that an earlier run's reproducers stay
    let mut k = summary.findings.len();
    while plan.out.join(format!("case-{k}")).exists() {
        k += 1;
    }
    let dir = plan.out.join(format!("case-{k}"));
    emit(&format!(
        "finding in case {index} ({}): {}",
        f.check, f.what
    ));
    match shrink::write(&dir, base, &m, &f, (plan.seed, index)) {
        Ok(command) => {
            emit(&format!("reproducer: {}", dir.display()));
            emit(&format!("  {command}"));
        }
        Err(e) => emit(&format!("reproducer not written: {e}")),
    }
    summary.findings.push((f, dir));
}

/// The folder a reproducer's command names.
pub fn shown(dir: &Path) -> String {
    dir.join("scenario.toml").display().to_string()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::dge_route::plant;
    use crate::scenario::examples::{BOUND_REGISTER_INDICES, EXAMPLES};

    fn examples() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hostsim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Fuzzes `scenario` for `iters` cases on `jobs` threads; the summary and the case of
    /// the first finding.
    fn fuzz(scenario: PathBuf, (iters, jobs): (u64, usize), out: &Path) -> (Summary, Option<u64>) {
        let plan = Plan {
            scenario,
            seed: 1,
            budget: Budget::Iters(iters),
            generation: None,
            out: out.to_path_buf(),
            jobs,
        };
        let mut first = None;
        let mut lines = |l: &str| {
            let case = l
                .strip_prefix("finding in case ")
                .and_then(|r| r.split(' ').next());
            first = first.or(case.and_then(|c| c.parse().ok()));
        };
        let s = run(&plan, &AtomicBool::new(false), &mut lines).unwrap();
        (s, first)
    }

    #[test]
    fn the_bound_register_overrun_is_found_and_minimized_to_one_position() {
        let out = temp("fuzz-bound");
        let (s, first) = fuzz(
            examples().join("bound_register/scenario.toml"),
            (300, 2),
            &out,
        );
        println!("the overrun was found in case {first:?}");
        assert_eq!(s.findings.len(), 1, "{}", s.line());
        let (f, dir) = &s.findings[0];
        assert_eq!((f.check, f.op), ("sanitizer", Some(0)));
        assert!(
            f.what
                .contains("tensor 1 (next), which the op does not name"),
            "{}",
            f.what
        );
        let idx = crate::npy::read(&dir.join("idx.npy")).unwrap();
        let values: Vec<u32> = idx
            .data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let changed: Vec<usize> = (0..8)
            .filter(|&k| values[k] != BOUND_REGISTER_INDICES[k])
            .collect();
        assert_eq!(changed.len(), 1, "{values:?}");
        let text = std::fs::read_to_string(dir.join("finding.txt")).unwrap();
        assert!(text.contains("--sanitize"), "{text}");
        // the reproducer runs, and the sanitizer stops it
        let p = scenario::prepare(
            &scenario::load(&dir.join("scenario.toml")).unwrap(),
            Default::default(),
        )
        .unwrap();
        let options = scenario::exec::RunOptions {
            record: false,
            sanitize: true,
        };
        let hidden = &mut Progress::hidden(0, "t");
        let e = p
            .execute_recording(p.mechanism, options, hidden)
            .unwrap_err();
        assert_eq!(scenario::exit_code(&e), 1);
        let _ = std::fs::remove_dir_all(&out);
    }

    /// The bound_register example with its bound at the table's 1000 rows: an index of
    /// 1000 is then a hard error on every route.
    fn tight_bound(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let text = std::fs::read_to_string(examples().join("bound_register/scenario.toml"));
        let text = text.unwrap().replace("bound = 2000", "bound = 1000");
        std::fs::copy(
            examples().join("bound_register/idx.npy"),
            dir.join("idx.npy"),
        )
        .unwrap();
        std::fs::write(dir.join("scenario.toml"), text).unwrap();
        dir.join("scenario.toml")
    }

    /// The planted bug "a route that skips instead of erroring at `bound`" (the DGE
    /// route, [`plant`]): the cross-route comparison catches it; without it the same
    /// cases are clean.
    #[test]
    fn a_route_skipping_at_the_bound_is_caught() {
        let dir = temp("fuzz-plant");
        let scenario = tight_bound(&dir);
        let (clean, _) = fuzz(scenario.clone(), (300, 2), &dir.join("out-clean"));
        assert_eq!(clean.findings.len(), 0, "{}", clean.line());
        plant::set_skip_at_bound(true);
        // one thread, this one: the plant is per thread, so tests running beside stay clean
        let (s, first) = fuzz(scenario, (300, 1), &dir.join("out"));
        plant::set_skip_at_bound(false);
        println!("the skip-at-bound mutant was caught in case {first:?}");
        assert_eq!(s.findings.len(), 1, "{}", s.line());
        // one op: its rows, the refused and the found cases are every case
        let rows: u64 = s.tally.values().map(|r| r[0]).sum();
        assert!(s.found >= 1);
        assert_eq!(rows + s.refused + s.found, s.cases, "{}", s.table());
        let (f, _) = &s.findings[0];
        assert_eq!((f.check, f.mechanism), ("routes", Some(Mechanism::Dge)));
        assert!(f.what.contains("IndexOutOfBounds"), "{}", f.what);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A planted panic in the preparation of every edited scenario: each case is a
    /// finding, shrunk to one edit and written, and the run goes on to its budget.
    #[test]
    fn a_panic_preparing_an_edited_scenario_is_a_finding_and_the_run_goes_on() {
        let out = temp("fuzz-prepare-panic");
        mutate::plant::EDITED_PANICS.with(|p| p.set(true));
        let (s, first) = fuzz(examples().join("embedding/scenario.toml"), (20, 1), &out);
        mutate::plant::EDITED_PANICS.with(|p| p.set(false));
        assert_eq!((s.cases, s.found, first), (20, 20, Some(0)), "{}", s.line());
        assert_eq!(s.findings.len(), 1, "{}", s.line());
        let (f, dir) = &s.findings[0];
        assert_eq!((f.check, f.op, f.mechanism), ("panic", None, None));
        assert!(
            f.what
                .contains("planted: an edited scenario's preparation fails"),
            "{}",
            f.what
        );
        let text = std::fs::read_to_string(dir.join("finding.txt")).unwrap();
        let changes = text.split("changes from").nth(1).unwrap_or_default();
        let edits = changes.lines().filter(|l| l.starts_with("  ")).count();
        assert_eq!(edits, 1, "{text}");
        assert!(dir.join("scenario.toml").exists());
        let _ = std::fs::remove_dir_all(&out);
    }

    /// A planted panic in the draw: counted, reported with the command that makes the
    /// case again, and the run goes on to its budget.
    #[test]
    fn a_panic_drawing_a_case_is_reported_and_counted() {
        let out = temp("fuzz-draw-panic");
        let scenario = examples().join("embedding/scenario.toml");
        let plan = Plan {
            scenario: scenario.clone(),
            seed: 5,
            budget: Budget::Iters(3),
            generation: None,
            out: out.clone(),
            jobs: 1,
        };
        let mut lines = Vec::new();
        mutate::plant::DRAW_PANICS.with(|p| p.set(true));
        let s = run(&plan, &AtomicBool::new(false), &mut |l: &str| {
            lines.push(l.to_string())
        });
        mutate::plant::DRAW_PANICS.with(|p| p.set(false));
        let s = s.unwrap();
        assert_eq!((s.cases, s.generator_panics, s.findings.len()), (3, 3, 0));
        assert_eq!(s.line(), "fuzz: 3 cases, 0 findings, 3 generator panics");
        let again = format!(
            "hostsim fuzz --scenario {} --seed 5 --iters 3",
            scenario.display()
        );
        let third = "generator panic in case 2: planted: the draw fails; make it again with";
        assert!(lines.contains(&format!("{third} `{again}`")), "{lines:?}");
        assert!(!out.exists(), "nothing to write");
    }

    #[test]
    fn every_shipped_example_fuzzes_clean_for_a_few_cases() {
        let out = temp("fuzz-examples");
        // bound_register is the example of a finding (its bound register is twice its
        // table): the test above fuzzes it
        for name in EXAMPLES.into_iter().filter(|&n| n != "bound_register") {
            let (s, _) = fuzz(examples().join(name).join("scenario.toml"), (12, 2), &out);
            let found: Vec<&str> = s.findings.iter().map(|(f, _)| f.what.as_str()).collect();
            assert_eq!(found, Vec::<&str>::new(), "{name}");
            assert_eq!(s.cases, 12);
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    /// Found by an audit: a copy whose scalar offset is skipped under `oob = "skip"` was
    /// tallied as having written, under no policy.
    #[test]
    fn a_skipped_scalar_offset_is_tallied_as_skipped_under_its_policy() {
        let out = temp("fuzz-moe");
        let (s, _) = fuzz(examples().join("moe_expert/scenario.toml"), (12, 2), &out);
        let inactive: Vec<_> = s.tally.iter().filter(|(k, _)| k.0 == 1).collect();
        assert!(!inactive.is_empty(), "{}", s.table());
        for ((_, _, _, policy), [_, _, skipped, _]) in inactive {
            assert_eq!(policy, "oob=skip");
            assert!(*skipped > 0, "{}", s.table());
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn the_same_seed_draws_the_same_cases() {
        let loaded = scenario::load(&examples().join("embedding_tile/scenario.toml")).unwrap();
        let base = Base::new(loaded, vec![Generation::Cayman]).unwrap();
        assert_eq!(base.indices.len(), 1);
        let draw = |i| base.draw(&mut Rng::new(Rng::case_seed(3, i)));
        for i in 0..20 {
            assert_eq!(draw(i), draw(i));
        }
        assert_ne!(
            (0..20).map(draw).collect::<Vec<_>>(),
            (20..40).map(draw).collect::<Vec<_>>()
        );
    }

    /// Found by an audit: a column view reads a quarter of its tile, and edits of the rest
    /// changed nothing any op reads.
    #[test]
    fn edits_land_only_on_the_positions_an_index_view_reads() {
        let loaded = scenario::load(&examples().join("index_column/scenario.toml")).unwrap();
        let mut base = Base::new(loaded, vec![Generation::Cayman]).unwrap();
        let t = &base.indices[0];
        assert_eq!(t.name, "i_sb");
        // the four columns' views read every element, column by column
        let read = t.read.as_ref().unwrap();
        assert_eq!(read.len(), 512);
        assert_eq!(&read[..3], &[0, 4, 8]);
        assert_eq!(read[128], 1);
        // as if only column 2 were read
        base.indices[0].read = Some((0..128).map(|p| p * 4 + 2).collect());
        for i in 0..200 {
            let m = base.draw(&mut Rng::new(Rng::case_seed(5, i)));
            for e in &m.edits {
                if let mutate::Edit::Value { position, .. } = *e {
                    assert_eq!(position % 4, 2, "an edit at {position}");
                }
            }
        }
    }
}
