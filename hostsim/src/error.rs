//! The `hostsim` crate's one error type.

use thiserror::Error;

use crate::isa::{FieldPath, Rule};

/// Every failure of the ISA layer, the kernels, the runtime, the lowering and scenarios.
#[derive(Debug, Error)]
pub enum Error {
    /// An instruction buffer that is not exactly one 64-byte operand struct.
    #[error("instruction is {len} bytes; an ISA instruction is exactly 64 bytes")]
    InstructionLength { len: usize },
    /// An opcode byte outside the opcode table.
    #[error("unknown opcode {opcode:#04x} (known: 0x67 0x68 0x79 0xb8 0xbb 0xca 0xe7)")]
    UnknownOpcode { opcode: u8 },
    /// The raw 0x79 EMBEDDING_UPDATE: a known opcode with no operand struct.
    #[error("opcode {opcode:#04x} {name} has no operand struct (raw SEQ form; encode PSEUDO_EMBEDDING_UPDATE 0xca)")]
    NoOperandStruct { opcode: u8, name: &'static str },
    /// An instruction's text form (`isa encode`) that does not parse as TOML or JSON.
    #[error("instruction {format}: {message}")]
    InstructionText {
        format: &'static str,
        message: String,
    },
    /// An instruction's hex form (`isa decode`) with a character that is not a hex digit
    /// or an odd digit count.
    #[error("instruction hex: {rule}")]
    InstructionHex { rule: String },
    /// An instruction's text form naming a field its operand struct does not have.
    #[error("{structure} has no field {field} (its fields: {known})")]
    TextUnknownField {
        structure: &'static str,
        field: String,
        known: String,
    },
    /// An instruction's text form without a field (every non-reserved field is required).
    #[error("{structure}.{field} is missing: every field but the reserved ones must be given")]
    TextMissingField {
        structure: &'static str,
        field: String,
    },
    /// An instruction's text form with a value its field cannot hold.
    #[error("{structure}.{field} = {value}: must be {rule}")]
    TextFieldValue {
        structure: &'static str,
        field: String,
        value: String,
        rule: String,
    },
    /// A tool's output file or stream that cannot be written (inspect, the SVG timeline).
    #[error("{what}: cannot be written: {message}")]
    Output { what: String, message: String },
    /// A queue file that cannot be opened or fails verification (`inspect`), naming it.
    #[error("{file}: {source}")]
    QueueFileInput { file: String, source: dma::Error },
    /// A queue file `gen` made for other initial tensors than the scenario `replay` was
    /// given.
    #[error("{file}: made by gen for other initial tensors (origin {stored:#018x}) than the scenario's (origin {scenario:#018x}): replay it over the scenario it was made from, or gen it again")]
    QueueFileOrigin {
        file: String,
        stored: u64,
        scenario: u64,
    },
    /// A reserved byte that is not zero.
    #[error("{field}[{index}] = {value:#04x}: reserved bytes must be zero")]
    ReservedByte {
        field: FieldPath,
        index: usize,
        value: u8,
    },
    /// A field value that breaks an ISA rule (decode or per-generation validity).
    #[error("{field} = {value}: {rule}")]
    InvalidField {
        field: FieldPath,
        value: u64,
        rule: Rule,
    },
    /// A field whose code or address the `dma` crate rejects (dtype, compute op, CCE_OP,
    /// ADDR4 space code, fabric range).
    #[error("{field}: {source}")]
    Field {
        field: FieldPath,
        source: dma::Error,
    },
    /// A `dma` error without a field to name.
    #[error(transparent)]
    Dma(#[from] dma::Error),
    /// A Pool_Buffer channel outside 0..128.
    #[error("Pool_Buffer channel {channel} does not exist (channels are 0..128)")]
    PoolChannel { channel: u32 },
    /// A Pool_Buffer window whose start is not a multiple of 512.
    #[error("Pool_Buffer start_index {start_index} is not a multiple of 512")]
    PoolWindowStart { start_index: u32 },
    /// A Pool_Buffer window that is not a whole number of at most 512 elements.
    #[error("Pool_Buffer window of {bytes} bytes is not a whole number of at most 512 {dtype:?} elements")]
    PoolWindowLength { bytes: usize, dtype: dma::Dtype },
    /// GATHER copies window bytes without a cast, so element sizes must match.
    #[error("GATHER channel {channel}: out_dtype {out:?} ({out_size} bytes) does not match the Pool_Buffer window dtype {window:?} ({window_size} bytes)")]
    GatherWindowDtype {
        channel: u32,
        out: dma::Dtype,
        out_size: usize,
        window: dma::Dtype,
        window_size: usize,
    },
    /// A hard OOB error: an index at or beyond its side's bound with `idx_bound_is_err` (the
    /// rows of its tensor, or the size of its shape-register dim).
    #[error("{side} index {value} at position {position} is out of bounds (bound {bound})")]
    IndexOutOfBounds {
        side: crate::core_state::IndexSide,
        position: u32,
        value: u32,
        bound: u64,
    },
    /// An index whose row leaves the fabric (bound check disabled, or not bounded).
    #[error("{side} index {value} at position {position} addresses outside the fabric: {source}")]
    IndexAddress {
        side: crate::core_state::IndexSide,
        position: u32,
        value: u32,
        source: dma::Error,
    },
    /// Two scatter positions naming one destination row without `non_unique_dst_idx`.
    #[error("dst index {value} repeats at positions {first} and {second}; duplicate destinations need non_unique_dst_idx (in a scenario, unique_indices = false)")]
    DuplicateDestination { value: u32, first: u32, second: u32 },
    /// A descriptor-generation error.
    #[error(transparent)]
    Dge(#[from] dge::Error),
    /// A `.npy` file that cannot be read or written.
    #[error("{file}: {rule}")]
    Npy { file: String, rule: String },
    /// An opcode the POOL route has no kernel for (DMA_MEMCPY is the DGE's on every
    /// generation).
    #[error("opcode {opcode:#04x} {name} has no POOL kernel (route it to the DGE)")]
    NoPoolKernel { opcode: u8, name: &'static str },
    /// A POOL kernel's scatter lanes that no staged range took (the kernel stages every
    /// destination it may write, so this names a kernel bug; nothing is written).
    #[error("{kernel}: {lanes} scatter lanes fell outside the staged destination ranges; nothing written")]
    PoolDeadStores { kernel: &'static str, lanes: u32 },
    /// A POOL kernel's slice copy outside what it staged (a kernel bug; nothing is
    /// written).
    #[error("{kernel}: {len} bytes at {addr:#x} are outside the staged ranges; nothing written")]
    PoolStaging {
        kernel: &'static str,
        addr: u64,
        len: u64,
    },
    /// A row step the DGE's signed 32-bit indirection step cannot hold.
    #[error("{field} = {step}: a row step above 2^31 - 1 bytes does not fit the DGE's signed 32-bit indirection step (mulusan_2x32)")]
    DgeRowStep { field: FieldPath, step: u64 },
    /// A Pool_Buffer window the DGE cannot read back from SBUF at GATHER time.
    #[error("{field}: the DGE route reads a Pool_Buffer window from SBUF at GATHER time, so its element addresses must be affine in the element index (contiguous, or one stride after merging dimensions)")]
    DgeWindowPattern { field: FieldPath },
    /// A Pool_Buffer window the DGE route did not load itself.
    #[error("Pool_Buffer channel {channel} was loaded by another route; the DGE route gathers from the SBUF window its own POOL_BUFFER_LOAD recorded")]
    DgeWindowUnrecorded { channel: u32 },
    /// A Pool_Buffer window whose SBUF source changed since its LOAD (the DGE reads it at
    /// GATHER time).
    #[error("Pool_Buffer channel {channel}'s SBUF window changed since its POOL_BUFFER_LOAD; the DGE route gathers from SBUF and refuses a window it cannot read as loaded")]
    DgeWindowOverwritten { channel: u32 },
    /// A runtime asked to run on a fabric of another generation.
    #[error("the runtime targets {runtime} but the fabric is {fabric}; instructions are validated for the runtime's generation")]
    RuntimeGeneration {
        runtime: dma::Generation,
        fabric: dma::Generation,
    },
    /// A runtime stream stopped at a failing instruction (earlier ones took effect).
    #[error("instruction {index} ({opcode:#04x}) failed, the run stopped there (instructions before it took effect): {source}")]
    Stopped {
        index: usize,
        opcode: u8,
        source: Box<Error>,
    },
    /// An instruction of an op split into requests of 4096 indices failed, and the op
    /// was undone: nothing it wrote stays.
    #[error("instruction {index} ({opcode:#04x}) failed and the op was undone (nothing it wrote stays): {source}")]
    OpUndone {
        index: usize,
        opcode: u8,
        source: Box<Error>,
    },
    /// A program stopped at a failing step (earlier steps took effect).
    #[error("program step {step} failed, the program stopped there (steps before it took effect): {source}")]
    ProgramStep { step: usize, source: Box<Error> },
    /// A mechanism the runtime cannot run yet.
    #[error("the {mechanism} mechanism is not available: {reason}")]
    MechanismUnavailable {
        mechanism: &'static str,
        reason: &'static str,
    },
    /// An NKI-level op argument that breaks the op's rule.
    #[error("{op}: {arg} = {value}: {rule}")]
    NkiArgument {
        op: &'static str,
        arg: &'static str,
        value: u64,
        rule: &'static str,
    },
    /// An NKI-level op argument in a memory space the op cannot reach.
    #[error("{op}: {arg} is in {space}: {rule}")]
    NkiSpace {
        op: &'static str,
        arg: &'static str,
        space: &'static str,
        rule: &'static str,
    },
    /// An NKI-level op argument of the wrong element type, named.
    #[error("{op}: {arg} = {value}: {rule}")]
    NkiDtype {
        op: &'static str,
        arg: &'static str,
        value: dma::Dtype,
        rule: &'static str,
    },
    /// An access-pattern side (`.ap()`) that breaks a rule of `crate::nki::ap`.
    #[error("{op}: {side}: {rule}")]
    ApPattern {
        op: &'static str,
        side: &'static str,
        rule: String,
    },
    /// A hard OOB error of an access-pattern DMA, in the op's terms: the index tile, its
    /// value as its dtype reads (a negative i32 shown negative) and the tensor dim.
    #[error("{side} index {value} at position {position} of {tile} is out of bounds for dim {dim} of {tensor} (size {bound})")]
    ApIndexOutOfBounds {
        side: crate::core_state::IndexSide,
        position: u32,
        value: i64,
        tile: String,
        dim: usize,
        tensor: String,
        bound: u64,
    },
    /// A `scalar_offset` whose value, read when the op runs, takes its side's pattern out
    /// of its tensor; on a side with an index tile, the first in-bounds index it takes out
    /// (its position and value). `bound` is the tensor's size along the dim it shifts.
    #[error("{side}: scalar_offset {value} {rule}{}", index.map_or(String::new(), |(p, v)| format!(" (index {v} at position {p})")))]
    ApScalarOffset {
        side: &'static str,
        value: i64,
        rule: String,
        index: Option<(u32, u32)>,
        bound: u64,
    },
    /// An index below its bound (the tensor's size along `indirect_dim`) whose walk, read
    /// when the op runs, leaves the tensor: its block of positions runs past an end.
    #[error("{side}: index {value} at position {position} (below its bound {bound}) takes the walk out of its tensor: {rule}")]
    ApIndexLeaves {
        side: &'static str,
        position: u32,
        value: u32,
        rule: String,
        bound: u64,
    },
    /// An NKI-level op the lowering cannot express as ISA instructions.
    #[error("{op} cannot be lowered: {reason}")]
    NkiUnsupported {
        op: &'static str,
        reason: &'static str,
    },
    /// A scenario file that does not parse (TOML or JSON), at its line and column (1-based).
    #[error("{file}:{line}:{column}: {message}")]
    ScenarioSyntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A scenario setting, file or folder that breaks a rule.
    #[error("{what}: {rule}")]
    Scenario { what: String, rule: String },
    /// A scenario tensor (by index and name) that breaks a rule.
    #[error("tensor {index} ({name}): {rule}")]
    ScenarioTensor {
        index: usize,
        name: String,
        rule: String,
    },
    /// A scenario op (by index and kind) whose fields break a rule.
    #[error("op {index} ({op}{name}): {rule}")]
    ScenarioOp {
        index: usize,
        op: &'static str,
        /// ` name="label"` for an op with a `name`, else empty.
        name: String,
        rule: String,
    },
    /// A scenario op rejected when it was lowered or validated, before anything ran.
    #[error("op {index} ({op}{operands}): {source}")]
    ScenarioOpInvalid {
        index: usize,
        op: &'static str,
        /// ` name="label"` for an op with a `name`, then ` field=tensor` pairs, each after
        /// a space (none for an `isa` op).
        operands: String,
        source: Box<Error>,
    },
    /// A scenario op that failed while running (the run stopped there).
    #[error("op {index} ({op}{operands}) failed while running: {source}")]
    ScenarioOpFault {
        index: usize,
        op: &'static str,
        /// As for [`Error::ScenarioOpInvalid`].
        operands: String,
        source: Box<Error>,
    },
    /// The sanitizer's finding on one instruction of an op (`run --sanitize`).
    #[error("sanitizer: instruction {instruction} ({opcode}) {finding}")]
    SanitizerFinding {
        instruction: usize,
        opcode: &'static str,
        finding: String,
    },
    /// `hostsim bench --filter` that names no workload.
    #[error("no bench workload matches --filter {filter} (workloads: {known})")]
    BenchFilter { filter: String, known: String },
    /// A bench workload's child process that failed or printed no row.
    #[error("bench workload {workload} failed in its child process: {detail}")]
    BenchChild { workload: String, detail: String },
    /// `hostsim fuzz --target` naming no target.
    #[error("fuzz target {target} does not exist (targets: ivp dge dma oob isa all)")]
    FuzzTarget { target: String },
    /// `hostsim fuzz` options that break a rule (two budgets, `--case` without a target).
    #[error("fuzz {option}: {rule}")]
    FuzzOption {
        option: &'static str,
        rule: &'static str,
    },
    /// A fuzz reproducer that cannot be written.
    #[error("fuzz reproducer {path}: {rule}")]
    FuzzReproducer { path: String, rule: String },
}

/// A route-independent classification of an [`enum@Error`]: what the equivalence suite
/// compares when two mechanisms reject one input (never the message text, which names
/// layer-specific detail). A DGE error and a hostsim error for the same failure (a hard
/// OOB index, an index row off the fabric, a duplicate destination) have one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The bytes are not an instruction (length, opcode, reserved bytes).
    Decode,
    /// An ISA field breaks the named rule (decode or per-generation validity).
    Rule(Rule),
    /// A field whose code or address the fabric rejects.
    Field,
    /// A hard OOB error on one side.
    IndexOutOfBounds(crate::core_state::IndexSide),
    /// An index whose row leaves the fabric, on one side.
    IndexAddress(crate::core_state::IndexSide),
    /// Duplicate scatter destinations without `non_unique_dst_idx`.
    DuplicateDestination,
    /// A Pool_Buffer channel, window or dtype error.
    PoolBuffer,
    /// No kernel or mechanism serves the instruction.
    NoMechanism,
    /// A fabric access error without a field.
    Fabric,
    /// A descriptor-generation error not listed above.
    Descriptor,
    /// A kernel's internal staging fault.
    KernelFault,
    /// A runtime or NKI-lowering error.
    Runtime,
    /// An access the sanitizer refuses (another tensor's bytes, unowned or unwritten ones).
    Sanitizer,
}

impl Error {
    /// The route-independent kind of this error ([`Error::Stopped`] reports its cause's).
    /// Variants added later fall to [`ErrorKind::Runtime`] until they are classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InstructionLength { .. }
            | Error::UnknownOpcode { .. }
            | Error::NoOperandStruct { .. }
            | Error::ReservedByte { .. }
            | Error::InstructionText { .. }
            | Error::InstructionHex { .. }
            | Error::TextUnknownField { .. }
            | Error::TextMissingField { .. }
            | Error::TextFieldValue { .. } => ErrorKind::Decode,
            Error::InvalidField { rule, .. } => ErrorKind::Rule(*rule),
            Error::Field { .. } => ErrorKind::Field,
            Error::IndexOutOfBounds { side, .. } | Error::ApIndexOutOfBounds { side, .. } => {
                ErrorKind::IndexOutOfBounds(*side)
            }
            Error::IndexAddress { side, .. } => ErrorKind::IndexAddress(*side),
            // a run-time value that takes its side out of its tensor, as an index does
            Error::ApScalarOffset { side, .. } | Error::ApIndexLeaves { side, .. } => {
                ErrorKind::IndexOutOfBounds(match *side {
                    "dst" => crate::core_state::IndexSide::Dst,
                    _ => crate::core_state::IndexSide::Src,
                })
            }
            Error::DuplicateDestination { .. } => ErrorKind::DuplicateDestination,
            Error::PoolChannel { .. }
            | Error::PoolWindowStart { .. }
            | Error::PoolWindowLength { .. }
            | Error::GatherWindowDtype { .. } => ErrorKind::PoolBuffer,
            Error::NoPoolKernel { .. }
            | Error::MechanismUnavailable { .. }
            | Error::DgeRowStep { .. }
            | Error::DgeWindowPattern { .. }
            | Error::DgeWindowUnrecorded { .. }
            | Error::DgeWindowOverwritten { .. } => ErrorKind::NoMechanism,
            Error::Dma(_) => ErrorKind::Fabric,
            Error::Dge(e) => dge_kind(e),
            Error::PoolDeadStores { .. } | Error::PoolStaging { .. } => ErrorKind::KernelFault,
            Error::SanitizerFinding { .. } => ErrorKind::Sanitizer,
            Error::Stopped { source, .. }
            | Error::OpUndone { source, .. }
            | Error::ProgramStep { source, .. } => source.kind(),
            Error::ScenarioOpInvalid { source, .. } | Error::ScenarioOpFault { source, .. } => {
                source.kind()
            }
            _ => ErrorKind::Runtime,
        }
    }
}

/// The kind of a descriptor-generation error; its side names are `src` / `dst`.
fn dge_kind(e: &dge::Error) -> ErrorKind {
    use crate::core_state::IndexSide;
    let side = |s: &str| match s {
        "destination" => IndexSide::Dst,
        _ => IndexSide::Src,
    };
    match e {
        dge::Error::IndexOutOfBounds { side: s, .. } => ErrorKind::IndexOutOfBounds(side(s)),
        dge::Error::IndexOffFabric { side: s, .. } => ErrorKind::IndexAddress(side(s)),
        dge::Error::DuplicateDestination { .. } => ErrorKind::DuplicateDestination,
        // a by-design refusal (crate::dge_route::by_design): the route does not serve it
        dge::Error::SourceOverlapsDestination { .. } => ErrorKind::NoMechanism,
        dge::Error::Fabric(_) => ErrorKind::Fabric,
        _ => ErrorKind::Descriptor,
    }
}

/// What an error says about the index that caused it, where it names one: its position
/// in the index tile, its value (a negative i32 shown negative) and the bound it broke.
/// The Python package's `Fault` carries these as attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexFault {
    pub position: Option<u32>,
    pub value: Option<i64>,
    pub bound: Option<u64>,
}

impl IndexFault {
    fn at(position: u32, value: impl Into<i64>, bound: Option<u64>) -> IndexFault {
        IndexFault {
            position: Some(position),
            value: Some(value.into()),
            bound,
        }
    }
}

impl Error {
    /// The error this one wraps at the bottom, looking through the op, step and
    /// instruction that wrap it (itself if it wraps none).
    pub fn root(&self) -> &Error {
        match self {
            Error::Stopped { source, .. }
            | Error::OpUndone { source, .. }
            | Error::ProgramStep { source, .. }
            | Error::ScenarioOpInvalid { source, .. }
            | Error::ScenarioOpFault { source, .. } => source.root(),
            e => e,
        }
    }

