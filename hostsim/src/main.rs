//! The `hostsim` command-line tool.

use clap::{Parser, Subcommand};
use dma::Generation;
use std::process::ExitCode;

mod tools_cli;

use tools_cli::{print_kept, print_out};

#[derive(Parser)]
#[command(
    name = "hostsim",
    version,
    about = "A model of an ML accelerator core's indirection engine (DGE, DMA engine, IVP gather core, HBM/SBUF/PSUM fabric)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Show tracing events on stderr: -v debug (one event per instruction, in its op's
    /// span), -vv trace (also the DGE stages with their fields and each DMA queue's end).
    /// Without it RUST_LOG applies (default: warnings).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded demo (examples/embedding): an embedding lookup skipping padded
    /// out-of-range indices, then a gradient scatter-add with duplicate indices, on every
    /// generation's route and the reference, showing that they agree.
    ///
    /// Example: hostsim demo --generation sunda
    Demo {
        /// Only this generation: sunda | cayman | mariana | maverick (or v2..v5, trn1..trn3).
        #[arg(long, value_parser = hostsim::scenario::generation_arg)]
        generation: Option<String>,
    },
    /// Measure the workloads of the performance harness, each against a memcpy of the
    /// same bytes in the same run (median of --repeat runs; peak memory per workload).
    ///
    /// Example: hostsim bench --filter row_gather --repeat 5
    Bench {
        /// Print a JSON array instead of the table.
        #[arg(long)]
        json: bool,
        /// Run only the workloads whose name contains NAME.
        #[arg(long, value_name = "NAME")]
        filter: Option<String>,
        /// Run only the workload named NAME, in this process (what each child runs).
        #[arg(long, value_name = "NAME", hide = true, conflicts_with = "filter")]
        only: Option<String>,
        /// Runs per workload; the median is reported.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
    },
    /// Run a scenario (TOML, or JSON by extension): place its tensors, run its ops in
    /// order, print a summary; with --out write DIR/<tensor>.npy and DIR/report.json.
    /// Exit status 1 for a fault while running, 2 for invalid input.
    ///
    /// Example: hostsim run examples/embedding/scenario.toml --out out --mechanism dge
    Run {
        /// The scenario file.
        scenario: std::path::PathBuf,
        /// Write the final tensors and report.json here (only if the run succeeds).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// DMA queues, 1..=16 (default 16).
        #[arg(long, value_name = "N")]
        queues: Option<usize>,
        /// Override the scenario's generation: sunda | cayman | mariana | maverick.
        #[arg(long, value_name = "G", value_parser = hostsim::scenario::generation_arg)]
        generation: Option<String>,
        /// Override the scenario's mechanism: auto | pool | dge | reference.
        #[arg(long, value_name = "M")]
        mechanism: Option<String>,
        /// Draw the DMA queues of the run over the timing model's time as an SVG.
        #[arg(long, value_name = "FILE.svg")]
        timeline: Option<std::path::PathBuf>,
        /// Check every byte each op reads or writes against the tensors it names; a
        /// finding (another tensor's bytes, fabric no tensor owns, an unwritten byte of
        /// an `init = "uninit"` tensor) is a fault: exit 1, nothing written.
        #[arg(long)]
        sanitize: bool,
        /// Write the run's timeline as a Chrome trace-event JSON file (open it in
        /// Perfetto: ui.perfetto.dev, "Open trace file").
        #[arg(long, value_name = "FILE.json")]
        trace: Option<std::path::PathBuf>,
    },
    /// Generate the scenario's descriptor queues through the DGE (recorded from a run on
    /// a scratch fabric) and write them as one queue file; print per-queue counts.
    ///
    /// Example: hostsim gen examples/embedding/scenario.toml -o embedding.dmaq --queues 4
    Gen {
        /// The scenario file.
        scenario: std::path::PathBuf,
        /// The queue file to write.
        #[arg(short = 'o', long = "out", value_name = "QUEUES")]
        out: std::path::PathBuf,
        /// DMA queues, 1..=16 (default 16).
        #[arg(long, value_name = "N")]
        queues: Option<usize>,
        /// Override the scenario's generation: sunda | cayman | mariana | maverick.
        #[arg(long, value_name = "G", value_parser = hostsim::scenario::generation_arg)]
        generation: Option<String>,
    },
    /// Replay a queue file over a scenario's initial tensors; with --out write the same
    /// outputs as run.
    ///
    /// Example: hostsim replay embedding.dmaq --scenario examples/embedding/scenario.toml --out out
    Replay {
        /// The queue file.
        queues: std::path::PathBuf,
        /// The scenario whose tensors the file runs over.
        #[arg(long, value_name = "SCENARIO")]
        scenario: std::path::PathBuf,
        /// Override the scenario's generation (as gen was given it): sunda | cayman |
        /// mariana | maverick.
        #[arg(long, value_name = "G", value_parser = hostsim::scenario::generation_arg)]
        generation: Option<String>,
        /// Write the final tensors and report.json here (only if the replay succeeds).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// Draw the file's DMA queues over the timing model's time as an SVG.
        #[arg(long, value_name = "FILE.svg")]
        timeline: Option<std::path::PathBuf>,
        /// Write the file's queues as a Chrome trace-event JSON file (Perfetto).
        #[arg(long, value_name = "FILE.json")]
        trace: Option<std::path::PathBuf>,
    },
    /// Explain each op of a scenario on the DGE route without writing anything: the
    /// lowering, the DGE stages, the descriptors (count, minimal count, sizes, queues),
    /// the timing model's estimate and efficiency, and lints with stable codes
    /// (small-descriptors, duplicate-indices, oob-indices, queue-imbalance,
    /// partition-split, overlap, nki-compute, negative-scalar). Exit status 2 for invalid
    /// input.
    ///
    /// Example: hostsim explain examples/embedding/scenario.toml --op 1 --json
    Explain {
        /// The scenario file.
        scenario: std::path::PathBuf,
        /// Only op N (numbered from 0; earlier ops still run first).
        #[arg(long, value_name = "N")]
        op: Option<usize>,
        /// Override the scenario's generation: sunda | cayman | mariana | maverick.
        #[arg(long, value_name = "G", value_parser = hostsim::scenario::generation_arg)]
        generation: Option<String>,
        /// DMA queues, 1..=16 (default 16).
        #[arg(long, value_name = "N")]
        queues: Option<usize>,
        /// Print one JSON object instead of the text.
        #[arg(long)]
        json: bool,
        /// Write the run's timeline as a Chrome trace-event JSON file (Perfetto).
        #[arg(long, value_name = "FILE.json")]
        trace: Option<std::path::PathBuf>,
    },
    /// The ISA of a generation: the summary (opcodes, operand structs, routes; also what
    /// `hostsim isa` alone prints), or one 64-byte instruction decoded from hex / encoded
    /// from its fields by name.
    ///
    /// Example: hostsim isa decode $HEX --generation maverick | hostsim isa encode
    Isa(tools_cli::IsaArgs),
    /// List a queue file's descriptors (queue, position, src, dst, bytes, op, dtype,
    /// flags), after verifying the whole file; optionally draw its timeline as SVG.
    /// Exit status 2 for a bad file, naming what is wrong and its byte offset.
    ///
    /// Example: hostsim inspect embedding.dmaq --json --timeline embedding.svg
    Inspect(tools_cli::InspectArgs),
    /// Differential fuzzing: edge-biased random cases (ivp lane ops, DGE descriptor
    /// generation, DMA queue replay, every OOB policy across the routes, 64-byte ISA
    /// structs), compared with the reference. A mismatch writes a reproducer to --out and
    /// exits 1; the last line is `fuzz: N cases, M mismatches`, also after Ctrl-C.
    ///
    /// Example: hostsim fuzz --target oob --seed 7 --seconds 30 --out fuzz-out
    Fuzz(hostsim::fuzz::command::Options),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tools_cli::init_tracing(cli.verbose);
    let result = match cli.command {
        None => run_demo(None),
        Some(Command::Demo { generation }) => run_demo(generation.as_deref()),
        Some(Command::Isa(args)) => tools_cli::isa(&args),
        Some(Command::Inspect(args)) => tools_cli::inspect(&args),
        Some(Command::Fuzz(opts)) => return run_fuzz(&opts),
        Some(Command::Run {
            scenario,
            out,
            queues,
            generation,
            mechanism,
            timeline,
            sanitize,
            trace,
        }) => {
            let settings = hostsim::scenario::commands::Settings {
                generation,
                mechanism,
                queues,
                sanitize,
            };
            let outputs = hostsim::scenario::commands::Outputs {
                dir: out.as_deref(),
                timeline: timeline.as_deref(),
                trace: trace.as_deref(),
            };
            hostsim::scenario::commands::run_with(&scenario, outputs, &settings)
                .map(|text| print_out(&text))
        }
        Some(Command::Gen {
            scenario,
            out,
            queues,
            generation,
        }) => {
            let settings = hostsim::scenario::commands::Settings {
                generation,
                queues,
                ..Default::default()
            };
            hostsim::scenario::commands::gen(&scenario, &out, &settings).map(|t| print_out(&t))
        }
        Some(Command::Replay {
            queues,
            scenario,
            generation,
            out,
            timeline,
            trace,
        }) => {
            let outputs = hostsim::scenario::commands::Outputs {
                dir: out.as_deref(),
                timeline: timeline.as_deref(),
                trace: trace.as_deref(),
            };
            let settings = hostsim::scenario::commands::Settings {
                generation,
                ..Default::default()
            };
            hostsim::scenario::commands::replay(&queues, &scenario, &settings, outputs)
                .map(|t| print_out(&t))
        }
        Some(Command::Explain {
            scenario,
            op,
            generation,
            queues,
            json,
            trace,
        }) => {
            let opts = hostsim::explain::Options {
                op,
                generation,
                queues,
            };
            run_explain(&scenario, &opts, json, trace.as_deref())
        }
        Some(Command::Bench {
            json,
            filter,
            only,
            repeat,
        }) => run_bench(json, filter, only, repeat),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hostsim: {e}");
            ExitCode::from(hostsim::scenario::exit_code(&e))
        }
    }
}

