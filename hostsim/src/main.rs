//! The `hostsim` command-line tool.

use clap::{Parser, Subcommand};
use dma::Generation;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hostsim",
    version,
    about = "A model of an ML accelerator core's indirection engine (DGE, DMA engine, IVP gather core, HBM/SBUF/PSUM fabric)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded demo: a DGE row gather with out-of-bounds indices, replayed and checked.
    ///
    /// Example: hostsim demo --generation cayman
    Demo {
        /// sunda | cayman | mariana | maverick (or v2..v5)
        #[arg(long, default_value = "cayman")]
        generation: String,
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
    /// Print the fabric and the ISA of a generation: opcodes, operand structs, routes.
    ///
    /// Example: hostsim isa --generation sunda
    Isa {
        /// sunda | cayman | mariana | maverick (or v2..v5)
        #[arg(long, default_value = "cayman")]
        generation: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run_demo("cayman"),
        Some(Command::Demo { generation }) => run_demo(&generation),
        Some(Command::Isa { generation }) => print_isa(&generation),
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
            ExitCode::FAILURE
        }
    }
}

fn run_demo(generation: &str) -> Result<(), hostsim::Error> {
    let generation = Generation::from_name(generation)?;
    print!("{}", hostsim::isa::summary(generation));
    println!();
    print!("{}", hostsim::demo::run(generation)?);
    Ok(())
}

fn print_isa(generation: &str) -> Result<(), hostsim::Error> {
    let generation = Generation::from_name(generation)?;
    print!("{}", hostsim::demo::fabric_summary(generation));
    print!("{}", hostsim::isa::summary(generation));
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
        print!("{}", bench::table_header());
    }
    let print_row = |row: &bench::BenchRow| {
        if !json {
            print!("{}", bench::table_line(row));
        }
    };
    // Each workload in a child of its own (clean peak memory), unless this is the child.
    let rows = match (only, std::env::current_exe()) {
        (None, Ok(exe)) => bench::run_isolated(&opts, &exe, print_row)?,
        _ => bench::run(&opts, print_row)?,
    };
    if json {
        let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
        println!("{text}");
    }
    Ok(())
}
