//! The DMA descriptor: one contiguous run of at most 64 KiB moved (or reduced, cast, or
//! filled) from a source to a destination fabric address, in its 32-byte little-endian
//! wire form [`RawDescriptor`] and its validated typed form [`Descriptor`]; and the
//! semaphores that order descriptors across queues ([`SemId`], [`SemWait`],
//! [`SemaphoreLedger`]).
//!
//! # Wire layout (the project's own; the seeds give no descriptor layout)
//!
//! | bytes  | field        | meaning                                                    |
//! |--------|--------------|------------------------------------------------------------|
//! | 0..8   | `src`        | source [`FabricAddr`]; for FILL the fill element (below)   |
//! | 8..16  | `dst`        | destination [`FabricAddr`]                                 |
//! | 16..20 | `len`        | bytes, `1..=65536`                                         |
//! | 20     | `dtype`      | element dtype code ([`Dtype::code`])                       |
//! | 21     | `op`         | [`DescOp`] code: COPY=0 ADD=1 MULTIPLY=2 MAX=3 MIN=4 FILL=5 |
//! | 22..24 | `flags`      | bit 0 END_OF_INSTRUCTION, bit 1 NOTIFY, bit 2 SEM_WAIT, bit 3 SEM_SIGNAL; bits 4..16 reserved |
//! | 24     | `wait_sem`   | semaphore waited on (`0..16`), 0 unless SEM_WAIT           |
//! | 25     | `signal_sem` | semaphore signalled (`0..16`), 0 unless SEM_SIGNAL         |
//! | 26     | `src_dtype`  | 0, or for a cast the source's dtype code (not `dtype`'s)    |
//! | 27     | reserved     | zero                                                       |
//! | 28..32 | `wait_count` | signals to wait for (`>= 1`), 0 unless SEM_WAIT            |
//!
//! # Semantics
//!
//! - COPY writes `dst[i] = src[i]`; ADD/MULTIPLY/MAX/MIN (the DGE_COMPUTE_OP reductions)
//!   write `dst[i] = op(dst[i], src[i])` element-wise in `dtype`, so their length must be a
//!   whole number of elements. COPY may move any byte count.
//! - A **cast** (`src_dtype` non-zero) reads `src_dtype` elements and writes as many `dtype`
//!   elements: `len` is the destination's bytes (whole `dtype` elements), and the source
//!   run is `len / size(dtype) * size(src_dtype)` bytes; neither is over 64 KiB. COPY
//!   converts each source element through f32 to `dtype`; ADD/MULTIPLY/MAX/MIN convert
//!   both operands to f32, compute and convert the result to `dtype` ([`crate::cast`]).
//!   FILL reads no source and never casts. Reserved byte 27 stays zero either way, and a
//!   descriptor that does not cast has byte 26 zero, as before casts existed.
//! - FILL reads no source: the `src` field holds one element, little-endian in its low
//!   `dtype.size()` bytes (the bytes above must be zero), and the destination is filled with
//!   that element repeated `len / dtype.size()` times (the length is whole elements).
//! - Semaphores (16, ids `0..16`, all zero at the start of a replay): SIGNAL(s) increments
//!   `s` by one once the descriptor has completed, its writes visible. WAIT(s, n) holds the
//!   descriptor (and, queues being in order, everything behind it) until `s` has been
//!   signalled at least `n` times. A descriptor may both wait and signal. Each semaphore has
//!   one signalling queue, so "the n-th signal" is a fixed descriptor of that queue and the
//!   ordering is the same for every schedule ([`SemaphoreLedger`] enforces this).
//! - END_OF_INSTRUCTION marks the last descriptor of an ISA instruction; NOTIFY asks for a
//!   completion notification. Neither changes what the descriptor moves.

use std::num::NonZeroU32;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::addr::FabricAddr;
use crate::compute::ComputeOp;
use crate::dtype::Dtype;
use crate::error::Error;

/// Bytes in one encoded descriptor.
pub const DESCRIPTOR_BYTES: usize = 32;
/// The largest run one descriptor moves (64 KiB).
pub const MAX_DESCRIPTOR_LEN: u32 = 64 * 1024;
/// Semaphores available for cross-queue ordering.
pub const SEMAPHORES: u8 = 16;

const FLAG_END_OF_INSTRUCTION: u16 = 1 << 0;
const FLAG_NOTIFY: u16 = 1 << 1;
const FLAG_SEM_WAIT: u16 = 1 << 2;
const FLAG_SEM_SIGNAL: u16 = 1 << 3;
const FLAGS_KNOWN: u16 = FLAG_END_OF_INSTRUCTION | FLAG_NOTIFY | FLAG_SEM_WAIT | FLAG_SEM_SIGNAL;

/// The 32-byte little-endian wire form of a descriptor (layout in the module docs).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct RawDescriptor {
    src: U64,
    dst: U64,
    len: U32,
    dtype: u8,
    op: u8,
    flags: U16,
    wait_sem: u8,
    signal_sem: u8,
    src_dtype: u8,
    reserved: u8,
    wait_count: U32,
}

const _: () = assert!(size_of::<RawDescriptor>() == DESCRIPTOR_BYTES);

/// What a descriptor does to its destination (the `op` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DescOp {
    /// `dst = src`, code 0 (DGE_COMPUTE_OP NONE).
    Copy,
    /// `dst += src`, code 1 (DGE_COMPUTE_OP ADD).
    Add,
    /// `dst *= src`, code 2 (DGE_COMPUTE_OP MULTIPLY).
    Multiply,
    /// `dst = max(dst, src)`, code 3 (DGE_COMPUTE_OP MAX).
    Max,
    /// `dst = min(dst, src)`, code 4 (DGE_COMPUTE_OP MIN).
    Min,
    /// `dst = element repeated`, code 5 (the project's own; the element is in `src`).
    Fill,
}

impl DescOp {
    /// Every op, in code order.
    pub const ALL: [DescOp; 6] = [
        DescOp::Copy,
        DescOp::Add,
        DescOp::Multiply,
        DescOp::Max,
        DescOp::Min,
        DescOp::Fill,
    ];

