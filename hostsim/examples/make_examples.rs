//! Writes the `.npy` inputs of the example scenarios (`hostsim::scenario::examples`).
//!
//! `cargo run -p hostsim --example make_examples` writes them into the repository's
//! `examples/` folder; `-- DIR` writes them under DIR instead.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples")));
    match hostsim::scenario::examples::write_examples(&root) {
        Ok(paths) => {
            for p in paths {
                println!("wrote {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make_examples: {e}");
            ExitCode::from(2)
        }
    }
}
