//! # `hostsim bench`: the performance harness
//!
//! Each workload ([`workloads`]) runs end to end through the public APIs — NKI lowering,
//! per-generation validation, descriptor generation and the DMA engine replay (or the
//! POOL kernels on sunda) — on data generated in-process from a fixed seed. For every
//! workload the harness measures, in the same process and the same run:
//!
//! - the median wall time of `repeat` runs of the workload's timed part;
//! - the median time of a plain `copy_from_slice` of the workload's payload bytes (the
//!   memcpy baseline), so a figure is a ratio to a baseline measured beside it;
//! - the peak resident memory while the workload was set up and run ([`memory`]).
//!
//! [`run_isolated`] runs each workload in a child process of its own (the `hostsim`
//! binary, `bench --only NAME --json`), so one workload's peak memory is not raised by
//! what an earlier one left in the allocator; [`run`] runs them in this process. Rows are
//! reported one by one through a callback, so the CLI prints each as it lands.

pub mod memory;
pub mod workloads;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Error;

pub use workloads::{gather_loop, Workload, WORKLOADS};

/// What `hostsim bench` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchOptions {
    /// Only workloads whose name contains this (or, with `exact`, is this).
    pub filter: Option<String>,
    /// The filter names one workload exactly.
    pub exact: bool,
    /// Runs per workload (the median is reported); at least 1.
    pub repeat: usize,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            filter: None,
            exact: false,
            repeat: 3,
        }
    }
}

/// One measured workload: the row `hostsim bench` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// The workload's name.
    pub name: String,
    /// Payload bytes one run moves (the memcpy baseline copies as many).
    pub bytes: u64,
    /// Median seconds of one run.
    pub seconds: f64,
    /// `bytes / seconds`, GB/s (10^9 bytes).
    pub gbps: f64,
    /// The memcpy baseline of the same bytes in the same run, GB/s.
    pub memcpy_gbps: f64,
    /// `gbps / memcpy_gbps`.
    pub ratio: f64,
    /// The workload's target (issue 9), e.g. `>=0.8x memcpy`.
    pub target: String,
    /// Whether this run reached it.
    pub meets_target: bool,
    /// Descriptors per second, where the workload generates or replays descriptors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptors_per_s: Option<f64>,
    /// `replay_workers`: one worker's median time over two workers'; `elem_gather`: the
    /// raw gather loop's median time over its own (its throughput as a fraction of the
    /// loop's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Peak resident memory while the workload was set up and run, bytes (`None` where
    /// the OS does not report it).
    pub peak_rss_bytes: Option<u64>,
    /// Bytes of the workload's tensors (the memory target is these + 128 MiB).
    pub tensor_bytes: u64,
}

/// What one timed run of a workload did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunStats {
    /// Descriptors generated or replayed (0 for the POOL route).
    pub descriptors: u64,
    /// The seconds of the part the workload measures, where that is not the whole run
    /// (`descgen` times generation alone, not the index staging around it).
    pub seconds: Option<f64>,
}

/// The workloads `opts.filter` selects, in table order; an error if none.
pub fn selected(opts: &BenchOptions) -> Result<Vec<&'static Workload>, Error> {
    let chosen: Vec<_> = WORKLOADS
        .iter()
        .filter(|w| match (opts.filter.as_deref(), opts.exact) {
            (None, _) => true,
            (Some(f), false) => w.name.contains(f),
            (Some(f), true) => w.name == f,
        })
        .collect();
    if chosen.is_empty() {
        return Err(Error::BenchFilter {
            filter: opts.filter.clone().unwrap_or_default(),
            known: WORKLOADS
                .iter()
                .map(|w| w.name)
                .collect::<Vec<_>>()
                .join(" "),
        });
    }
    Ok(chosen)
}