    /// The `op` field code (0..=4 equal the DGE_COMPUTE_OP codes).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Decodes the `op` field.
    pub fn from_code(code: u8) -> Result<DescOp, Error> {
        DescOp::ALL.get(usize::from(code)).copied().ok_or_else(|| {
            bad(
                "op",
                code,
                "unknown op (COPY=0 ADD=1 MULTIPLY=2 MAX=3 MIN=4 FILL=5)",
            )
        })
    }

    /// Lower-case name: `copy`, `add`, `multiply`, `max`, `min`, `fill`.
    pub fn name(self) -> &'static str {
        match self {
            DescOp::Copy => "copy",
            DescOp::Add => "add",
            DescOp::Multiply => "multiply",
            DescOp::Max => "max",
            DescOp::Min => "min",
            DescOp::Fill => "fill",
        }
    }

    /// The compute op that writes the destination: `ComputeOp::None` for COPY, the
    /// reduction for ADD..MIN, `None` for FILL (which has no source operand).
    pub fn compute_op(self) -> Option<ComputeOp> {
        match self {
            DescOp::Copy => Some(ComputeOp::None),
            DescOp::Add => Some(ComputeOp::Add),
            DescOp::Multiply => Some(ComputeOp::Multiply),
            DescOp::Max => Some(ComputeOp::Max),
            DescOp::Min => Some(ComputeOp::Min),
            DescOp::Fill => None,
        }
    }

    /// Whether the op reads the destination back (a read-modify-write reduction).
    pub fn is_reduction(self) -> bool {
        matches!(
            self,
            DescOp::Add | DescOp::Multiply | DescOp::Max | DescOp::Min
        )
    }

    /// Whether the op reads `len` bytes at `src` (every op but FILL).
    pub fn reads_source(self) -> bool {
        self != DescOp::Fill
    }

    /// Whether the length must be a whole number of `dtype` elements (reductions and FILL).
    fn needs_whole_elements(self) -> bool {
        self != DescOp::Copy
    }
}

impl From<ComputeOp> for DescOp {
    fn from(op: ComputeOp) -> DescOp {
        match op {
            ComputeOp::None => DescOp::Copy,
            ComputeOp::Add => DescOp::Add,
            ComputeOp::Multiply => DescOp::Multiply,
            ComputeOp::Max => DescOp::Max,
            ComputeOp::Min => DescOp::Min,
        }
    }
}

impl std::fmt::Display for DescOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The flags that do not involve semaphores: END_OF_INSTRUCTION and NOTIFY. (The wire's
/// SEM_WAIT / SEM_SIGNAL bits are carried by [`Descriptor::wait`] / [`Descriptor::signal`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DescFlags(u16);

impl DescFlags {
    /// No flag set.
    pub const NONE: DescFlags = DescFlags(0);
    /// END_OF_INSTRUCTION (bit 0): the last descriptor of an ISA instruction.
    pub const END_OF_INSTRUCTION: DescFlags = DescFlags(FLAG_END_OF_INSTRUCTION);
    /// NOTIFY (bit 1): raise a completion notification when the descriptor completes.
    pub const NOTIFY: DescFlags = DescFlags(FLAG_NOTIFY);

    /// Whether every flag of `other` is set in `self`.
    pub fn contains(self, other: DescFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The wire bits.
    pub fn bits(self) -> u16 {
        self.0
    }
}

impl std::ops::BitOr for DescFlags {
    type Output = DescFlags;
    fn bitor(self, rhs: DescFlags) -> DescFlags {
        DescFlags(self.0 | rhs.0)
    }
}

/// A semaphore id, `0..SEMAPHORES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SemId(u8);

impl SemId {
    /// Checks `id < SEMAPHORES`.
    pub fn new(id: u8) -> Result<SemId, Error> {
        if id >= SEMAPHORES {
            return Err(bad("semaphore", id, "semaphore ids are 0..16"));
        }
        Ok(SemId(id))
    }

    /// The id as a number.
    pub fn get(self) -> u8 {
        self.0
    }

    /// The id as an index into a per-semaphore table of `SEMAPHORES` entries.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// WAIT(sem, count): do not start before `sem` has been signalled `count` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemWait {
    pub sem: SemId,
    pub count: NonZeroU32,
}

/// A validated descriptor: every field obeys the decode rules, so the engine may rely on
/// `1 <= len <= 64 KiB`, whole elements for reductions, FILL and casts, a cast's source
/// run of at most 64 KiB, and a FILL element that fits its dtype. (Whether the addresses lie on the fabric is the engine's check.)
///
/// 32 bytes, two to a cache line: the semaphores are kept as plain numbers (a WAIT count
/// of 0 and a SIGNAL of 0xff mean none) rather than as `Option`s, which would pad it to
/// 40. Every pass over a replay's queues reads these: generation, validation,
/// dealing and execution.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Descriptor {
    src: FabricAddr,
    dst: FabricAddr,
    len: u32,
    /// WAIT's count, 0 without a WAIT.
    wait_count: u32,
    dtype: Dtype,
    /// The source's element dtype: `dtype` unless the descriptor casts.
    src_dtype: Dtype,
    op: DescOp,
    flags: DescFlags,
    /// WAIT's semaphore, 0 without a WAIT.
    wait_sem: u8,
    /// The semaphore SIGNALled, [`NO_SIGNAL`] without one.
    signal: u8,
}

/// [`Descriptor`]'s `signal` without a SIGNAL (semaphore ids are below [`SEMAPHORES`]).
const NO_SIGNAL: u8 = u8::MAX;

const _: () = assert!(std::mem::size_of::<Descriptor>() == 32);

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor")
            .field("src", &self.src)
            .field("dst", &self.dst)
            .field("len", &self.len)
            .field("dtype", &self.dtype)
            .field("src_dtype", &self.src_dtype)
            .field("op", &self.op)
            .field("flags", &self.flags)
            .field("wait", &self.wait())
            .field("signal", &self.signal())
            .finish()
    }
}

