//! # The built-in differential fuzzer (`hostsim fuzz`)
//!
//! Deterministic, edge-biased random cases for five targets, each checked against an
//! independent answer:
//!
//! - [`Target::Ivp`] ([`ivp`]): the IVP lane ops and the SuperGather against their
//!   closed forms;
//! - [`Target::Dge`] ([`mod@dge`]): descriptor generation for indirect row gathers: no
//!   descriptor outside the fabric, the minimal count, the OOB policy honoured;
//! - [`Target::Dma`] ([`mod@dma`]): descriptor queues replayed by the async engine against
//!   [`::dma::execute_sequential`];
//! - [`Target::Oob`] ([`oob`], [`mod@ap`], [`routes`]): streams of instructions and
//!   access-pattern DMAs aimed at every OOB policy of every datapath, run by the
//!   reference, the POOL kernels and the DGE + DMA engine, comparing fabric bytes,
//!   outcomes and error kinds ([`routes`] is the one cross-route comparison, [`oob`] the
//!   one stream generator: `--scenario` and the conformance suite use them too);
//! - [`Target::Isa`] ([`isa`]): random 64-byte structs: decode and validate never
//!   panic, valid ones re-encode identically.
//!
//! [`Target::All`] takes the five in turn. A case is a pure function of its seed
//! ([`Rng::case_seed`] of the run seed and the case number) or, for libFuzzer, of its
//! bytes ([`case_from_bytes`]). [`jobs`] runs cases on several threads and hands them
//! back in case order. Panics are caught and count as mismatches. A
//! [`Finding`] carries the whole input so [`repro`] can write a self-contained
//! reproducer.

pub mod ap;
pub mod case;
pub mod command;
pub mod corpus;
pub mod dge;
pub mod dma;
pub mod isa;
pub mod ivp;
pub mod jobs;
pub mod oob;
pub mod repro;
pub mod rng;
pub mod routes;
pub mod scenario;

pub use rng::Rng;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;

use ::dma::Generation;

use crate::error::Error;
use crate::runtime::Mechanism;

/// What a fuzz run exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// IVP lane ops vs the closed form.
    Ivp,
    /// DGE descriptor generation vs its closed form.
    Dge,
    /// DMA queue replay vs the sequential loop.
    Dma,
    /// Every OOB policy of every datapath, across the routes.
    Oob,
    /// Random 64-byte structs through decode and validate.
    Isa,
    /// The five in turn.
    All,
}

impl Target {
    /// The five concrete targets, in the order [`Target::All`] takes them.
    pub const EACH: [Target; 5] = [
        Target::Ivp,
        Target::Dge,
        Target::Dma,
        Target::Oob,
        Target::Isa,
    ];

    /// `ivp`, `dge`, `dma`, `oob`, `isa` or `all`.
    pub fn name(self) -> &'static str {
        match self {
            Target::Ivp => "ivp",
            Target::Dge => "dge",
            Target::Dma => "dma",
            Target::Oob => "oob",
            Target::Isa => "isa",
            Target::All => "all",
        }
    }

    /// Parses [`Target::name`].
    pub fn from_name(name: &str) -> Result<Target, Error> {
        Target::EACH
            .into_iter()
            .chain([Target::All])
            .find(|t| t.name() == name)
            .ok_or_else(|| Error::FuzzTarget {
                target: name.to_string(),
            })
    }

    /// The concrete target of case `index`.
    pub fn of_case(self, index: u64) -> Target {
        match self {
            Target::All => Target::EACH[(index % Target::EACH.len() as u64) as usize],
            t => t,
        }
    }
}

/// One generated input.
#[derive(Clone, Debug)]
pub enum Input {
    /// An `ivp` case.
    Ivp(ivp::LaneCase),
    /// A `dge` case (boxed, as the other fabric-holding cases: a fabric is large).
    Dge(Box<dge::DgeCase>),
    /// A `dma` case.
    Dma(Box<dma::QueueCase>),
    /// An `oob` stream case.
    Oob(Box<case::Case>),
    /// An `isa` case.
    Isa([u8; crate::isa::INSTRUCTION_BYTES]),
}

