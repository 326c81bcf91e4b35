//! `hostsim fuzz`: the options, the run with its progress bar, and what it reports. The
//! CLI prints the lines this module hands it (nothing here prints).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dma::Generation;

use crate::error::Error;
use crate::fuzz::{
    case_result, repro, run, scenario, Budget, CaseResult, Checker, Finding, Plan, Summary, Target,
};
use crate::progress::Progress;

/// The cases a run without `--iters` or `--seconds` makes.
pub const DEFAULT_ITERS: u64 = 1000;

/// The command's options, as given (also the `hostsim fuzz` arguments).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// ivp | dge | dma | oob | isa | all (default all: the five in turn).
    #[arg(long, value_name = "T")]
    pub target: Option<String>,
    /// Run exactly N cases (default 1000).
    #[arg(long, value_name = "N", conflicts_with = "seconds")]
    pub iters: Option<u64>,
    /// Run cases until S seconds have passed.
    #[arg(long, value_name = "S")]
    pub seconds: Option<u64>,
    /// The run seed: the same seed gives the same cases.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Use this generation for every case: sunda | cayman | mariana | maverick (targets
    /// dge, dma, oob and all; ivp and isa cases take none).
    #[arg(long, value_name = "G")]
    pub generation: Option<String>,
    /// Write reproducers of mismatches here (default fuzz-out).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Threads that run cases, 1..=256 (default: the machine's cores; 1 runs them on the
    /// main thread). With --iters any count gives the same output; a --seconds run covers
    /// a prefix of the same cases.
    #[arg(long, short = 'j', value_name = "N", conflicts_with = "case",
          allow_hyphen_values = true, value_parser = thread_count)]
    pub jobs: Option<u16>,
    /// Run only the case of this seed (as a reproducer's finding.txt names it).
    #[arg(long, value_name = "SEED", conflicts_with = "scenario")]
    pub case: Option<u64>,
    /// Fuzz this scenario's index values, OOB policies, unique_indices, isa bounds and
    /// generation (`--generation all` for the four) under the sanitizer, across the
    /// routes; findings are minimized into DIR/case-K/.
    #[arg(long, value_name = "FILE", conflicts_with = "target")]
    pub scenario: Option<PathBuf>,
}

/// `--jobs`: a thread count written as a whole number 1..=256 (digits only: not `+2`,
/// `-1` or `1.5`).
fn thread_count(text: &str) -> Result<u16, String> {
    let count = text
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| text.parse::<u16>().ok());
    match count.flatten() {
        Some(n @ 1..=256) => Ok(n),
        _ => Err(format!(
            "`{text}` is no thread count: a whole number 1..=256"
        )),
    }
}

/// Ctrl-C presses during a run. The first raises the stop flag: the run ends once the
/// cases in flight are done, and prints its summary. Another press at least
/// [`Interrupts::AGAIN`] later means "exit at once". Signals closer together are one
/// press: `timeout -s INT` signals the process and then its group.
#[derive(Debug, Default)]
pub struct Interrupts {
    /// The stop flag the run looks at.
    pub stop: AtomicBool,
    first: OnceLock<Instant>,
}

impl Interrupts {
    /// How long after the first press another one exits at once.
    pub const AGAIN: Duration = Duration::from_millis(500);

    /// A press at `now`: raises the stop flag; `true` if the run should exit at once.
    pub fn press(&self, now: Instant) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        let first = *self.first.get_or_init(|| now);
        now.saturating_duration_since(first) >= Interrupts::AGAIN
    }
}

/// How a run ended: its findings and whether it was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub findings: usize,
    pub interrupted: bool,
}

impl Options {
    /// The checked plan: target and generation parsed, one budget.
    pub fn plan(&self) -> Result<Plan, Error> {
        let target = Target::from_name(self.target.as_deref().unwrap_or("all"))?;
        let generation = match self.generation.as_deref() {
            Some("all") => {
                return Err(Error::FuzzOption {
                    option: "--generation all",
                    rule: "all is --scenario's (the four in turn); without --generation each case of a target draws its generation",
                })
            }
            Some(g) => Some(Generation::from_name(g)?),
            None => None,
        };
        // ivp and isa cases take no generation (`all`: it applies to the targets that do)
        let rule = "ivp cases run the IVP core, which has no generation, and isa cases check each struct under every generation; --generation applies to dge, dma, oob and all";
        match (target, generation) {
            (Target::Ivp, Some(_)) => Err(Error::FuzzOption {
                option: "--generation with --target ivp",
                rule,
            }),
            (Target::Isa, Some(_)) => Err(Error::FuzzOption {
                option: "--generation with --target isa",
                rule,
            }),
            _ => Ok(()),
        }?;
        Ok(Plan {
            target,
            seed: self.seed,
            budget: self.budget()?,
            generation,
        })
    }

