//! The `dma` crate's one error type.

use thiserror::Error;

use crate::descriptor::SemWait;

/// Whether a racing descriptor reads or writes the contested bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Read,
    Write,
}

impl std::fmt::Display for AccessKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
        })
    }
}

/// Every failure of the fabric, dtypes, descriptors, queue files and the engine.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("unknown generation {name:?} (expected sunda, cayman, mariana, maverick, v2..v5 or trn1..trn3)")]
    UnknownGeneration { name: String },
    #[error("unknown dtype code {code:#x} (known: 0x2..=0xa, see DTYPE_TABLE)")]
    UnknownDtypeCode { code: u8 },
    #[error("unknown dtype {name:?} (expected u8 i8 u16 i16 u32 i32 i64 f16 bf16 f32)")]
    UnknownDtypeName { name: String },
    #[error("unknown memory space {name:?} (expected hbm, sbuf or psum)")]
    UnknownSpace { name: String },
    #[error("address {addr:#x} is not in any fabric region (past HBM, in a partition gap or past the last partition)")]
    Unmapped { addr: u64 },
    #[error("{space} partition {partition} offset {offset:#x} is off the fabric ({partitions} partitions of {bytes:#x} bytes)")]
    BadLocation {
        space: &'static str,
        partition: u32,
        offset: u64,
        partitions: u32,
        bytes: u64,
    },
    #[error("access of 0 bytes at {addr:#x}: accesses must move at least one byte")]
    EmptyAccess { addr: u64 },
    #[error("access of {len:#x} bytes at {addr:#x} overflows the 64-bit address space")]
    AddressOverflow { addr: u64, len: u64 },
    #[error("access of {len:#x} bytes at {addr:#x} leaves {region}")]
    OutOfRegion { addr: u64, len: u64, region: String },
    #[error("{space} has no ADDR4 encoding (ADDR4 names SBUF or PSUM only)")]
    Addr4Space { space: &'static str },
    #[error("ADDR4 partition {partition} / offset {offset:#x} does not fit (partition < 128, offset < 2^23)")]
    Addr4Field { partition: u32, offset: u32 },
    #[error("ADDR4 {raw:#010x} has reserved space code {code} (0 = SBUF, 1 = PSUM)")]
    Addr4Reserved { raw: u32, code: u32 },
    #[error("unknown DGE_COMPUTE_OP code {code} (NONE=0 ADD=1 MULTIPLY=2 MAX=3 MIN=4)")]
    UnknownComputeOp { code: u8 },
    #[error("CCE_OP code {code} is not allowed (ADD=0 MAX=2 MIN=3; 1, multiply, is disabled)")]
    UnknownCceOp { code: u8 },
    #[error("compute op on {dst} destination bytes and {src} source bytes: both operands must have the same length")]
    OperandLengthMismatch { dst: usize, src: usize },
    #[error("cast of {src} {src_dtype} source elements into {dst} {dst_dtype} destination elements: the two sides must have as many elements")]
    CastElementMismatch {
        src: usize,
        src_dtype: &'static str,
        dst: usize,
        dst_dtype: &'static str,
    },
    #[error("{len} bytes is not a whole number of {dtype} elements ({size} bytes each)")]
    PartialElement {
        len: u64,
        dtype: &'static str,
        size: usize,
    },
    #[error("fabric page at {page:#x} was not reserved: shared execution writes only pages that Fabric::reserve materialised during validation")]
    NotReserved { page: u64 },
    #[error("fill of {len:#x} bytes at {addr:#x} has an empty pattern (a fill needs at least one pattern byte)")]
    EmptyPattern { addr: u64, len: u64 },
    #[error("dtype {dtype} is not an index dtype (indices are u8, u16 or u32)")]
    NotIndexDtype { dtype: &'static str },
    #[error("descriptor field `{field}` = {value} ({value:#x}) is invalid: {rule}")]
    BadDescriptor {
        field: &'static str,
        value: u64,
        rule: String,
    },
    #[error("queue {queue} descriptor {index} signals semaphore {sem}, which queue {owner} already signals (each semaphore has one signalling queue)")]
    SemaphoreOwner {
        sem: u8,
        queue: usize,
        index: u64,
        owner: usize,
    },
    #[error("queue {queue} descriptor {index} waits for semaphore {sem} to be signalled {count} times but it is signalled only {signals} times in all")]
    SemaphoreNeverReached {
        sem: u8,
        count: u32,
        queue: usize,
        index: u64,
        signals: u64,
    },
    #[error("queue {queue} descriptor {index} waits for semaphore {sem} to be signalled {count} times but every queue stalls with it at {reached} (a wait cycle or a missing signal)")]
    SemaphoreDeadlock {
        queue: usize,
        index: u64,
        sem: u8,
        count: u32,
        reached: u64,
    },
    #[error("timeline queue {queue} descriptor {index} pushed after the queue was closed (a closed queue gets no more descriptors)")]
    TimelineClosed { queue: usize, index: u64 },
    #[error("queue count {count} is out of range (1..={max})")]
    QueueCount { count: usize, max: usize },
    #[error("queue {queue} does not exist ({queues} queues)")]
    NoSuchQueue { queue: usize, queues: usize },
    #[error("descriptor for queue {queue} pushed after queue {current}: a queue file holds its queues in order")]
    QueueOrder { queue: usize, current: usize },
    #[error("queue file header field `{field}` at byte {offset} is {value:#x}: {rule}")]
    QueueFileHeader {
        field: &'static str,
        offset: u64,
        value: u64,
        rule: &'static str,
    },
    #[error("queue file truncated at byte {offset}: {what} needs bytes up to {needed}")]
    QueueFileTruncated {
        offset: u64,
        needed: u64,
        what: String,
    },
    #[error(
        "queue file has trailing bytes from byte {offset}: its header's counts say it ends there"
    )]
    QueueFileTrailing { offset: u64 },
    #[error("queue file checksum (byte 16) is {stored:#018x} but the file hashes to {computed:#018x}: the file is corrupted")]
    QueueFileChecksum { stored: u64, computed: u64 },
    #[error("queue file queue {queue} descriptor {index} at byte {offset}: {source}")]
    QueueFileDescriptor {
        queue: usize,
        index: u64,
        offset: u64,
        source: Box<Error>,
    },
    #[error("queue file queue {queue} chunk {chunk} (descriptors from {first}, byte {offset}) changed since the file was verified: none of its descriptors runs")]
    QueueFileChanged {
        queue: usize,
        chunk: u64,
        first: u64,
        offset: u64,
    },
    #[error("queue file I/O error at byte {offset}: {message}")]
    QueueFileIo { offset: u64, message: String },
    #[error("the queue file cannot be opened: {message}")]
    QueueFileOpen { message: String },
    #[error("replay queue {queue} descriptor {index}: {what} rejected: {source}")]
    ReplayDescriptor {
        queue: usize,
        index: u64,
        what: &'static str,
        source: Box<Error>,
    },
    #[error("race: queue {first_queue} descriptors {first_from}..={first_to} {first_access} and queue {second_queue} descriptors {second_from}..={second_to} {second_access} bytes {lo:#x}..={end:#x}, and no semaphore orders them (overlapping writes, or a write and a read, must share a queue or be ordered)")]
    Race {
        first_queue: usize,
        first_from: u64,
        first_to: u64,
        first_access: AccessKind,
        second_queue: usize,
        second_from: u64,
        second_to: u64,
        second_access: AccessKind,
        lo: u64,
        end: u64,
    },
    #[error("engine config `{field}` = {value} is invalid: {rule}")]
    EngineConfig {
        field: &'static str,
        value: usize,
        rule: &'static str,
    },
    #[error("the DMA engine's thread pool could not start: {message}")]
    EngineRuntime { message: String },
    #[error("DMA queue {queue} stopped: {reason}")]
    EngineAborted { queue: usize, reason: String },
    #[error(
        "the replay was aborted before every queue ended (its remaining descriptors did not run)"
    )]
    RunAborted,
    #[error("streaming replay stopped after {executed} descriptors ran; {failed} descriptors were rejected or never ran: {source}")]
    StreamAborted {
        executed: u64,
        failed: u64,
        source: Box<Error>,
    },
    #[error("the queue file is for {file} but the fabric is {fabric}: a replay runs on the generation its queues were made for")]
    GenerationMismatch {
        file: &'static str,
        fabric: &'static str,
    },
    #[error("the queues were validated for {validated} but run on {running}: validated queues run on a fabric of their generation, by the engine (configuration) that validated them")]
    NotValidatedHere { validated: String, running: String },
    #[error("the race check needs every queue before execution starts: use Engine::run or Engine::replay_file, or RaceCheck::Off to stream")]
    RaceCheckStreaming,
    #[error("destination of {len:#x} bytes at {addr:#x} is outside the declared destinations")]
    UndeclaredDestination { addr: u64, len: u64 },
    #[error("queue {queue} descriptor {index} waits for semaphore {sem} to be signalled {count} times but only {pushed} signals were pushed before it (a session needs each SIGNAL pushed before the WAITs that need it)")]
    SemaphoreOrder {
        queue: usize,
        index: u64,
        sem: u8,
        count: u32,
        pushed: u64,
    },
}

impl Error {
    /// [`Error::SemaphoreDeadlock`]: descriptor `index` of `queue` waits on `wait`, whose
    /// semaphore every queue stalls with at `reached` signals.
    pub(crate) fn deadlock(queue: usize, index: u64, wait: SemWait, reached: u64) -> Error {
        Error::SemaphoreDeadlock {
            queue,
            index,
            sem: wait.sem.get(),
            count: wait.count.get(),
            reached,
        }
    }
}
