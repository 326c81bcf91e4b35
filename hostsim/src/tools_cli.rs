//! The binary's glue for the tool commands: `inspect`, `isa [summary|decode|encode]`, the
//! global `-v`/`-vv` flag and the tracing subscriber. The work is in the library
//! (`hostsim::inspect`, `hostsim::isa::text`, `hostsim::timeline`); this only parses,
//! prints and picks the streams.

use std::io::{BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use dma::{Generation, VerifiedQueueFile};
use hostsim::inspect::{write_listing, ListingFormat};
use hostsim::isa::text;
use hostsim::progress::Progress;
use hostsim::Error;

/// `hostsim inspect`.
#[derive(Args)]
pub struct InspectArgs {
    /// The queue file (as written by `hostsim gen`).
    queues: PathBuf,
    /// One JSON object per line (a header record, then one per descriptor) instead of the
    /// table.
    #[arg(long)]
    json: bool,
    /// Also draw the queues over the timing model's time as a standalone SVG.
    #[arg(long, value_name = "FILE.svg")]
    timeline: Option<PathBuf>,
    /// Also write the queues as a Chrome trace-event JSON file (Perfetto).
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
}

/// `hostsim isa`.
#[derive(Args)]
pub struct IsaArgs {
    #[command(subcommand)]
    action: Option<IsaAction>,
    /// The generation whose validity contract applies: sunda | cayman | mariana | maverick
    /// (or v2..v5, trn1..trn3).
    #[arg(long, global = true, default_value = "cayman", value_parser = hostsim::scenario::generation_arg)]
    generation: String,
}

/// The text format of an instruction's fields read by `isa encode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FieldFormat {
    /// JSON if the text starts with `{`, else TOML.
    Auto,
    Toml,
    Json,
}

/// The text format `isa decode` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PrintFormat {
    Toml,
    Json,
}

#[derive(Subcommand)]
enum IsaAction {
    /// Print the fabric and the ISA of a generation: opcodes, operand structs, routes
    /// (also what `hostsim isa` alone prints).
    ///
    /// Example: hostsim isa summary --generation sunda
    Summary,
    /// Decode one 64-byte instruction given in hex (spaces, commas and 0x prefixes allowed;
    /// from stdin if no argument) and print its opcode, struct and every field by name,
    /// then its validity on the generation. The output is valid input for `isa encode`.
    /// Exit status 2 if the bytes are not an instruction.
    ///
    /// Example: hostsim isa decode 68000400000100000100000000000000 08000100010001000002800001000000 000000000800010001000100090a0100 0000803f000000000000000000000000 --generation maverick
    Decode {
        /// The 64 bytes in hex (one argument or several).
        hex: Vec<String>,
        /// toml (default) or json.
        #[arg(long, value_enum, default_value = "toml")]
        format: PrintFormat,
    },
    /// Encode one instruction from its fields by name on stdin (TOML or JSON: `opcode`
    /// or `op` by name, plus every field `isa decode` prints), print its 64 bytes in hex,
    /// then its validity on the generation. Exit status 2 naming the field for an unknown
    /// or missing field or a value out of range.
    ///
    /// Example: hostsim isa decode $HEX > gather.toml; edit it; hostsim isa encode < gather.toml
    Encode {
        /// auto (default: JSON if the text starts with `{`), toml or json.
        #[arg(long, value_enum, default_value = "auto")]
        format: FieldFormat,
    },
}

/// The tracing subscriber on stderr: `-v` debug and `-vv` trace for the project's crates;
/// without `-v`, `RUST_LOG` if set, else warnings only.
pub fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let flags = match verbose {
        0 => None,
        1 => Some("warn,dge=debug,dma=debug,hostsim=debug,ivp=debug"),
        _ => Some("warn,dge=trace,dma=trace,hostsim=trace,ivp=trace"),
    };
    let filter = match flags {
        Some(f) => EnvFilter::new(f),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Writes `text` to stdout. A closed pipe (`hostsim isa | head -1`) ends the command
/// quietly, exit 0, as `inspect` does: the reader has what it asked for. Any other
/// failure to write exits 1, naming it.
pub fn print_out(text: &str) {
    if !print_kept(text) {
        std::process::exit(0)
    }
}

/// Writes `text` to stdout: `false` if its reader has gone (a closed pipe), for a
/// command that goes on without one (`fuzz`, whose exit code tells its findings). Any
/// other failure to write exits 1, naming it.
pub fn print_kept(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
        Err(e) => {
            eprintln!("hostsim: writing to stdout: {e}");
            std::process::exit(1)
        }
    }
}