    /// The index this error names, looking through the op and instruction that wrap it
    /// (all `None` for an error about no index).
    pub fn index_fault(&self) -> IndexFault {
        match self.root() {
            Error::IndexOutOfBounds {
                position,
                value,
                bound,
                ..
            } => IndexFault::at(*position, *value, Some(*bound)),
            Error::ApIndexOutOfBounds {
                position,
                value,
                bound,
                ..
            } => IndexFault::at(*position, *value, Some(*bound)),
            Error::IndexAddress {
                position, value, ..
            } => IndexFault::at(*position, *value, None),
            Error::DuplicateDestination { value, second, .. } => {
                IndexFault::at(*second, *value, None)
            }
            Error::ApScalarOffset {
                index: Some((position, index)),
                bound,
                ..
            } => IndexFault::at(*position, *index, Some(*bound)),
            Error::ApIndexLeaves {
                position,
                value,
                bound,
                ..
            } => IndexFault::at(*position, *value, Some(*bound)),
            Error::ApScalarOffset { value, bound, .. } => IndexFault {
                value: Some(*value),
                bound: Some(*bound),
                ..IndexFault::default()
            },
            Error::Dge(e) => dge_index_fault(e),
            _ => IndexFault::default(),
        }
    }
}

/// [`Error::index_fault`] of a descriptor-generation error.
fn dge_index_fault(e: &dge::Error) -> IndexFault {
    match e {
        dge::Error::IndexOutOfBounds {
            position,
            value,
            bound,
            ..
        } => IndexFault::at(*position, *value, Some(*bound)),
        dge::Error::IndexOffFabric {
            position, value, ..
        }
        | dge::Error::IndexOverflow {
            position, value, ..
        } => IndexFault::at(*position, *value, None),
        dge::Error::DuplicateDestination { value, second, .. } => {
            IndexFault::at(*second, *value, None)
        }
        _ => IndexFault::default(),
    }
}

impl Error {
    /// The ISA rule an [`Error::InvalidField`] breaks.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::InvalidField { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// The `STRUCT.field` an ISA error names.
    pub fn field(&self) -> Option<FieldPath> {
        match self {
            Error::ReservedByte { field, .. }
            | Error::InvalidField { field, .. }
            | Error::Field { field, .. } => Some(*field),
            _ => None,
        }
    }
}