fn bad(field: &'static str, value: impl Into<u64>, rule: impl Into<String>) -> Error {
    Error::BadDescriptor {
        field,
        value: value.into(),
        rule: rule.into(),
    }
}

impl Descriptor {
    /// A descriptor without flags or semaphores. For FILL, `src.0` is the element.
    #[inline]
    pub fn new(
        op: DescOp,
        src: FabricAddr,
        dst: FabricAddr,
        len: u32,
        dtype: Dtype,
    ) -> Result<Descriptor, Error> {
        Descriptor::cast(op, src, dtype, dst, len, dtype)
    }

    /// A descriptor reading `src_dtype` elements at `src` and writing `dtype` elements at
    /// `dst`, `len` bytes of them: a cast where the dtypes differ (module docs), else
    /// [`Descriptor::new`].
    #[inline]
    pub fn cast(
        op: DescOp,
        src: FabricAddr,
        src_dtype: Dtype,
        dst: FabricAddr,
        len: u32,
        dtype: Dtype,
    ) -> Result<Descriptor, Error> {
        Descriptor::checked_cast(op, src, src_dtype, dst, len, dtype)
            .ok_or_else(|| Descriptor::cast_refusal(op, src, src_dtype, len, dtype))
    }

    /// [`Descriptor::new`] without the reason: `None` where `new` fails. The DGE builds
    /// millions of these; an `Option` of a descriptor is a descriptor-sized value that
    /// goes straight into a queue's list, where the `Result` is built on the stack and
    /// copied (a store-forwarding stall per descriptor).
    #[inline]
    pub fn checked(
        op: DescOp,
        src: FabricAddr,
        dst: FabricAddr,
        len: u32,
        dtype: Dtype,
    ) -> Option<Descriptor> {
        Descriptor::checked_cast(op, src, dtype, dst, len, dtype)
    }

    /// [`Descriptor::cast`] without the reason (as [`Descriptor::checked`]).
    #[inline]
    pub fn checked_cast(
        op: DescOp,
        src: FabricAddr,
        src_dtype: Dtype,
        dst: FabricAddr,
        len: u32,
        dtype: Dtype,
    ) -> Option<Descriptor> {
        let size = dtype.size() as u32;
        let casts = src_dtype != dtype;
        let bad_len = len == 0 || len > MAX_DESCRIPTOR_LEN;
        let partial = (casts || op.needs_whole_elements()) && !len.is_multiple_of(size);
        // an 8-byte dtype holds any u64 (a shift by 64 would overflow)
        let wide_fill = op == DescOp::Fill && src.0.checked_shr(8 * size).unwrap_or(0) != 0;
        let bad_cast = casts
            && (op == DescOp::Fill
                || cast_source_len(len, src_dtype, dtype) > u64::from(MAX_DESCRIPTOR_LEN));
        if bad_len || partial || wide_fill || bad_cast {
            return None;
        }
        Some(Descriptor {
            src,
            dst,
            len,
            dtype,
            src_dtype,
            op,
            flags: DescFlags::NONE,
            wait_count: 0,
            wait_sem: 0,
            signal: NO_SIGNAL,
        })
    }

    /// The rule that arguments [`Descriptor::checked`] refused break (the first, in the
    /// order checked): the error [`Descriptor::new`] returns for them.
    #[cold]
    #[inline(never)]
    pub fn refusal(op: DescOp, src: FabricAddr, len: u32, dtype: Dtype) -> Error {
        Descriptor::cast_refusal(op, src, dtype, len, dtype)
    }

    /// The rule that arguments [`Descriptor::checked_cast`] refused break: the error
    /// [`Descriptor::cast`] returns for them.
    #[cold]
    #[inline(never)]
    pub fn cast_refusal(
        op: DescOp,
        src: FabricAddr,
        src_dtype: Dtype,
        len: u32,
        dtype: Dtype,
    ) -> Error {
        let size = dtype.size();
        let casts = src_dtype != dtype;
        if len == 0 || len > MAX_DESCRIPTOR_LEN {
            return bad("len", len, "length must be 1..=65536 bytes");
        }
        if (casts || op.needs_whole_elements()) && !len.is_multiple_of(size as u32) {
            let what = if casts { "a cast" } else { op.name() };
            let rule = format!("{what} needs whole {dtype} elements ({size} bytes each)");
            return bad("len", len, rule);
        }
        if casts && op == DescOp::Fill {
            let rule = "FILL reads no source, so it does not cast (src_dtype must be 0)";
            return bad("src_dtype", src_dtype.code(), rule);
        }
        if casts {
            let source = cast_source_len(len, src_dtype, dtype);
            let rule = format!(
                "a cast's source run of {source} bytes ({} {src_dtype} elements) is over 65536 bytes",
                len as usize / size
            );
            return bad("len", len, rule);
        }
        let rule = format!("the fill element must fit one {dtype} ({size} bytes)");
        bad("src", src.0, rule)
    }

    /// A FILL of `len` bytes at `dst` with `element` (little-endian, fits `dtype`).
    pub fn fill(
        dst: FabricAddr,
        len: u32,
        dtype: Dtype,
        element: u64,
    ) -> Result<Descriptor, Error> {
        Descriptor::new(DescOp::Fill, FabricAddr(element), dst, len, dtype)
    }

    /// The same descriptor with `flags`.
    pub fn with_flags(self, flags: DescFlags) -> Descriptor {
        Descriptor { flags, ..self }
    }

    /// The same descriptor at other addresses (a block's row: never a FILL, whose `src`
    /// is its element).
    #[inline(always)]
    pub(crate) fn at(self, src: FabricAddr, dst: FabricAddr) -> Descriptor {
        Descriptor { src, dst, ..self }
    }

    /// The same descriptor with a WAIT (replacing any earlier one).
    pub fn with_wait(self, wait: SemWait) -> Descriptor {
        Descriptor {
            wait_count: wait.count.get(),
            wait_sem: wait.sem.get(),
            ..self
        }
    }