/// Stdout for a listing: buffered, and remembering a closed pipe (`inspect | head`), which
/// ends the command quietly.
struct ListingOut {
    inner: BufWriter<std::io::StdoutLock<'static>>,
    broken: bool,
}

impl ListingOut {
    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.broken = true;
        }
        r
    }
}

impl Write for ListingOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// `hostsim inspect`: verify the whole file, then list it (and draw it).
pub fn inspect(args: &InspectArgs) -> Result<(), Error> {
    let outputs = hostsim::scenario::commands::Outputs {
        dir: None,
        timeline: args.timeline.as_deref(),
        trace: args.trace.as_deref(),
    };
    outputs.check()?;
    let mut file =
        VerifiedQueueFile::open_path(&args.queues).map_err(|e| Error::QueueFileInput {
            file: args.queues.display().to_string(),
            source: e,
        })?;
    // what replay would refuse before it writes (a semaphore stall, a range off the
    // fabric) is refused here too, before the listing
    let named = |source| Error::QueueFileInput {
        file: args.queues.display().to_string(),
        source,
    };
    let config = dma::EngineConfig {
        queues: file.header().queues(),
        workers: 1,
        ..dma::EngineConfig::default()
    };
    let fabric = dma::Fabric::new(file.header().generation());
    (dma::Engine::new(config)?.validate_file(&fabric, &mut file)).map_err(named)?;
    let format = if args.json {
        ListingFormat::JsonLines
    } else {
        ListingFormat::Table
    };
    let mut out = ListingOut {
        inner: BufWriter::new(std::io::stdout().lock()),
        broken: false,
    };
    let mut progress = Progress::new(file.summary().descriptors, "inspect");
    let wants_ops = args.timeline.is_some();
    let mut listed = write_listing(&mut file, format, &mut out, &mut progress, wants_ops);
    // A closed pipe (`inspect | head`) ends the listing quietly, but not the files asked
    // for: their walk goes on without the listing.
    let files_asked = args.timeline.is_some() || args.trace.is_some();
    if listed.is_err() && out.broken && files_asked {
        let mut sink = std::io::sink();
        listed = write_listing(&mut file, format, &mut sink, &mut progress, wants_ops);
    }
    progress.finish();
    let ops = match listed {
        Err(_) if out.broken && !files_asked => return Ok(()),
        other => other?,
    };
    let mut files = Vec::new();
    if let Some(path) = &args.timeline {
        let title = format!("DMA queues of {}", args.queues.display());
        let svg = hostsim::timeline::queue_file_svg(&mut file, &ops, &title)?;
        files.push((path.as_path(), svg));
    }
    if let Some(path) = &args.trace {
        let title = format!("hostsim inspect {}", args.queues.display());
        let trace = hostsim::trace::queue_file_trace(&mut file, &title)?;
        files.push((path.as_path(), trace));
    }
    let files: Vec<(&Path, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    hostsim::scenario::exec::write_outputs(&files, None)
}

/// `hostsim isa ...`.
pub fn isa(args: &IsaArgs) -> Result<(), Error> {
    let generation = Generation::from_name(&args.generation)?;
    match &args.action {
        None | Some(IsaAction::Summary) => {
            print_out(&hostsim::demo::fabric_summary(generation));
            print_out(&hostsim::isa::summary(generation));
        }
        Some(IsaAction::Decode { hex, format }) => {
            let text = if hex.is_empty() {
                stdin()?
            } else {
                hex.join(" ")
            };
            let inst = hostsim::isa::decode(&text::parse_hex(&text)?)?;
            match format {
                PrintFormat::Json => print_out(&text::to_json(&inst, Some(generation))),
                PrintFormat::Toml => print_out(&text::to_toml(&inst, Some(generation))),
            }
        }
        Some(IsaAction::Encode { format }) => {
            let input = stdin()?;
            let json = match format {
                FieldFormat::Auto => input.trim_start().starts_with('{'),
                f => *f == FieldFormat::Json,
            };
            let inst = if json {
                text::from_json(&input)?
            } else {
                text::from_toml(&input)?
            };
            let hex = text::to_hex(&inst.encode());
            print_out(&format!("{hex}\n# {}\n", text::verdict(&inst, generation)));
        }
    }
    Ok(())
}

fn stdin() -> Result<String, Error> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| Error::InstructionText {
            format: "stdin",
            message: e.to_string(),
        })?;
    Ok(s)
}