/// `hostsim fuzz`: Ctrl-C raises the stop flag (another press, not the same one's echo,
/// exits at once: [`Interrupts`](hostsim::fuzz::command::Interrupts)), caught panics
/// stay quiet (each is reported as a mismatch), exit 1 on any mismatch, closed stdout
/// or not.
fn run_fuzz(opts: &hostsim::fuzz::command::Options) -> ExitCode {
    use hostsim::fuzz::command::Interrupts;
    use std::sync::Arc;
    let presses = Arc::new(Interrupts::default());
    let handler = Arc::clone(&presses);
    let _ = ctrlc::set_handler(move || {
        if handler.press(std::time::Instant::now()) {
            std::process::exit(130);
        }
    });
    std::panic::set_hook(Box::new(|_| {}));
    // a closed stdout stops the lines, not the run: the exit code still tells the findings
    let mut reader = true;
    let print = &mut |line: &str| reader = reader && print_kept(&format!("{line}\n"));
    let result = hostsim::fuzz::command::execute(opts, &presses.stop, print);
    let _ = std::panic::take_hook();
    match result {
        Ok(s) if s.findings > 0 => ExitCode::FAILURE,
        Ok(s) if s.interrupted => ExitCode::from(130),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hostsim: {e}");
            ExitCode::from(hostsim::scenario::exit_code(&e))
        }
    }
}