/// Runs the selected workloads, handing each row to `on_row` as it is measured.
pub fn run(opts: &BenchOptions, mut on_row: impl FnMut(&BenchRow)) -> Result<Vec<BenchRow>, Error> {
    let repeat = opts.repeat.max(1);
    let mut rows = Vec::new();
    for w in selected(opts)? {
        let _span = tracing::info_span!("bench", workload = w.name).entered();
        let row = (w.measure)(w, repeat)?;
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// Runs each selected workload in a child `exe bench --only NAME --json --repeat N`
/// (`exe` the `hostsim` binary), handing each row to `on_row` as it is measured.
pub fn run_isolated(
    opts: &BenchOptions,
    exe: &Path,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, Error> {
    let mut rows = Vec::new();
    for w in selected(opts)? {
        let row = run_child(exe, w.name, opts.repeat.max(1))?;
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// One workload in a child process: its single JSON row.
fn run_child(exe: &Path, name: &str, repeat: usize) -> Result<BenchRow, Error> {
    let child = |detail: String| Error::BenchChild {
        workload: name.to_string(),
        detail,
    };
    let out = Command::new(exe)
        .args([
            "bench",
            "--json",
            "--only",
            name,
            "--repeat",
            &repeat.to_string(),
        ])
        .output()
        .map_err(|e| child(format!("{}: {e}", exe.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(child(format!("{}: {}", out.status, stderr.trim())));
    }
    let rows: Vec<BenchRow> = serde_json::from_slice(&out.stdout)
        .map_err(|e| child(format!("its output is not a JSON row array: {e}")))?;
    let mut rows = rows.into_iter();
    match (rows.next(), rows.next()) {
        (Some(row), None) if row.name == name => Ok(row),
        _ => Err(child("it did not print exactly its own row".into())),
    }
}

/// The median of `v` (the upper middle for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Median seconds of `repeat` runs of `f` after one untimed warm-up run (which faults in
/// the destination pages, as the memcpy baseline's buffers are touched before timing),
/// with the stats of the last run.
pub fn time_runs(
    repeat: usize,
    mut f: impl FnMut() -> Result<RunStats, Error>,
) -> Result<(f64, RunStats), Error> {
    let mut times = Vec::with_capacity(repeat);
    let mut stats = f()?;
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        stats = f()?;
        let elapsed = t.elapsed().as_secs_f64();
        times.push(stats.seconds.unwrap_or(elapsed));
    }
    Ok((median(times), stats))
}

/// Median seconds of `repeat` plain `copy_from_slice` copies of `bytes` bytes (both
/// buffers touched once before timing, then freed).
pub fn memcpy_seconds(bytes: u64, repeat: usize) -> f64 {
    let n = usize::try_from(bytes).unwrap_or(usize::MAX);
    let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let mut dst = vec![1u8; n];
    let times = (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst);
            t.elapsed().as_secs_f64()
        })
        .collect();
    median(times)
}

/// Bytes per second as GB/s (10^9); 0 for a zero time.
pub fn gbps(bytes: u64, seconds: f64) -> f64 {
    match seconds > 0.0 {
        true => bytes as f64 / seconds / 1e9,
        false => 0.0,
    }
}

/// Formats `rows` as the fixed-width table `hostsim bench` prints.
pub fn table(rows: &[BenchRow]) -> String {
    let mut out = table_header();
    rows.iter().for_each(|r| out.push_str(&table_line(r)));
    out
}

/// The header line of [`table`].
pub fn table_header() -> String {
    format!(
        "{:<18} {:>12} {:>10} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:<16} {}\n",
        "workload",
        "bytes",
        "seconds",
        "GB/s",
        "memcpy",
        "ratio",
        "Mdesc/s",
        "peak MiB",
        "data MiB",
        "target",
        "met"
    )
}

/// One row of [`table`].
pub fn table_line(r: &BenchRow) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let desc = r
        .descriptors_per_s
        .map_or("-".to_string(), |d| format!("{:.2}", d / 1e6));
    let peak = r
        .peak_rss_bytes
        .map_or("-".to_string(), |p| format!("{:.0}", mib(p)));
    let target = match r.speedup {
        Some(s) => format!("{} ({s:.2}x)", r.target),
        None => r.target.clone(),
    };
    format!(
        "{:<18} {:>12} {:>10.4} {:>8.2} {:>8.2} {:>7.3} {:>9} {:>9} {:>9.0} {:<16} {}\n",
        r.name,
        r.bytes,
        r.seconds,
        r.gbps,
        r.memcpy_gbps,
        r.ratio,
        desc,
        peak,
        mib(r.tensor_bytes),
        target,
        match (r.target.as_str(), r.meets_target) {
            ("baseline", _) => "-",
            (_, true) => "yes",
            (_, false) => "NO",
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn gbps_is_bytes_per_nanosecond() {
        assert_eq!(gbps(2_000_000_000, 1.0), 2.0);
        assert_eq!(gbps(5, 0.0), 0.0);
    }

    #[test]
    fn filter_selects_by_substring_and_rejects_nothing_matched() {
        let opts = |f: &str| BenchOptions {
            filter: Some(f.into()),
            exact: false,
            repeat: 1,
        };
        let names: Vec<_> = selected(&opts("gather"))
            .unwrap()
            .iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(
            names,
            [
                "row_gather",
                "row_gather_tile",
                "elem_gather",
                "gather_loop"
            ]
        );
        let e = selected(&opts("nope")).unwrap_err().to_string();
        assert!(
            e.starts_with("no bench workload matches --filter nope"),
            "{e}"
        );
        assert!(
            e.contains("copy_contiguous") && e.contains("pool_route"),
            "{e}"
        );
        let exact = BenchOptions {
            exact: true,
            ..opts("row_gather")
        };
        assert_eq!(selected(&exact).unwrap().len(), 1);
        assert!(selected(&BenchOptions {
            exact: true,
            ..opts("gather")
        })
        .is_err());
    }

    #[test]
    fn time_runs_reports_the_last_stats_and_propagates_errors() {
        let mut n = 0;
        let (_, stats) = time_runs(2, || {
            n += 1;
            Ok(RunStats {
                descriptors: n,
                seconds: (n == 2).then_some(100.0),
            })
        })
        .unwrap();
        assert_eq!(stats.descriptors, 3);
        let (median_s, _) = time_runs(1, || {
            Ok(RunStats {
                descriptors: 0,
                seconds: Some(42.0),
            })
        })
        .unwrap();
        assert_eq!(median_s, 42.0, "a job's own timing replaces the wall time");
        let err = time_runs(2, || {
            Err(Error::BenchFilter {
                filter: "x".into(),
                known: String::new(),
            })
        });
        assert!(err.is_err());
    }

    #[test]
    fn table_prints_one_line_per_row() {
        let row = BenchRow {
            name: "copy_contiguous".into(),
            bytes: 1 << 20,
            seconds: 0.5,
            gbps: 2.0,
            memcpy_gbps: 4.0,
            ratio: 0.5,
            target: ">=0.8x memcpy".into(),
            meets_target: false,
            descriptors_per_s: Some(2.5e6),
            speedup: None,
            peak_rss_bytes: Some(3 << 20),
            tensor_bytes: 2 << 20,
        };
        let t = table(&[row]);
        let lines: Vec<_> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("copy_contiguous"), "{t}");
        assert!(
            lines[1].contains(" 0.500 ") && lines[1].contains(" 2.50 "),
            "{t}"
        );
        assert!(lines[1].ends_with(">=0.8x memcpy    NO"), "{t}");
    }
}