    /// The same descriptor with a SIGNAL (replacing any earlier one).
    pub fn with_signal(self, sem: SemId) -> Descriptor {
        Descriptor {
            signal: sem.get(),
            ..self
        }
    }

    /// Source address (for FILL: the raw element, not an address).
    pub fn src(&self) -> FabricAddr {
        self.src
    }

    /// Destination address.
    pub fn dst(&self) -> FabricAddr {
        self.dst
    }

    /// Bytes moved, `1..=65536`.
    #[allow(clippy::len_without_is_empty)] // a descriptor is never empty: len >= 1
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Element dtype (of the destination, for a cast).
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The source's element dtype: [`Descriptor::dtype`] unless the descriptor casts.
    pub fn src_dtype(&self) -> Dtype {
        self.src_dtype
    }

    /// Whether the descriptor casts (its source and destination dtypes differ).
    #[inline(always)]
    pub fn is_cast(&self) -> bool {
        self.src_dtype != self.dtype
    }

    /// The bytes of the longer side, source or destination: `len` unless the descriptor
    /// casts to a narrower dtype. What the timing model charges.
    pub fn moved_len(&self) -> u32 {
        let (_, source) = self.source_range().unwrap_or((self.src, 0));
        // a source run is at most 64 KiB (checked_cast), so the cast is lossless
        self.len.max(source as u32)
    }

    /// The op.
    pub fn op(&self) -> DescOp {
        self.op
    }

    /// END_OF_INSTRUCTION / NOTIFY.
    pub fn flags(&self) -> DescFlags {
        self.flags
    }

    /// The WAIT, if any.
    pub fn wait(&self) -> Option<SemWait> {
        let count = NonZeroU32::new(self.wait_count)?;
        Some(SemWait {
            sem: SemId(self.wait_sem),
            count,
        })
    }

    /// The semaphore SIGNALled on completion, if any.
    pub fn signal(&self) -> Option<SemId> {
        (self.signal != NO_SIGNAL).then_some(SemId(self.signal))
    }

    /// Whether the descriptor WAITs for more SIGNALs than `signals` (per semaphore, the
    /// signals so far) hold.
    pub(crate) fn waits_beyond(&self, signals: &[u64; SEMAPHORES as usize]) -> bool {
        // SemId guarantees index < SEMAPHORES.
        self.wait()
            .is_some_and(|w| signals[w.sem.index()] < u64::from(w.count.get()))
    }

    /// Whether the descriptor WAITs or SIGNALs.
    #[inline(always)]
    pub fn synchronises(&self) -> bool {
        self.wait_count != 0 || self.signal != NO_SIGNAL
    }

    /// The source range `(src, bytes)` the descriptor reads (`len` bytes, or a cast's
    /// source run), or `None` for FILL.
    pub fn source_range(&self) -> Option<(FabricAddr, u64)> {
        let len = match self.is_cast() {
            true => cast_source_len(self.len, self.src_dtype, self.dtype),
            false => u64::from(self.len),
        };
        self.op.reads_source().then_some((self.src, len))
    }

    /// The destination range `(dst, len)` the descriptor writes.
    pub fn dest_range(&self) -> (FabricAddr, u64) {
        (self.dst, u64::from(self.len))
    }

    /// For FILL: writes the element repeated over `dst` (a trailing partial element gets
    /// the element's leading bytes). Other ops leave `dst` alone and return `false`.
    pub fn fill_into(&self, dst: &mut [u8]) -> bool {
        if self.op != DescOp::Fill {
            return false;
        }
        let element = self.src.0.to_le_bytes();
        let size = self.dtype.size();
        for chunk in dst.chunks_mut(size) {
            if let Some(bytes) = element.get(..chunk.len()) {
                chunk.copy_from_slice(bytes);
            }
        }
        true
    }

    /// The wire form.
    pub fn encode(&self) -> RawDescriptor {
        let (wait, signal) = (self.wait(), self.signal());
        let mut flags = self.flags.bits();
        if wait.is_some() {
            flags |= FLAG_SEM_WAIT;
        }
        if signal.is_some() {
            flags |= FLAG_SEM_SIGNAL;
        }
        RawDescriptor {
            src: U64::new(self.src.0),
            dst: U64::new(self.dst.0),
            len: U32::new(self.len),
            dtype: self.dtype.code(),
            op: self.op.code(),
            flags: U16::new(flags),
            wait_sem: wait.map_or(0, |w| w.sem.get()),
            signal_sem: signal.map_or(0, SemId::get),
            src_dtype: if self.is_cast() {
                self.src_dtype.code()
            } else {
                0
            },
            reserved: 0,
            wait_count: U32::new(wait.map_or(0, |w| w.count.get())),
        }
    }

    /// Decodes and validates a wire descriptor (every rule in the module docs).
    pub fn decode(raw: &RawDescriptor) -> Result<Descriptor, Error> {
        let op = DescOp::from_code(raw.op)?;
        let dtype = Dtype::from_code(raw.dtype)
            .map_err(|_| bad("dtype", raw.dtype, "unknown dtype code (see DTYPE_TABLE)"))?;
        let flags = raw.flags.get();
        if flags & !FLAGS_KNOWN != 0 {
            return Err(bad("flags", flags, "reserved flag bits 4..16 must be zero"));
        }
        if raw.reserved != 0 {
            return Err(bad("reserved", raw.reserved, "byte 27 must be zero"));
        }
        let d = Descriptor::cast(
            op,
            FabricAddr(raw.src.get()),
            decode_src_dtype(raw.src_dtype, dtype)?,
            FabricAddr(raw.dst.get()),
            raw.len.get(),
            dtype,
        )?;
        let d = d.with_flags(DescFlags(flags & (FLAG_END_OF_INSTRUCTION | FLAG_NOTIFY)));
        let d = match decode_wait(raw, flags & FLAG_SEM_WAIT != 0)? {
            Some(wait) => d.with_wait(wait),
            None => d,
        };
        Ok(match decode_signal(raw, flags & FLAG_SEM_SIGNAL != 0)? {
            Some(sem) => d.with_signal(sem),
            None => d,
        })
    }