    /// `--jobs`, or the machine's cores.
    fn jobs(&self) -> usize {
        self.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, usize::from),
            usize::from,
        )
    }

    /// The one budget: `--iters`, `--seconds` or the default case count.
    fn budget(&self) -> Result<Budget, Error> {
        match (self.iters, self.seconds) {
            (Some(n), None) => Ok(Budget::Iters(n)),
            (None, Some(s)) => Ok(Budget::Seconds(s)),
            (None, None) => Ok(Budget::Iters(DEFAULT_ITERS)),
            (Some(_), Some(_)) => Err(Error::FuzzOption {
                option: "--iters with --seconds",
                rule: "give one budget, a case count or a time",
            }),
        }
    }
}

/// Runs the command; `emit` receives every line to print: each finding as it is made
/// (what differed, the reproducer's folder, the commands that replay it), and last the
/// summary line. Checks `stop` between cases.
pub fn execute(
    opts: &Options,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&str),
) -> Result<Ended, Error> {
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("fuzz-out"));
    if let Some(path) = &opts.scenario {
        let plan = scenario::Plan {
            scenario: path.clone(),
            seed: opts.seed,
            budget: opts.budget()?,
            generation: opts.generation.clone(),
            out,
            jobs: opts.jobs(),
        };
        let s = scenario::run(&plan, stop, emit)?;
        return Ok(Ended {
            findings: s.findings.len() + s.generator_panics as usize,
            interrupted: s.interrupted,
        });
    }
    let plan = opts.plan()?;
    let summary = match opts.case {
        Some(seed) => one_case(&plan, seed, &out, emit)?,
        None => many_cases(&plan, opts.jobs(), stop, &out, emit),
    };
    emit(&summary.line());
    Ok(Ended {
        findings: summary.findings.len() + summary.generator_panics.len(),
        interrupted: summary.interrupted,
    })
}

/// Emits finding `index` and writes its reproducer under `out`. A reproducer that
/// cannot be written is reported and the run goes on: the finding still counts.
pub fn report(out: &Path, index: u64, finding: &Finding, emit: &mut dyn FnMut(&str)) {
    emit(&format!(
        "mismatch in case {index} ({}): {}",
        finding.input.target().name(),
        finding.what
    ));
    match repro::write(out, index, finding) {
        Ok(commands) => {
            let folder = out.join(format!("case-{index}"));
            emit(&format!("reproducer: {}", folder.display()));
            for line in commands.lines() {
                emit(&format!("  {line}"));
            }
        }
        Err(e) => emit(&format!("reproducer not written: {e}")),
    }
}

/// Reports what case `index` gave: a finding ([`report`]) or a generator panic's line.
fn report_result(out: &Path, index: u64, result: &CaseResult, emit: &mut dyn FnMut(&str)) {
    match result {
        CaseResult::Passed => {}
        CaseResult::Found(f) => report(out, index, f, emit),
        CaseResult::GeneratorPanicked(p) => emit(&p.line(index)),
    }
}

/// Runs `plan` on `jobs` threads ([`run`]) with a progress bar, reporting each finding
/// ([`report`], reproducers under `out`) and each generator panic in case order, aside
/// from the bar ([`Progress::aside`]).
fn many_cases(
    plan: &Plan,
    jobs: usize,
    stop: &AtomicBool,
    out: &Path,
    emit: &mut dyn FnMut(&str),
) -> Summary {
    let total = match plan.budget {
        Budget::Iters(n) => n,
        Budget::Seconds(_) => 0,
    };
    let label = format!("fuzz {}", plan.target.name());
    let mut progress = Progress::new(total, &label);
    let summary = run(plan, jobs, stop, |index, result| {
        progress.inc(1);
        if !matches!(result, CaseResult::Passed) {
            progress.aside(|| report_result(out, index, result, &mut *emit));
        }
    });
    progress.finish();
    summary
}