/// `hostsim explain`: the trace (if asked for) is written, all or nothing, before the
/// explanation is printed.
fn run_explain(
    scenario: &std::path::Path,
    opts: &hostsim::explain::Options,
    json: bool,
    trace: Option<&std::path::Path>,
) -> Result<(), hostsim::Error> {
    let outputs = hostsim::scenario::commands::Outputs {
        trace,
        ..Default::default()
    };
    outputs.check()?;
    let (explained, drawn) = hostsim::explain::explain(scenario, opts, trace.is_some())?;
    if let Some((path, text)) = trace.zip(drawn.as_deref()) {
        hostsim::scenario::exec::write_outputs(&[(path, text)], None)?;
    }
    match json {
        true => print_out(&explained.to_json()),
        false => print_out(&explained.text()),
    }
    Ok(())
}

fn run_demo(generation: Option<&str>) -> Result<(), hostsim::Error> {
    let only = generation.map(Generation::from_name).transpose()?;
    print_out(&hostsim::demo::run(only)?);
    Ok(())
}

fn run_bench(
    json: bool,
    filter: Option<String>,
    only: Option<String>,
    repeat: u32,
) -> Result<(), hostsim::Error> {
    use hostsim::bench;
    let opts = bench::BenchOptions {
        exact: only.is_some(),
        filter: only.clone().or(filter),
        repeat: repeat as usize,
    };
    bench::selected(&opts)?;
    if !json {
        print_out(&bench::table_header());
    }
    let print_row = |row: &bench::BenchRow| {
        if !json {
            print_out(&bench::table_line(row));
        }
    };
    // Each workload in a child of its own (clean peak memory), unless this is the child.
    let rows = match (only, std::env::current_exe()) {
        (None, Ok(exe)) => bench::run_isolated(&opts, &exe, print_row)?,
        _ => bench::run(&opts, print_row)?,
    };
    if json {
        let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
        print_out(&format!("{text}\n"));
    }
    Ok(())
}