impl Input {
    /// The case of the concrete `target` drawn from `rng` (`generation` forces one).
    pub fn generate(target: Target, rng: Rng, generation: Option<Generation>) -> Input {
        match target {
            Target::Ivp => Input::Ivp(ivp::case(rng)),
            Target::Dge => Input::Dge(Box::new(dge::case(rng, generation))),
            Target::Dma => Input::Dma(Box::new(dma::case(rng, generation))),
            Target::Isa => Input::Isa(isa::case(rng)),
            Target::Oob | Target::All => Input::Oob(Box::new(oob::case(rng, generation))),
        }
    }

    /// The concrete target the input belongs to.
    pub fn target(&self) -> Target {
        match self {
            Input::Ivp(_) => Target::Ivp,
            Input::Dge(_) => Target::Dge,
            Input::Dma(_) => Target::Dma,
            Input::Oob(_) => Target::Oob,
            Input::Isa(_) => Target::Isa,
        }
    }
}

/// The input libFuzzer's `data` stands for: the first byte picks the target, the rest
/// drives every choice ([`Rng::from_bytes`]). The same generators as `hostsim fuzz`.
pub fn case_from_bytes(data: &[u8]) -> Input {
    let (first, rest) = data.split_first().map_or((0, data), |(f, r)| (*f, r));
    let target = Target::EACH[usize::from(first) % Target::EACH.len()];
    Input::generate(target, Rng::from_bytes(rest), None)
}

/// A mismatch or a panic.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The case's seed (`None` for an input made from bytes).
    pub case_seed: Option<u64>,
    /// The generation the run forced on every case (the seed alone regenerates the
    /// case only together with it).
    pub generation: Option<Generation>,
    /// The input, whole.
    pub input: Input,
    /// The route that disagreed, for `oob` cases.
    pub mechanism: Option<Mechanism>,
    /// The op of an `oob` stream where the routes disagreed (`None`: at the end, or
    /// unknown); the reproducer's scenario stops after it.
    pub op: Option<usize>,
    /// What differed.
    pub what: String,
}

/// Why an input failed its check: the route and the op (for `oob` cases), what differed.
struct Failure {
    mechanism: Option<Mechanism>,
    op: Option<usize>,
    what: String,
}

impl Failure {
    /// A failure without a route or an op.
    fn plain(what: String) -> Failure {
        Failure {
            mechanism: None,
            op: None,
            what,
        }
    }
}

/// What checks an input: the routes and engines, built on first use and reused.
#[derive(Default)]
pub struct Checker {
    routes: routes::Routes,
    engines: Option<dma::Engines>,
}

impl Checker {
    /// Nothing built yet.
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Checks `input`; `Err` is the disagreeing route (if any) and what differed.
    /// Panics are caught.
    pub fn check(&mut self, input: &Input) -> Result<(), (Option<Mechanism>, String)> {
        self.failure(input).map_err(|f| (f.mechanism, f.what))
    }

    /// [`Checker::check`], with the op an `oob` stream failed at.
    fn failure(&mut self, input: &Input) -> Result<(), Failure> {
        let outcome = catch_unwind(AssertUnwindSafe(|| self.check_inner(input)));
        outcome.unwrap_or_else(|p| {
            self.engines = None;
            self.routes = routes::Routes::new();
            let what = format!("panicked: {}", routes::panic_message(p.as_ref()));
            Err(Failure::plain(what))
        })
    }

    /// Checks the case of `seed` (drawn with `generation` forced, if any): its
    /// [`Finding`] if it fails.
    pub fn finding(
        &mut self,
        seed: u64,
        generation: Option<Generation>,
        input: Input,
    ) -> Option<Finding> {
        let f = self.failure(&input).err()?;
        Some(Finding {
            case_seed: Some(seed),
            generation,
            input,
            mechanism: f.mechanism,
            op: f.op,
            what: f.what,
        })
    }

    fn check_inner(&mut self, input: &Input) -> Result<(), Failure> {
        let plain = |r: Result<(), String>| r.map_err(Failure::plain);
        match input {
            Input::Ivp(c) => plain(ivp::check(c)),
            Input::Dge(c) => plain(dge::check(c)),
            Input::Isa(bytes) => plain(isa::check(bytes).map(|_| ())),
            Input::Dma(c) => {
                if self.engines.is_none() {
                    self.engines = Some(dma::Engines::new().map_err(Failure::plain)?);
                }
                match &self.engines {
                    Some(engines) => plain(engines.check(c)),
                    None => Err(Failure::plain("no DMA engine".to_string())),
                }
            }
            Input::Oob(c) => {
                let stats = self.routes.compare(c).map_err(|d| Failure {
                    mechanism: Some(d.mechanism),
                    op: d.op,
                    what: d.what,
                })?;
                match stats.unexpected_stand_in() {
                    None => Ok(()),
                    Some((route, label)) => Err(Failure::plain(format!(
                        "the reference stood in for {route} on a {label} op, which {route} should serve (allowed stand-ins: {:?})",
                        routes::STAND_INS
                    ))),
                }
            }
        }
    }
}