    /// Decodes exactly [`DESCRIPTOR_BYTES`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Descriptor, Error> {
        let raw = RawDescriptor::ref_from_bytes(bytes).map_err(|_| {
            bad(
                "size",
                bytes.len() as u64,
                "an encoded descriptor is exactly 32 bytes",
            )
        })?;
        Descriptor::decode(raw)
    }
}

/// A cast's source bytes for `len` destination bytes (whole `dtype` elements).
fn cast_source_len(len: u32, src_dtype: Dtype, dtype: Dtype) -> u64 {
    crate::cast::source_len(u64::from(len), src_dtype, dtype)
}

/// The `src_dtype` byte: 0 is `dtype` (no cast); any other must be a dtype code that
/// differs from `dtype` (one encoding per descriptor).
fn decode_src_dtype(code: u8, dtype: Dtype) -> Result<Dtype, Error> {
    if code == 0 {
        return Ok(dtype);
    }
    Dtype::from_code(code)
        .ok()
        .filter(|&s| s != dtype)
        .ok_or_else(|| {
            let rule = "0 (no cast) or the code of a dtype other than `dtype` (see DTYPE_TABLE)";
            bad("src_dtype", code, rule)
        })
}

fn decode_wait(raw: &RawDescriptor, flagged: bool) -> Result<Option<SemWait>, Error> {
    let count = raw.wait_count.get();
    if !flagged {
        if raw.wait_sem != 0 {
            return Err(bad(
                "wait_sem",
                raw.wait_sem,
                "must be zero without SEM_WAIT",
            ));
        }
        if count != 0 {
            return Err(bad("wait_count", count, "must be zero without SEM_WAIT"));
        }
        return Ok(None);
    }
    let sem = SemId::new(raw.wait_sem)
        .map_err(|_| bad("wait_sem", raw.wait_sem, "semaphore ids are 0..16"))?;
    let count = NonZeroU32::new(count).ok_or_else(|| {
        bad(
            "wait_count",
            0u8,
            "SEM_WAIT needs a count >= 1 (a wait for 0 signals is no wait)",
        )
    })?;
    Ok(Some(SemWait { sem, count }))
}

fn decode_signal(raw: &RawDescriptor, flagged: bool) -> Result<Option<SemId>, Error> {
    if !flagged {
        if raw.signal_sem != 0 {
            return Err(bad(
                "signal_sem",
                raw.signal_sem,
                "must be zero without SEM_SIGNAL",
            ));
        }
        return Ok(None);
    }
    SemId::new(raw.signal_sem)
        .map(Some)
        .map_err(|_| bad("signal_sem", raw.signal_sem, "semaphore ids are 0..16"))
}

/// Checks a set of queues' semaphore use as descriptors stream past, queue by queue or
/// interleaved: every semaphore has one signalling queue, and (at the end) no WAIT asks
/// for more signals than its semaphore ever gets. Wait cycles need timing to find; the
/// [`crate::timing::QueueTimeline`] reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SemaphoreLedger {
    owner: [Option<usize>; SEMAPHORES as usize],
    signals: [u64; SEMAPHORES as usize],
    /// Per semaphore, the largest wait seen: (count, queue, descriptor index).
    max_wait: [Option<(u32, usize, u64)>; SEMAPHORES as usize],
}

impl SemaphoreLedger {
    /// An empty ledger (every semaphore at zero, no owner).
    pub fn new() -> SemaphoreLedger {
        SemaphoreLedger::default()
    }

    /// Whether nothing was recorded: no SIGNAL and no WAIT.
    pub fn is_empty(&self) -> bool {
        self.owner.iter().all(Option::is_none) && self.max_wait.iter().all(Option::is_none)
    }

    /// Records descriptor `index` of `queue`; rejects a second signalling queue.
    pub fn record(&mut self, queue: usize, index: u64, d: &Descriptor) -> Result<(), Error> {
        if let Some(w) = d.wait() {
            let slot = &mut self.max_wait[w.sem.index()];
            if slot.is_none_or(|(c, _, _)| w.count.get() > c) {
                *slot = Some((w.count.get(), queue, index));
            }
        }
        if let Some(s) = d.signal() {
            self.claim(s, queue, index)?;
            self.signals[s.index()] += 1;
        }
        Ok(())
    }

    /// Makes `queue` the signalling queue of `sem`, or fails if another queue is.
    fn claim(&mut self, sem: SemId, queue: usize, index: u64) -> Result<(), Error> {
        match self.owner[sem.index()] {
            Some(owner) if owner != queue => Err(Error::SemaphoreOwner {
                sem: sem.get(),
                queue,
                index,
                owner,
            }),
            _ => {
                self.owner[sem.index()] = Some(queue);
                Ok(())
            }
        }
    }

    /// Signals recorded so far on `sem`.
    pub fn signals(&self, sem: SemId) -> u64 {
        self.signals[sem.index()]
    }

