//! `hostsim fuzz` through the binary: the summary line, determinism for a seed, usage
//! errors (exit 2), the summary printed after Ctrl-C, and the progress bar (drawn on a
//! terminal only).

use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn hostsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hostsim"))
        .args(args)
        .output()
        .expect("the hostsim binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_clean_run_prints_the_summary_and_exits_0() {
    let o = hostsim(&["fuzz", "--target", "isa", "--iters", "300", "--seed", "5"]);
    assert_eq!(stdout(&o), "fuzz: 300 cases, 0 mismatches\n");
    // stderr is not a terminal here: no progress bar.
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    assert_eq!(o.status.code(), Some(0));
}

/// On a terminal (a pseudo-terminal from util-linux `script`) the bar is drawn on
/// stderr and ends at 100% before the summary line.
#[test]
fn a_terminal_shows_the_progress_bar() {
    let bin = env!("CARGO_BIN_EXE_hostsim");
    let line = format!("{bin} fuzz --target isa --iters 200 --seed 5");
    let Ok(o) = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
    else {
        eprintln!("skipped: no `script` to make a pseudo-terminal");
        return;
    };
    let text = stdout(&o).replace("\r\n", "\n");
    let bar = "fuzz isa [##############################] 100% 200/200\n";
    assert!(text.contains(bar), "{text:?}");
    assert!(
        text.ends_with("fuzz: 200 cases, 0 mismatches\n"),
        "{text:?}"
    );
    assert!(text.contains("\rfuzz isa [###############...............]  50% 100/200"));
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn the_same_seed_runs_the_same_cases() {
    let args = ["fuzz", "--target", "all", "--iters", "25", "--seed", "9"];
    let (a, b) = (hostsim(&args), hostsim(&args));
    assert_eq!(stdout(&a), "fuzz: 25 cases, 0 mismatches\n");
    assert_eq!(stdout(&a), stdout(&b));
    let one = hostsim(&["fuzz", "--target", "dge", "--case", "12345"]);
    assert_eq!(stdout(&one), "fuzz: 1 cases, 0 mismatches\n");
}

#[test]
fn bad_options_exit_2_naming_the_rule() {
    let o = hostsim(&["fuzz", "--target", "gpu"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        "hostsim: fuzz target gpu does not exist (targets: ivp dge dma oob isa all)\n"
    );
    let o = hostsim(&["fuzz", "--iters", "3", "--seconds", "3"]);
    assert_eq!(o.status.code(), Some(2));
    let o = hostsim(&["fuzz", "--case", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
}

#[test]
fn ctrl_c_stops_between_cases_and_still_prints_the_summary() {
    let child = Command::new(env!("CARGO_BIN_EXE_hostsim"))
        .args(["fuzz", "--target", "ivp", "--seconds", "120"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the hostsim binary runs");
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let o = child.wait_with_output().expect("hostsim exits");
    let text = stdout(&o);
    let line = text.lines().last().unwrap_or_default();
    assert!(
        line.starts_with("fuzz: ") && line.ends_with(" cases, 0 mismatches"),
        "{text:?}"
    );
    assert_eq!(o.status.code(), Some(130));
}

/// `fuzz --scenario` on the bound-register example: the overrun is found, the table and
/// the summary are printed, the reproducer written, and the exit status is 1.
#[test]
fn a_scenario_fuzz_finds_the_overrun_and_writes_a_reproducer() {
    let out = std::env::temp_dir().join(format!("hostsim-fuzz-scenario-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let scenario = format!(
        "{}/../examples/bound_register/scenario.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let fuzz = |seed: &str| {
        let out = out.to_str().unwrap();
        let args = ["fuzz", "--scenario", &scenario, "--iters", "100"];
        hostsim(&[&args[..], &["--seed", seed, "--out", out]].concat())
    };
    let o = fuzz("1");
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.starts_with("finding in case "), "{text}");
    assert!(text.contains("op  kind"), "{text}");
    assert!(text.ends_with("fuzz: 100 cases, 1 findings\n"), "{text}");
    for file in ["scenario.toml", "idx.npy", "finding.txt"] {
        assert!(out.join("case-0").join(file).exists(), "{file}");
    }
    // a second run into the same folder keeps the first's reproducer
    let first = std::fs::read(out.join("case-0/finding.txt")).unwrap();
    assert_eq!(fuzz("2").status.code(), Some(1));
    assert_eq!(
        std::fs::read(out.join("case-0/finding.txt")).unwrap(),
        first
    );
    assert!(out.join("case-1/finding.txt").exists());
    // a usage error: --scenario with --target
    let o = hostsim(&["fuzz", "--scenario", &scenario, "--target", "oob"]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&out);
}