/// How long a run goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Exactly this many cases.
    Iters(u64),
    /// Cases until this much wall time has passed.
    Seconds(u64),
}

/// One fuzz run's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What to fuzz.
    pub target: Target,
    /// The run seed.
    pub seed: u64,
    /// How long.
    pub budget: Budget,
    /// A generation every case uses (else each case draws one).
    pub generation: Option<Generation>,
}

/// A run's result.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Cases run.
    pub cases: u64,
    /// Mismatches and panics found (every one is in `findings`).
    pub findings: Vec<Finding>,
    /// Cases whose generator panicked (a fault of the fuzzer itself).
    pub generator_panics: Vec<GeneratorPanic>,
    /// Whether the run stopped early (the stop flag was raised).
    pub interrupted: bool,
}

impl Summary {
    /// Keeps what a case found.
    pub fn record(&mut self, result: CaseResult) {
        match result {
            CaseResult::Passed => {}
            CaseResult::Found(f) => self.findings.push(f),
            CaseResult::GeneratorPanicked(p) => self.generator_panics.push(p),
        }
    }

    /// The summary line: `fuzz: N cases, M mismatches`, and `, K generator panics` when
    /// there were any.
    pub fn line(&self) -> String {
        let panics = match self.generator_panics.len() {
            0 => String::new(),
            k => format!(", {k} generator panics"),
        };
        format!(
            "fuzz: {} cases, {} mismatches{panics}",
            self.cases,
            self.findings.len()
        )
    }
}

/// A case whose input could not be made: its generator panicked. There is no input to
/// write a reproducer of; the case seed makes it again (`hostsim fuzz --target T --case
/// SEED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorPanic {
    pub target: Target,
    pub case_seed: u64,
    pub message: String,
}

impl GeneratorPanic {
    /// The line that reports it.
    pub fn line(&self, index: u64) -> String {
        format!(
            "generator panic in case {index} ({}): {}; make it again with `hostsim fuzz --target {} --case {}`",
            self.target.name(),
            self.message,
            self.target.name(),
            self.case_seed
        )
    }
}

/// What one case gave.
#[derive(Clone, Debug)]
pub enum CaseResult {
    /// Every check held.
    Passed,
    /// A mismatch or a panic of a check.
    Found(Finding),
    /// The input could not be made.
    GeneratorPanicked(GeneratorPanic),
}

/// The input a single case seed gives on the concrete `target` (what `hostsim fuzz
/// --case SEED` replays).
pub fn seed_case(target: Target, seed: u64, generation: Option<Generation>) -> Input {
    #[cfg(test)]
    plant::generator_panic(seed);
    Input::generate(target, Rng::new(seed), generation)
}

/// [`seed_case`], a panic of the generator caught and returned.
fn caught_seed_case(
    target: Target,
    seed: u64,
    generation: Option<Generation>,
) -> Result<Input, GeneratorPanic> {
    catch_unwind(|| seed_case(target, seed, generation)).map_err(|p| GeneratorPanic {
        target,
        case_seed: seed,
        message: routes::panic_message(p.as_ref()),
    })
}

/// Planted bugs for the tests: a generator that panics.
#[cfg(test)]
pub(crate) mod plant {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The case seed whose generation panics (0: none). Process-wide, as the cases
    /// run on threads: only a test that owns the seed may set it.
    pub static GENERATOR_PANICS_AT: AtomicU64 = AtomicU64::new(0);

    pub fn generator_panic(seed: u64) {
        let at = GENERATOR_PANICS_AT.load(Ordering::Relaxed);
        assert!(at == 0 || seed != at, "planted: the generator fails");
    }
}

/// The input of case `index` of `plan` (as [`run`] makes it).
#[cfg(test)]
pub(crate) fn plan_case(plan: &Plan, index: u64) -> (u64, Input) {
    let (target, seed) = plan_seed(plan, index);
    (seed, seed_case(target, seed, plan.generation))
}