    /// After the last descriptor: every WAIT's count is reachable.
    pub fn check_complete(&self) -> Result<(), Error> {
        for (sem, (wait, &signals)) in self.max_wait.iter().zip(&self.signals).enumerate() {
            if let Some((count, queue, index)) = *wait {
                if u64::from(count) > signals {
                    return Err(Error::SemaphoreNeverReached {
                        sem: sem as u8,
                        count,
                        queue,
                        index,
                        signals,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_util::{sem, wait};
    use proptest::prelude::*;

    fn copy(len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(0x1000),
            FabricAddr(0x2000),
            len,
            Dtype::U8,
        )
        .unwrap()
    }

    /// A valid encoded descriptor whose bytes the rejection tests corrupt.
    fn valid_bytes() -> [u8; 32] {
        let d = Descriptor::new(
            DescOp::Add,
            FabricAddr(0x1122_3344_5566_7788),
            FabricAddr(0x99aa_bbcc_ddee_ff00),
            64,
            Dtype::F32,
        )
        .unwrap()
        .with_flags(DescFlags::END_OF_INSTRUCTION)
        .with_wait(wait(3, 7))
        .with_signal(sem(5));
        let mut b = [0u8; 32];
        b.copy_from_slice(d.encode().as_bytes());
        b
    }

    fn reject(bytes: &[u8; 32]) -> (&'static str, u64, String) {
        match Descriptor::from_bytes(bytes).unwrap_err() {
            Error::BadDescriptor { field, value, rule } => (field, value, rule),
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn layout_is_pinned() {
        let b = valid_bytes();
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x99aa_bbcc_ddee_ff00u64.to_le_bytes());
        assert_eq!(&b[16..20], &64u32.to_le_bytes());
        assert_eq!(b[20], 0xa); // f32
        assert_eq!(b[21], 1); // ADD
        assert_eq!(&b[22..24], &[0b1101, 0]); // EOI | WAIT | SIGNAL
        assert_eq!((b[24], b[25]), (3, 5));
        assert_eq!(&b[26..28], &[0, 0]);
        assert_eq!(&b[28..32], &7u32.to_le_bytes());
        let d = Descriptor::from_bytes(&b).unwrap();
        assert_eq!(d.op(), DescOp::Add);
        assert_eq!(d.dtype(), Dtype::F32);
        assert_eq!(d.len(), 64);
        assert_eq!(d.wait(), Some(wait(3, 7)));
        assert_eq!(d.signal(), Some(sem(5)));
        assert!(d.flags().contains(DescFlags::END_OF_INSTRUCTION));
        assert!(!d.flags().contains(DescFlags::NOTIFY));
    }

    #[test]
    fn rejects_unknown_op() {
        for code in [6u8, 0x80, 0xff] {
            let mut b = valid_bytes();
            b[21] = code;
            let (field, value, _) = reject(&b);
            assert_eq!((field, value), ("op", u64::from(code)));
        }
    }

    #[test]
    fn rejects_unknown_dtype() {
        for code in [0u8, 1, 0xc, 0xff] {
            let mut b = valid_bytes();
            b[20] = code;
            let (field, value, _) = reject(&b);
            assert_eq!((field, value), ("dtype", u64::from(code)));
        }
    }

    #[test]
    fn rejects_reserved_flag_bits() {
        for bit in 4..16 {
            let mut b = valid_bytes();
            b[22..24].copy_from_slice(&(0b1101u16 | 1 << bit).to_le_bytes());
            let (field, value, rule) = reject(&b);
            assert_eq!((field, value), ("flags", 0b1101 | 1 << bit));
            assert!(rule.contains("reserved"), "{rule}");
        }
    }

    #[test]
    fn rejects_reserved_byte() {
        let mut b = valid_bytes();
        b[27] = 0x40;
        let (field, value, rule) = reject(&b);
        assert_eq!((field, value), ("reserved", 0x40));
        assert!(rule.contains("byte 27"), "{rule}");
    }

    /// An f32 -> bf16 cast ADD of 64 destination bytes (32 elements, 128 source bytes).
    fn cast_add() -> Descriptor {
        let (src, dst) = (FabricAddr(0x1000), FabricAddr(0x8000));
        Descriptor::cast(DescOp::Add, src, Dtype::F32, dst, 64, Dtype::Bf16).unwrap()
    }

    #[test]
    fn a_cast_carries_its_source_dtype_in_byte_26() {
        let d = cast_add();
        let raw = d.encode();
        let b = raw.as_bytes();
        assert_eq!((b[20], b[21], b[26], b[27]), (0x6, 1, 0xa, 0));
        assert_eq!(Descriptor::from_bytes(b).unwrap(), d);
        assert!(d.is_cast());
        assert_eq!((d.dtype(), d.src_dtype()), (Dtype::Bf16, Dtype::F32));
        assert_eq!(d.source_range(), Some((FabricAddr(0x1000), 128)));
        assert_eq!(d.dest_range(), (FabricAddr(0x8000), 64));
        assert_eq!(d.moved_len(), 128);
        // widening: the source is the shorter side
        let w = Descriptor::cast(
            DescOp::Copy,
            FabricAddr(0),
            Dtype::U8,
            FabricAddr(64),
            64,
            Dtype::F32,
        )
        .unwrap();
        assert_eq!(
            (w.source_range(), w.moved_len()),
            (Some((FabricAddr(0), 16)), 64)
        );
        // equal dtypes: no cast, byte 26 zero
        let plain = Descriptor::cast(
            DescOp::Copy,
            FabricAddr(0),
            Dtype::F32,
            FabricAddr(64),
            7,
            Dtype::F32,
        )
        .unwrap();
        assert!(!plain.is_cast());
        assert_eq!(plain.encode().as_bytes()[26], 0);
        assert_eq!(
            (plain.source_range(), plain.moved_len()),
            (Some((FabricAddr(0), 7)), 7)
        );
    }

    #[test]
    fn cast_rules() {
        let cast = |op, src_dtype, len, dtype| {
            Descriptor::cast(op, FabricAddr(0), src_dtype, FabricAddr(0), len, dtype)
        };
        let rule = |e: Error| match e {
            Error::BadDescriptor { field, value, rule } => (field, value, rule),
            e => panic!("{e}"),
        };
        // whole destination elements, even for COPY
        let (field, value, r) = rule(cast(DescOp::Copy, Dtype::U8, 6, Dtype::F32).unwrap_err());
        assert_eq!((field, value), ("len", 6));
        assert!(r.contains("a cast needs whole f32 elements"), "{r}");
        // the source run is at most 64 KiB too
        let (field, value, r) =
            rule(cast(DescOp::Copy, Dtype::F32, 32770, Dtype::U16).unwrap_err());
        assert_eq!((field, value), ("len", 32770));
        assert_eq!(
            r,
            "a cast's source run of 65540 bytes (16385 f32 elements) is over 65536 bytes"
        );
        assert!(cast(DescOp::Copy, Dtype::F32, 32768, Dtype::U16).is_ok());
        assert!(cast(DescOp::Copy, Dtype::F32, 32768, Dtype::U8).is_err());
        assert!(cast(DescOp::Copy, Dtype::F32, 16384, Dtype::U8).is_ok());
        assert!(cast(DescOp::Max, Dtype::U8, 65536, Dtype::F32).is_ok());
        // FILL never casts
        let (field, value, _) = rule(cast(DescOp::Fill, Dtype::F32, 4, Dtype::U16).unwrap_err());
        assert_eq!((field, value), ("src_dtype", 0xa));
    }

    #[test]
    fn rejects_bad_source_dtype_bytes() {
        for code in [0xcu8, 1, 0xff] {
            let mut b = [0u8; 32];
            b.copy_from_slice(cast_add().encode().as_bytes());
            b[26] = code;
            let (field, value, rule) = reject(&b);
            assert_eq!((field, value), ("src_dtype", u64::from(code)));
            assert!(rule.contains("0 (no cast)"), "{rule}");
        }
        // the destination's own code is not a second way to say "no cast"
        let mut b = valid_bytes();
        b[26] = 0xa;
        assert_eq!(reject(&b).0, "src_dtype");
        // a FILL with a source dtype
        let mut b = [0u8; 32];
        let fill = Descriptor::fill(FabricAddr(0x100), 8, Dtype::U16, 7).unwrap();
        b.copy_from_slice(fill.encode().as_bytes());
        b[26] = 0xa;
        assert_eq!(reject(&b).0, "src_dtype");
    }

    #[test]
    fn rejects_zero_and_oversized_lengths() {
        for len in [0u32, 65_540, u32::MAX] {
            let mut b = valid_bytes();
            b[16..20].copy_from_slice(&len.to_le_bytes());
            let (field, value, rule) = reject(&b);
            assert_eq!((field, value), ("len", u64::from(len)));
            assert!(rule.contains("1..=65536"), "{rule}");
        }
        assert_eq!(copy(65_536).len(), 65_536);
        assert_eq!(copy(1).len(), 1);
    }

    #[test]
    fn reductions_and_fill_need_whole_elements() {
        for op in [
            DescOp::Add,
            DescOp::Multiply,
            DescOp::Max,
            DescOp::Min,
            DescOp::Fill,
        ] {
            let e = Descriptor::new(op, FabricAddr(0), FabricAddr(0), 6, Dtype::F32).unwrap_err();
            let Error::BadDescriptor { field, value, rule } = e else {
                panic!("{e}")
            };
            assert_eq!((field, value), ("len", 6));
            assert!(rule.contains("f32") && rule.contains('4'), "{rule}");
            assert!(Descriptor::new(op, FabricAddr(0), FabricAddr(0), 6, Dtype::Bf16).is_ok());
        }
        // a copy moves any byte count, whatever its dtype
        assert!(Descriptor::new(DescOp::Copy, FabricAddr(0), FabricAddr(0), 7, Dtype::F32).is_ok());
    }

    #[test]
    fn rejects_fill_element_wider_than_dtype() {
        let e = Descriptor::fill(FabricAddr(0), 4, Dtype::U8, 0x100).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadDescriptor {
                    field: "src",
                    value: 0x100,
                    ..
                }
            ),
            "{e}"
        );
        assert!(Descriptor::fill(FabricAddr(0), 4, Dtype::U16, 0x1_0000).is_err());
        assert!(Descriptor::fill(FabricAddr(0), 4, Dtype::U32, 1 << 32).is_err());
        assert!(Descriptor::fill(FabricAddr(0), 4, Dtype::U32, 0xffff_ffff).is_ok());
    }

    #[test]
    fn rejects_bad_semaphore_ids() {
        for (byte, field) in [(24usize, "wait_sem"), (25, "signal_sem")] {
            for id in [16u8, 17, 0xff] {
                let mut b = valid_bytes();
                b[byte] = id;
                let (f, value, rule) = reject(&b);
                assert_eq!((f, value), (field, u64::from(id)));
                assert!(rule.contains("0..16"), "{rule}");
            }
        }
        assert!(SemId::new(16).is_err());
        assert_eq!(SemId::new(15).unwrap().get(), 15);
    }

    #[test]
    fn rejects_wait_count_zero() {
        let mut b = valid_bytes();
        b[28..32].copy_from_slice(&[0; 4]);
        let (field, value, _) = reject(&b);
        assert_eq!((field, value), ("wait_count", 0));
    }

    #[test]
    fn rejects_semaphore_fields_without_their_flag() {
        let plain = copy(8).encode();
        let mut b = [0u8; 32];
        for (byte, field) in [
            (24usize, "wait_sem"),
            (25, "signal_sem"),
            (29, "wait_count"),
        ] {
            b.copy_from_slice(plain.as_bytes());
            b[byte] = 1;
            let (f, _, rule) = reject(&b);
            assert_eq!(f, field);
            assert!(rule.contains("without"), "{rule}");
        }
    }

    #[test]
    fn rejects_wrong_size_slices() {
        assert!(Descriptor::from_bytes(&[0u8; 31]).is_err());
        assert!(Descriptor::from_bytes(&[0u8; 33]).is_err());
    }

    #[test]
    fn error_message_names_field_value_and_rule() {
        let mut b = valid_bytes();
        b[21] = 9;
        let msg = Descriptor::from_bytes(&b).unwrap_err().to_string();
        assert_eq!(
            msg,
            "descriptor field `op` = 9 (0x9) is invalid: unknown op (COPY=0 ADD=1 MULTIPLY=2 MAX=3 MIN=4 FILL=5)"
        );
    }

    #[test]
    fn compute_op_mapping() {
        for op in ComputeOp::ALL {
            let d = DescOp::from(op);
            assert_eq!(d.code(), op.code());
            assert_eq!(d.compute_op(), Some(op));
        }
        assert_eq!(DescOp::Fill.compute_op(), None);
        assert_eq!(DescOp::Fill.code(), 5);
        assert!(!DescOp::Fill.reads_source());
        assert!(!DescOp::Copy.is_reduction());
        assert!(DescOp::Min.is_reduction());
    }

    #[test]
    fn fill_writes_the_element_repeated() {
        let d = Descriptor::fill(FabricAddr(0x100), 8, Dtype::U16, 0xbeef).unwrap();
        let mut dst = [0u8; 8];
        assert!(d.fill_into(&mut dst));
        assert_eq!(dst, [0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe]);
        assert_eq!(d.source_range(), None);
        assert_eq!(d.dest_range(), (FabricAddr(0x100), 8));
        let mut untouched = [7u8; 4];
        assert!(!copy(4).fill_into(&mut untouched));
        assert_eq!(untouched, [7; 4]);
        assert_eq!(copy(4).source_range(), Some((FabricAddr(0x1000), 4)));
    }

    #[test]
    fn ledger_enforces_one_signalling_queue() {
        let mut l = SemaphoreLedger::new();
        let sig = copy(4).with_signal(sem(2));
        l.record(0, 0, &sig).unwrap();
        l.record(0, 1, &sig).unwrap();
        assert_eq!(l.signals(sem(2)), 2);
        let e = l.record(3, 9, &sig).unwrap_err();
        assert_eq!(
            e,
            Error::SemaphoreOwner {
                sem: 2,
                queue: 3,
                index: 9,
                owner: 0
            }
        );
    }

    #[test]
    fn ledger_rejects_unreachable_waits() {
        let mut l = SemaphoreLedger::new();
        l.record(1, 0, &copy(4).with_wait(wait(4, 2))).unwrap();
        l.record(0, 0, &copy(4).with_signal(sem(4))).unwrap();
        assert_eq!(
            l.check_complete().unwrap_err(),
            Error::SemaphoreNeverReached {
                sem: 4,
                count: 2,
                queue: 1,
                index: 0,
                signals: 1
            }
        );
        l.record(0, 1, &copy(4).with_signal(sem(4))).unwrap();
        assert_eq!(l.check_complete(), Ok(()));
    }

    /// Any valid descriptor (the generator the queue-file tests share).
    pub(crate) fn arb_descriptor() -> impl Strategy<Value = Descriptor> {
        let base = (
            0usize..6,
            0usize..9,
            1u32..=65_536,
            any::<u64>(),
            any::<u64>(),
        );
        let extra = (
            0u16..4,
            proptest::option::of((0u8..16, 1u32..1000)),
            proptest::option::of(0u8..16),
            proptest::option::of(0usize..9),
        );
        (base, extra).prop_map(|((op, dt, len, src, dst), (flags, w, s, cast))| {
            let op = DescOp::ALL[op];
            let dtype = Dtype::ALL[dt];
            // a cast from another dtype, for ops that read a source
            let src_dtype = match cast {
                Some(c) if op != DescOp::Fill && Dtype::ALL[c] != dtype => Dtype::ALL[c],
                _ => dtype,
            };
            let size = dtype.size() as u32;
            let wider = src_dtype.size().max(dtype.size()) as u32;
            let len = if op == DescOp::Copy && src_dtype == dtype {
                len
            } else {
                (len / wider).max(1) * size
            };
            let src = if op == DescOp::Fill {
                src >> (64 - 8 * size)
            } else {
                src
            };
            let (src, dst) = (FabricAddr(src), FabricAddr(dst));
            let mut d = Descriptor::cast(op, src, src_dtype, dst, len, dtype).unwrap();
            d = d.with_flags(DescFlags(flags));
            if let Some((id, count)) = w {
                d = d.with_wait(wait(id, count));
            }
            if let Some(id) = s {
                d = d.with_signal(sem(id));
            }
            d
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn encode_decode_round_trips(d in arb_descriptor()) {
            let raw = d.encode();
            prop_assert_eq!(Descriptor::decode(&raw).unwrap(), d);
            prop_assert_eq!(Descriptor::from_bytes(raw.as_bytes()).unwrap(), d);
        }

        /// A valid descriptor's bytes with one byte replaced: either rejected, or decoded
        /// to a descriptor that re-encodes to exactly those bytes (no field is lossy).
        #[test]
        fn accepted_bytes_re_encode_exactly(d in arb_descriptor(), i in 0usize..32, v in any::<u8>()) {
            let mut bytes = d.encode().as_bytes().to_vec();
            bytes[i] = v;
            if let Ok(d) = Descriptor::from_bytes(&bytes) {
                let raw = d.encode();
                prop_assert_eq!(raw.as_bytes(), &bytes[..]);
            }
        }

        /// `checked` accepts exactly what `new` accepts, with the same descriptor, and
        /// `refusal` is `new`'s error for the rest.
        #[test]
        fn checked_and_refusal_agree_with_new(
            op in 0usize..6, dt in 0usize..9, len in 0u32..70_000, src in any::<u64>(),
            sdt in 0usize..9,
        ) {
            let (op, dtype, src_dtype) = (DescOp::ALL[op], Dtype::ALL[dt], Dtype::ALL[sdt]);
            let src = FabricAddr(src >> (src % 64));
            let new = Descriptor::new(op, src, FabricAddr(8), len, dtype);
            let checked = Descriptor::checked(op, src, FabricAddr(8), len, dtype);
            prop_assert_eq!(checked.ok_or_else(|| Descriptor::refusal(op, src, len, dtype)), new);
            let cast = Descriptor::cast(op, src, src_dtype, FabricAddr(8), len, dtype);
            let checked = Descriptor::checked_cast(op, src, src_dtype, FabricAddr(8), len, dtype);
            let refusal = || Descriptor::cast_refusal(op, src, src_dtype, len, dtype);
            prop_assert_eq!(checked.ok_or_else(refusal), cast);
        }

        #[test]
        fn mutated_valid_bytes_decode_canonically(i in 0usize..32, v in any::<u8>()) {
            let mut b = valid_bytes();
            b[i] = v;
            if let Ok(d) = Descriptor::from_bytes(&b) {
                let raw = d.encode();
                prop_assert_eq!(raw.as_bytes(), &b[..]);
            }
        }
    }
}
