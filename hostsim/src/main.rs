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