/// The target and the case seed of case `index` of `plan`.
fn plan_seed(plan: &Plan, index: u64) -> (Target, u64) {
    (plan.target.of_case(index), Rng::case_seed(plan.seed, index))
}

/// The case of `seed` on the concrete `target` made and checked by `checker`; a
/// generator panic is caught.
pub fn case_result(
    checker: &mut Checker,
    target: Target,
    seed: u64,
    generation: Option<Generation>,
) -> CaseResult {
    match caught_seed_case(target, seed, generation) {
        Ok(input) => match checker.finding(seed, generation, input) {
            Some(f) => CaseResult::Found(f),
            None => CaseResult::Passed,
        },
        Err(p) => CaseResult::GeneratorPanicked(p),
    }
}

/// Runs `plan` on `jobs` threads ([`jobs::in_order`], each with its own [`Checker`])
/// until its budget is spent or `stop` is raised, calling `each` after every case, in
/// case order, with what it gave: any `jobs` gives the same calls.
pub fn run(
    plan: &Plan,
    jobs: usize,
    stop: &AtomicBool,
    mut each: impl FnMut(u64, &CaseResult),
) -> Summary {
    let work = jobs::Work {
        state: Checker::new,
        case: |checker: &mut Checker, index| {
            let (target, seed) = plan_seed(plan, index);
            case_result(checker, target, seed, plan.generation)
        },
    };
    let mut summary = Summary::default();
    let ran = jobs::in_order(jobs, plan.budget, stop, work, |index, result| {
        each(index, &result);
        summary.record(result);
    });
    Summary {
        cases: ran.cases,
        interrupted: ran.interrupted,
        ..summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(target: Target, seed: u64, n: u64) -> Plan {
        Plan {
            target,
            seed,
            budget: Budget::Iters(n),
            generation: None,
        }
    }

    #[test]
    fn targets_parse_and_all_takes_each_in_turn() {
        for t in Target::EACH.into_iter().chain([Target::All]) {
            assert_eq!(Target::from_name(t.name()).unwrap(), t);
        }
        let e = Target::from_name("gpu").unwrap_err();
        assert_eq!(
            e.to_string(),
            "fuzz target gpu does not exist (targets: ivp dge dma oob isa all)"
        );
        let order: Vec<Target> = (0..6).map(|i| Target::All.of_case(i)).collect();
        let mut expect = Target::EACH.to_vec();
        expect.push(Target::Ivp);
        assert_eq!(order, expect);
    }

    #[test]
    fn the_same_seed_gives_the_same_cases() {
        let p = plan(Target::All, 11, 10);
        for i in 0..10 {
            let (sa, a) = plan_case(&p, i);
            let (sb, b) = plan_case(&p, i);
            assert_eq!(sa, sb);
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            assert_eq!(a.target(), Target::All.of_case(i));
        }
        let (_, other) = plan_case(&plan(Target::All, 12, 1), 0);
        let (_, first) = plan_case(&p, 0);
        assert_ne!(format!("{other:?}"), format!("{first:?}"));
    }

    #[test]
    fn a_short_run_of_every_target_finds_nothing() {
        let stop = AtomicBool::new(false);
        let mut seen = 0;
        let s = run(&plan(Target::All, 1, 40), 2, &stop, |_, _| seen += 1);
        let found: Vec<&str> = s.findings.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(found, Vec::<&str>::new());
        assert_eq!((s.cases, seen, s.interrupted), (40, 40, false));
        assert_eq!(s.line(), "fuzz: 40 cases, 0 mismatches");
    }

    #[test]
    fn a_raised_stop_flag_ends_the_run_between_cases() {
        let stop = AtomicBool::new(true);
        let s = run(&plan(Target::Isa, 1, 1000), 2, &stop, |_, _| {});
        assert_eq!((s.cases, s.interrupted), (0, true));
    }

    #[test]
    fn bytes_make_cases_of_every_target() {
        let targets: Vec<Target> = (0u8..5)
            .map(|b| case_from_bytes(&[b, 1, 2]).target())
            .collect();
        assert_eq!(targets, Target::EACH.to_vec());
        assert_eq!(case_from_bytes(&[]).target(), Target::Ivp);
        let mut checker = Checker::new();
        for b in 0u8..5 {
            assert_eq!(checker.check(&case_from_bytes(&[b; 40])), Ok(()));
        }
    }
}