fn one_case(
    plan: &Plan,
    seed: u64,
    out: &Path,
    emit: &mut dyn FnMut(&str),
) -> Result<Summary, Error> {
    if plan.target == Target::All {
        return Err(Error::FuzzOption {
            option: "--case with --target all",
            rule: "a case seed belongs to one target: name it",
        });
    }
    let result = case_result(&mut Checker::new(), plan.target, seed, plan.generation);
    report_result(out, 0, &result, emit);
    let mut summary = Summary {
        cases: 1,
        ..Summary::default()
    };
    summary.record(result);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{plan_case, seed_case};
    use crate::runtime::Mechanism;

    fn opts(target: &str, iters: u64) -> Options {
        Options {
            target: Some(target.into()),
            iters: Some(iters),
            seed: 1,
            ..Options::default()
        }
    }

    /// A case whose generator panics is reported with the seed that makes it again and
    /// counted, and the run goes on (many cases on threads, and `--case`); without the
    /// catch the process died at the thread's join, its panic message silenced.
    #[test]
    fn a_generator_panic_is_reported_counted_and_the_run_goes_on() {
        use crate::fuzz::plant::GENERATOR_PANICS_AT;
        let mut o = opts("dge", 6);
        o.seed = 0x5eed_0049;
        o.jobs = Some(2);
        o.out = Some(std::env::temp_dir().join("hostsim-generator-panic"));
        let (seed, _) = plan_case(&o.plan().unwrap(), 3);
        GENERATOR_PANICS_AT.store(seed, Ordering::Relaxed);
        let stop = AtomicBool::new(false);
        let mut lines = Vec::new();
        let ended = execute(&o, &stop, &mut |l: &str| lines.push(l.to_string()));
        let rerun = format!("`hostsim fuzz --target dge --case {seed}`");
        let want = format!("generator panic in case 3 (dge): planted: the generator fails; make it again with {rerun}");
        o.case = Some(seed);
        let mut one = Vec::new();
        let alone = execute(&o, &stop, &mut |l: &str| one.push(l.to_string()));
        GENERATOR_PANICS_AT.store(0, Ordering::Relaxed);
        let found = Ended {
            findings: 1,
            interrupted: false,
        };
        assert_eq!(ended.unwrap(), found);
        assert_eq!(
            lines,
            [
                want,
                "fuzz: 6 cases, 0 mismatches, 1 generator panics".into()
            ]
        );
        assert_eq!(alone.unwrap(), found);
        assert!(
            one[0].starts_with("generator panic in case 0 (dge): planted"),
            "{one:?}"
        );
    }

    #[test]
    fn a_thread_count_is_a_whole_number_from_1_to_256() {
        assert_eq!(thread_count("1"), Ok(1));
        assert_eq!(thread_count("256"), Ok(256));
        for bad in ["0", "257", "65536", "1.5", "-1", "+2", " 2", ""] {
            let e = thread_count(bad).unwrap_err();
            assert_eq!(
                e,
                format!("`{bad}` is no thread count: a whole number 1..=256")
            );
        }
    }

    #[test]
    fn only_a_second_press_apart_from_the_first_exits_at_once() {
        let presses = Interrupts::default();
        let t0 = Instant::now();
        let late = Interrupts::AGAIN;
        assert!(!presses.stop.load(Ordering::SeqCst));
        let got = [
            presses.press(t0),
            presses.press(t0 + Duration::from_millis(5)),
            presses.press(t0 + late),
        ];
        assert_eq!(got, [false, false, true]);
        assert!(presses.stop.load(Ordering::SeqCst));
    }

    #[test]
    fn options_make_one_plan() {
        let p = opts("isa", 5).plan().unwrap();
        assert_eq!(
            (p.target, p.budget, p.seed),
            (Target::Isa, Budget::Iters(5), 1)
        );
        let p = Options::default().plan().unwrap();
        assert_eq!(
            (p.target, p.budget),
            (Target::All, Budget::Iters(DEFAULT_ITERS))
        );
        let both = Options {
            seconds: Some(3),
            ..opts("all", 1)
        };
        assert_eq!(
            both.plan().unwrap_err().to_string(),
            "fuzz --iters with --seconds: give one budget, a case count or a time"
        );
        let bad = Options {
            generation: Some("v9".into()),
            ..opts("all", 1)
        };
        assert!(matches!(bad.plan(), Err(Error::Dma(_))));
        let all = Options {
            generation: Some("all".into()),
            ..opts("dge", 1)
        };
        let e = all.plan().unwrap_err().to_string();
        assert!(
            e.starts_with("fuzz --generation all: all is --scenario's"),
            "{e}"
        );
        // found by an audit: accepted, then never used
        for target in ["ivp", "isa"] {
            let ignored = Options {
                generation: Some("sunda".into()),
                ..opts(target, 1)
            };
            let e = ignored.plan().unwrap_err().to_string();
            let want =
                format!("fuzz --generation with --target {target}: ivp cases run the IVP core");
            assert!(e.starts_with(&want), "{e}");
        }
        let all = Options {
            generation: Some("sunda".into()),
            ..opts("all", 1)
        };
        assert_eq!(all.plan().unwrap().generation, Some(Generation::Sunda));
    }

    #[test]
    fn a_clean_run_emits_only_the_summary() {
        let mut lines = Vec::new();
        let stop = AtomicBool::new(false);
        let s = execute(&opts("ivp", 20), &stop, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines, vec!["fuzz: 20 cases, 0 mismatches".to_string()]);
        let clean = Ended {
            findings: 0,
            interrupted: false,
        };
        assert_eq!(s, clean);
        let one = Options {
            case: Some(99),
            ..opts("dge", 1)
        };
        let mut lines = Vec::new();
        execute(&one, &stop, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines, vec!["fuzz: 1 cases, 0 mismatches".to_string()]);
        let all = Options {
            case: Some(99),
            ..opts("all", 1)
        };
        let e = execute(&all, &stop, &mut |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fuzz --case with --target all: a case seed belongs to one target: name it"
        );
    }

    #[test]
    fn a_finding_is_reported_with_its_reproducer_and_replay_commands() {
        let plan = Plan {
            target: Target::Oob,
            seed: 3,
            budget: Budget::Iters(1),
            generation: Some(Generation::Mariana),
        };
        let (seed, input) = plan_case(&plan, 0);
        let f = Finding {
            case_seed: Some(seed),
            generation: plan.generation,
            input,
            mechanism: Some(Mechanism::Pool),
            op: None,
            what: "in0 differs at byte 3".into(),
        };
        let dir = std::env::temp_dir().join(format!("hostsim-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut lines = Vec::new();
        report(&dir, 4, &f, &mut |l| lines.push(l.to_string()));
        let folder = dir.join("case-4");
        let scenario = folder.join("scenario.toml");
        // a case with an access-pattern DMA (which no POOL kernel runs) is shown on auto
        let has_ap = matches!(&f.input, crate::fuzz::Input::Oob(c) if c.stream.iter().any(|op| matches!(op, crate::fuzz::case::Op::Ap(_))));
        let shown = if has_ap { "auto" } else { "pool" };
        let expect = [
            "mismatch in case 4 (oob): in0 differs at byte 3".to_string(),
            format!("reproducer: {}", folder.display()),
            format!("  hostsim fuzz --target oob --generation mariana --case {seed}"),
            format!("  hostsim run {} --mechanism reference", scenario.display()),
            format!("  hostsim run {} --mechanism {shown}", scenario.display()),
        ];
        assert_eq!(lines, expect);
        assert!(scenario.exists());
        // The replay command's options regenerate exactly this case.
        let again = seed_case(Target::Oob, seed, Some(Generation::Mariana));
        assert_eq!(format!("{again:?}"), format!("{:?}", f.input));
        // A folder that cannot be made: the finding is still reported, nothing panics.
        let blocked = folder.join("finding.txt");
        lines.clear();
        report(&blocked, 0, &f, &mut |l| lines.push(l.to_string()));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].starts_with(&format!(
                "reproducer not written: fuzz reproducer {}",
                blocked.display()
            )),
            "{lines:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
