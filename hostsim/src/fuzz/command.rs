//! `hostsim fuzz`: the options, the run with its progress bar, and what it reports. The
//! CLI prints the lines this module hands it (nothing here prints).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use dma::Generation;

use crate::error::Error;
use crate::fuzz::{repro, run, seed_case, Budget, Checker, Finding, Plan, Summary, Target};
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
    /// Use this generation for every case: sunda | cayman | mariana | maverick.
    #[arg(long, value_name = "G")]
    pub generation: Option<String>,
    /// Write reproducers of mismatches here (default fuzz-out).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only the case of this seed (as a reproducer's finding.txt names it).
    #[arg(long, value_name = "SEED")]
    pub case: Option<u64>,
}

impl Options {
    /// The checked plan: target and generation parsed, one budget.
    pub fn plan(&self) -> Result<Plan, Error> {
        let target = Target::from_name(self.target.as_deref().unwrap_or("all"))?;
        let generation = match &self.generation {
            Some(g) => Some(Generation::from_name(g)?),
            None => None,
        };
        let budget = match (self.iters, self.seconds) {
            (Some(n), None) => Budget::Iters(n),
            (None, Some(s)) => Budget::Seconds(s),
            (None, None) => Budget::Iters(DEFAULT_ITERS),
            (Some(_), Some(_)) => {
                return Err(Error::FuzzOption {
                    option: "--iters with --seconds",
                    rule: "give one budget, a case count or a time",
                })
            }
        };
        Ok(Plan {
            target,
            seed: self.seed,
            budget,
            generation,
        })
    }
}

/// Runs the command; `emit` receives every line to print (findings, reproducer paths,
/// replay commands, and last the summary line). Checks `stop` between cases.
pub fn execute(
    opts: &Options,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&str),
) -> Result<Summary, Error> {
    let plan = opts.plan()?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("fuzz-out"));
    let summary = match opts.case {
        Some(seed) => one_case(&plan, seed)?,
        None => many_cases(&plan, stop),
    };
    for (index, finding) in &summary.1 {
        emit(&format!(
            "mismatch in case {index} ({}): {}",
            finding.input.target().name(),
            finding.what
        ));
        let commands = repro::write(&out, *index, finding)?;
        emit(&format!(
            "reproducer: {}",
            out.join(format!("case-{index}")).display()
        ));
        for line in commands.lines() {
            emit(&format!("  {line}"));
        }
    }
    let summary = summary.0;
    emit(&summary.line());
    Ok(summary)
}

/// The findings with their case numbers, and the summary.
type Found = (Summary, Vec<(u64, Finding)>);

fn many_cases(plan: &Plan, stop: &AtomicBool) -> Found {
    let total = match plan.budget {
        Budget::Iters(n) => n,
        Budget::Seconds(_) => 0,
    };
    let mut progress = Progress::new(total, &format!("fuzz {}", plan.target.name()));
    let mut found = Vec::new();
    let summary = run(plan, stop, |index, finding| {
        progress.inc(1);
        if let Some(f) = finding {
            found.push((index, f.clone()));
        }
    });
    progress.finish();
    (summary, found)
}

fn one_case(plan: &Plan, seed: u64) -> Result<Found, Error> {
    if plan.target == Target::All {
        return Err(Error::FuzzOption {
            option: "--case with --target all",
            rule: "a case seed belongs to one target: name it",
        });
    }
    let input = seed_case(plan.target, seed, plan.generation);
    let finding = Checker::new().finding(seed, input);
    let summary = Summary {
        cases: 1,
        findings: finding.iter().cloned().collect(),
        interrupted: false,
    };
    Ok((summary, finding.into_iter().map(|f| (0, f)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(target: &str, iters: u64) -> Options {
        Options {
            target: Some(target.into()),
            iters: Some(iters),
            seed: 1,
            ..Options::default()
        }
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
    }

    #[test]
    fn a_clean_run_emits_only_the_summary() {
        let mut lines = Vec::new();
        let stop = AtomicBool::new(false);
        let s = execute(&opts("ivp", 20), &stop, &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(lines, vec!["fuzz: 20 cases, 0 mismatches".to_string()]);
        assert_eq!(s.cases, 20);
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
}
