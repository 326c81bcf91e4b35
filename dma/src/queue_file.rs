//! The queue file: a set of up to 16 descriptor queues on disk, written and read as
//! streams ([`QueueFileWriter`], [`QueueFileReader`]), checked whole before anything runs
//! ([`verify`], [`VerifiedQueueFile`]).
//!
//! # Byte layout (little-endian)
//!
//! | bytes     | field              | rule                                              |
//! |-----------|--------------------|---------------------------------------------------|
//! | 0..8      | magic              | `b"DMAQUEUE"`                                     |
//! | 8..10     | version            | 1, 2 or 3 (below)                                 |
//! | 10        | generation         | NeuronCore version 2..=5 (sunda..maverick)        |
//! | 11        | queue count `Q`    | 1..=16                                            |
//! | 12..16    | descriptor size    | 32                                                |
//! | 16..24    | checksum           | FNV-1a 64 of the content (below)                  |
//! | 24..152   | 16 counts (u64)    | descriptors per queue; slots `Q..16` are zero     |
//! | 152..     | payload            | queue 0's descriptors, then queue 1's, ... (32 bytes each, [`crate::descriptor`] layout) |
//! | end - 8.. | origin (version 3) | a u64 its producer tags the file with (below)     |
//!
//! The file ends right after the last descriptor (version 3: after the origin): its length
//! is exactly `152 + 32 * sum(counts)` (`+ 8`). The checksum is FNV-1a 64 (offset basis
//! `0xcbf29ce484222325`, prime `0x100000001b3`, [`fnv1a64`]) over the payload, then the
//! origin, then the header without its checksum field (bytes `0..16` then `24..152`), so a
//! change to any byte is caught, header included. Payload first lets the writer hash
//! descriptors as they stream out and the header last.
//!
//! # Versions
//!
//! Version 2 added casts ([`crate::descriptor`], byte 26 `src_dtype`), which version 1
//! reserved as zero; version 3 added the origin, an 8-byte tag after the payload saying
//! what the queues were made for (`hostsim gen` writes a digest of the scenario's initial
//! tensors there, and `hostsim replay` refuses the file over other tensors). All three are
//! read; a version 1 file whose descriptor casts is refused, naming the descriptor and the
//! rule. The writer writes the lowest version that holds what it was given: version 3 with
//! an origin ([`QueueFileWriter::with_origin`]), else version 1 when no descriptor casts
//! (such a file is byte for byte what it was before casts existed, and older readers take
//! it), else version 2 (older readers refuse a newer file by its version).
//!
//! # Writing
//!
//! [`QueueFileWriter`] needs `Write + Seek`: it writes an all-zero placeholder header,
//! streams descriptors queue by queue, and [`QueueFileWriter::finish`] seeks back to patch
//! the header with the counts and the checksum. A file whose writer never finished has a
//! zero magic and is rejected.
//!
//! # Reading
//!
//! Nothing in a file is trusted: no allocation follows its counts, every descriptor is
//! decoded with every rule, and each failure names what is wrong and its byte offset.
//! [`QueueFileReader`] streams queue by queue in batches of at most [`MAX_BATCH`]
//! descriptors over any `Read`; the checksum, trailing bytes and semaphore counts are
//! checked at the end, so a replay must not execute what it streams before the end.
//! Hence the two-pass pattern: [`VerifiedQueueFile::open`] runs [`verify`] (a full streaming
//! pass that keeps no descriptors), then hands out per-queue batches by seeking, so queues
//! can run concurrently with bounded memory; [`VerifiedQueueFile::timeline`] times the
//! queues the same way, without executing them.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::descriptor::{Descriptor, SemaphoreLedger, DESCRIPTOR_BYTES};
use crate::error::Error;
use crate::fabric::BlockHash;
use crate::generation::Generation;
use crate::timing::{QueueTimeline, TimelineReport, TimingModel};

/// The file magic.
pub const MAGIC: [u8; 8] = *b"DMAQUEUE";
/// The newest format version: 3, which carries an origin (module docs, "Versions").
pub const VERSION: u16 = 3;
/// The version of a file whose descriptors may cast, without an origin.
pub const VERSION_WITH_CASTS: u16 = 2;
/// The version of a file in which no descriptor casts (module docs, "Versions").
pub const VERSION_WITHOUT_CASTS: u16 = 1;
/// Bytes of the origin after a version 3 file's payload.
const ORIGIN_BYTES: u64 = 8;
/// Queues in a file at most (the 16 DMA rings).
pub const MAX_QUEUES: usize = 16;
/// Header bytes (the payload starts here).
pub const HEADER_BYTES: u64 = 152;
/// Descriptors decoded per batch at most, whatever the caller asks for.
pub const MAX_BATCH: usize = 8192;

const DESC: u64 = DESCRIPTOR_BYTES as u64;
const CHECKSUM_FIELD: std::ops::Range<usize> = 16..24;
const COUNTS_AT: u64 = 24;
const WRITE_CHUNK: usize = 64 * 1024;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHeader {
    magic: [u8; 8],
    version: U16,
    generation: u8,
    queue_count: u8,
    descriptor_bytes: U32,
    checksum: U64,
    counts: [U64; MAX_QUEUES],
}

const _: () = assert!(size_of::<RawHeader>() == HEADER_BYTES as usize);

/// FNV-1a 64 of `bytes`: the file checksum's hash, for a producer that digests what its
/// queues were made for into an origin ([`QueueFileWriter::with_origin`]).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.update(bytes);
    h.0
}

/// FNV-1a 64, fed in pieces.
#[derive(Clone, Copy, Debug)]
struct Fnv1a64(u64);

impl Fnv1a64 {
    const fn new() -> Fnv1a64 {
        Fnv1a64(0xcbf2_9ce4_8422_2325)
    }

    fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    /// The file checksum: the payload hash continued over the header minus its checksum.
    fn finish_with_header(mut self, header: &[u8]) -> u64 {
        self.update(header.get(..CHECKSUM_FIELD.start).unwrap_or_default());
        self.update(header.get(CHECKSUM_FIELD.end..).unwrap_or_default());
        self.0
    }
}

fn io_error(offset: u64, e: std::io::Error) -> Error {
    Error::QueueFileIo {
        offset,
        message: e.to_string(),
    }
}

fn header_error(field: &'static str, offset: u64, value: u64, rule: &'static str) -> Error {
    Error::QueueFileHeader {
        field,
        offset,
        value,
        rule,
    }
}

/// The decoded, checked header of a queue file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueFileHeader {
    version: u16,
    generation: Generation,
    queues: usize,
    counts: [u64; MAX_QUEUES],
    checksum: u64,
}

impl QueueFileHeader {
    /// The format version, 1, 2 or 3.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Whether an origin follows the payload (version 3).
    fn has_origin(&self) -> bool {
        self.version >= VERSION
    }

    /// Whether the file's descriptors may cast (version 2 or 3).
    fn casts_allowed(&self) -> bool {
        self.version > VERSION_WITHOUT_CASTS
    }

    /// The generation the queues were made for.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Queues in the file, 1..=16.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// Descriptors per queue (`queues()` entries).
    pub fn counts(&self) -> &[u64] {
        self.counts.get(..self.queues).unwrap_or_default()
    }

    /// The stored checksum.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Descriptors in all queues.
    pub fn total_descriptors(&self) -> u64 {
        // parse_header proved the sum fits (the file size does not overflow).
        self.counts.iter().sum()
    }

    /// Byte offset of queue `queue`'s first descriptor (`queue <= queues()`).
    fn queue_offset(&self, queue: usize) -> u64 {
        let before: u64 = self.counts.iter().take(queue).sum();
        HEADER_BYTES + before * DESC
    }

    fn parse(bytes: &[u8; HEADER_BYTES as usize]) -> Result<QueueFileHeader, Error> {
        // The array is exactly the header's size, so the cast succeeds.
        let raw = RawHeader::ref_from_bytes(bytes)
            .map_err(|_| header_error("size", 0, HEADER_BYTES, "the header is 152 bytes"))?;
        check_format(raw)?;
        let code = raw.generation;
        let generation = Generation::ALL
            .into_iter()
            .find(|g| g.version() == code)
            .ok_or_else(|| header_error("generation", 10, code.into(), "must be 2..=5 (v2..v5)"))?;
        let queues = usize::from(raw.queue_count);
        if !(1..=MAX_QUEUES).contains(&queues) {
            let rule = "must be 1..=16";
            return Err(header_error("queue_count", 11, queues as u64, rule));
        }
        Ok(QueueFileHeader {
            version: raw.version.get(),
            generation,
            queues,
            counts: parse_counts(raw, queues)?,
            checksum: raw.checksum.get(),
        })
    }
}

/// The magic, the version and the descriptor size.
fn check_format(raw: &RawHeader) -> Result<(), Error> {
    if raw.magic != MAGIC {
        let value = u64::from_le_bytes(raw.magic);
        return Err(header_error("magic", 0, value, "must be \"DMAQUEUE\""));
    }
    let version = raw.version.get();
    if !(VERSION_WITHOUT_CASTS..=VERSION).contains(&version) {
        let rule = "versions 1, 2 and 3 are known";
        return Err(header_error("version", 8, version.into(), rule));
    }
    let size = raw.descriptor_bytes.get();
    if u64::from(size) != DESC {
        return Err(header_error(
            "descriptor_bytes",
            12,
            size.into(),
            "must be 32",
        ));
    }
    Ok(())
}

/// The counts, checked: unused slots zero, and `152 + 32 * sum` fits in 64 bits.
fn parse_counts(raw: &RawHeader, queues: usize) -> Result<[u64; MAX_QUEUES], Error> {
    let mut counts = [0u64; MAX_QUEUES];
    let mut file_bytes = HEADER_BYTES;
    for (slot, (count, raw_count)) in counts.iter_mut().zip(&raw.counts).enumerate() {
        *count = raw_count.get();
        let at = COUNTS_AT + 8 * slot as u64;
        if slot >= queues && *count != 0 {
            return Err(header_error(
                "count",
                at,
                *count,
                "slots past the queue count must be zero",
            ));
        }
        file_bytes = count
            .checked_mul(DESC)
            .and_then(|b| b.checked_add(file_bytes))
            .ok_or_else(|| {
                header_error(
                    "count",
                    at,
                    *count,
                    "the counts overflow a 64-bit file size",
                )
            })?;
    }
    Ok(counts)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
    let mut got = 0;
    while let Some(rest) = buf.get_mut(got..).filter(|b| !b.is_empty()) {
        match r.read(rest) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(offset + got as u64, e)),
        }
    }
    Ok(got)
}

/// Reads and checks the header; also returns its raw bytes for the checksum.
fn read_header<R: Read>(r: &mut R) -> Result<(QueueFileHeader, [u8; 152]), Error> {
    let mut bytes = [0u8; HEADER_BYTES as usize];
    let got = read_full(r, &mut bytes, 0)?;
    if got < bytes.len() {
        return Err(Error::QueueFileTruncated {
            offset: got as u64,
            needed: HEADER_BYTES,
            what: "the header".to_string(),
        });
    }
    Ok((QueueFileHeader::parse(&bytes)?, bytes))
}

/// Where a batch starts in the file.
#[derive(Clone, Copy, Debug)]
struct BatchAt {
    queue: usize,
    index: u64,
    offset: u64,
}

/// The one bounded raw buffer both readers decode through.
#[derive(Debug, Default)]
struct BatchBuffer {
    raw: Vec<u8>,
    max_buffered: usize,
    /// Whether a descriptor may cast (the file's version, [`QueueFileHeader`]).
    casts_allowed: bool,
}

impl BatchBuffer {
    /// A buffer for a file with `header`.
    fn new(header: &QueueFileHeader) -> BatchBuffer {
        BatchBuffer {
            casts_allowed: header.casts_allowed(),
            ..BatchBuffer::default()
        }
    }
}

/// Decodes one descriptor of a file: every rule of [`Descriptor::decode`], and no cast in
/// a version 1 file.
fn decode_descriptor(chunk: &[u8], casts_allowed: bool) -> Result<Descriptor, Error> {
    let d = Descriptor::from_bytes(chunk)?;
    if d.is_cast() && !casts_allowed {
        return Err(Error::BadDescriptor {
            field: "src_dtype",
            value: d.src_dtype().code().into(),
            rule: "a version 1 queue file has no casts (byte 26 is reserved there; casts need version 2)".into(),
        });
    }
    Ok(d)
}

impl BatchBuffer {
    /// Reads `n <= MAX_BATCH` descriptors at `at`, decodes them into `out` (cleared) and
    /// returns their raw bytes.
    fn read<R: Read>(
        &mut self,
        r: &mut R,
        n: usize,
        at: BatchAt,
        out: &mut Vec<Descriptor>,
    ) -> Result<&[u8], Error> {
        out.clear();
        self.fill(r, n, at)?;
        self.decode(0, n, at, out)?;
        Ok(&self.raw)
    }

    /// Reads the raw bytes of `n` descriptors at `at` (nothing decoded).
    fn fill<R: Read>(&mut self, r: &mut R, n: usize, at: BatchAt) -> Result<(), Error> {
        self.raw.resize(n * DESCRIPTOR_BYTES, 0);
        let got = read_full(r, &mut self.raw, at.offset)?;
        if got < self.raw.len() {
            let whole = (got / DESCRIPTOR_BYTES) as u64;
            return Err(Error::QueueFileTruncated {
                offset: at.offset + got as u64,
                needed: at.offset + (whole + 1) * DESC,
                what: format!("queue {} descriptor {}", at.queue, at.index + whole),
            });
        }
        Ok(())
    }

    /// Decodes `n` raw descriptors from the `skip`-th on, the first of them at `at`, onto
    /// `out`.
    fn decode(
        &mut self,
        skip: usize,
        n: usize,
        at: BatchAt,
        out: &mut Vec<Descriptor>,
    ) -> Result<(), Error> {
        self.max_buffered = self.max_buffered.max(n);
        let raw = self
            .raw
            .get(skip * DESCRIPTOR_BYTES..(skip + n) * DESCRIPTOR_BYTES)
            .unwrap_or_default();
        for (i, chunk) in raw.chunks_exact(DESCRIPTOR_BYTES).enumerate() {
            let d = decode_descriptor(chunk, self.casts_allowed).map_err(|e| {
                Error::QueueFileDescriptor {
                    queue: at.queue,
                    index: at.index + i as u64,
                    offset: at.offset + i as u64 * DESC,
                    source: Box::new(e),
                }
            })?;
            out.push(d);
        }
        Ok(())
    }
}

/// Descriptors per chunk of the digests a [`VerifiedQueueFile`] records while it verifies
/// (32 KiB of file; a queue's last chunk may be shorter).
pub const DIGEST_CHUNK: usize = 1024;
const CHUNK: u64 = DIGEST_CHUNK as u64;

/// Per queue, one digest ([`BlockHash`]) of each [`DIGEST_CHUNK`] descriptors, recorded
/// from the raw bytes as a reader streams the queues in file order.
#[derive(Clone, Debug)]
struct ChunkDigests {
    queues: Vec<Vec<u64>>,
    /// The chunk being hashed: its queue, its hash so far and its descriptors so far.
    queue: usize,
    current: BlockHash,
    in_chunk: usize,
}

impl ChunkDigests {
    fn new(queues: usize) -> ChunkDigests {
        ChunkDigests {
            queues: vec![Vec::new(); queues],
            queue: 0,
            current: BlockHash::new(),
            in_chunk: 0,
        }
    }

    /// Hashes the next descriptors (raw, whole) of `queue`.
    fn record(&mut self, queue: usize, raw: &[u8]) {
        if queue != self.queue {
            self.close_chunk();
            self.queue = queue;
        }
        let mut rest = raw;
        while !rest.is_empty() {
            let room = (DIGEST_CHUNK - self.in_chunk) * DESCRIPTOR_BYTES;
            let (piece, tail) = rest.split_at(room.min(rest.len()));
            self.current.update(piece);
            self.in_chunk += piece.len() / DESCRIPTOR_BYTES;
            if self.in_chunk == DIGEST_CHUNK {
                self.close_chunk();
            }
            rest = tail;
        }
    }

    /// Ends the chunk being hashed (if it has any descriptor).
    fn close_chunk(&mut self) {
        if self.in_chunk > 0 {
            if let Some(q) = self.queues.get_mut(self.queue) {
                q.push(self.current.finish());
            }
        }
        self.current = BlockHash::new();
        self.in_chunk = 0;
    }

    /// Checks chunk `chunk` of `queue` against its raw bytes now (read at `offset`).
    fn check(&self, queue: usize, chunk: u64, offset: u64, raw: &[u8]) -> Result<(), Error> {
        let mut now = BlockHash::new();
        now.update(raw);
        let recorded = self
            .queues
            .get(queue)
            .and_then(|q| q.get(usize::try_from(chunk).ok()?));
        if recorded == Some(&now.finish()) {
            return Ok(());
        }
        Err(Error::QueueFileChanged {
            queue,
            chunk,
            first: chunk * CHUNK,
            offset,
        })
    }
}

/// Counters of a reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Descriptors decoded so far.
    pub descriptors: u64,
    /// Batches handed out so far.
    pub batches: u64,
    /// The most descriptors ever held in the reader's buffer at once (<= [`MAX_BATCH`]).
    pub max_buffered: usize,
}

/// What a complete, verified pass over a file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueFileSummary {
    pub header: QueueFileHeader,
    /// Descriptors in the file.
    pub descriptors: u64,
    /// Bytes the descriptors move (the sum of their lengths).
    pub bytes: u64,
    /// The origin a version 3 file carries (module docs, "Versions").
    pub origin: Option<u64>,
}

/// A streaming reader over any `Read`: the queues in file order, in bounded batches.
#[derive(Debug)]
pub struct QueueFileReader<R> {
    r: R,
    header: QueueFileHeader,
    raw_header: [u8; 152],
    at: BatchAt,
    hasher: Fnv1a64,
    ledger: SemaphoreLedger,
    buffer: BatchBuffer,
    stats: ReaderStats,
    bytes: u64,
    done: bool,
    failed: Option<Error>,
    /// The origin, once the end of a version 3 file is read.
    origin: Option<u64>,
    /// Recorded only for a [`VerifiedQueueFile`].
    digests: Option<ChunkDigests>,
}

impl<R: Read> QueueFileReader<R> {
    /// Reads and checks the header.
    pub fn new(mut r: R) -> Result<QueueFileReader<R>, Error> {
        let (header, raw_header) = read_header(&mut r)?;
        Ok(QueueFileReader {
            r,
            buffer: BatchBuffer::new(&header),
            header,
            raw_header,
            at: BatchAt {
                queue: 0,
                index: 0,
                offset: HEADER_BYTES,
            },
            hasher: Fnv1a64::new(),
            ledger: SemaphoreLedger::new(),
            stats: ReaderStats::default(),
            bytes: 0,
            done: false,
            failed: None,
            origin: None,
            digests: None,
        })
    }

    /// The checked header.
    pub fn header(&self) -> &QueueFileHeader {
        &self.header
    }

    /// Counters so far.
    pub fn stats(&self) -> ReaderStats {
        ReaderStats {
            max_buffered: self.buffer.max_buffered,
            ..self.stats
        }
    }

    /// Fills `out` (cleared first) with the next at most `max` (clamped to
    /// `1..=MAX_BATCH`) descriptors of one queue and returns that queue, or `None` once
    /// the whole file has been read and its end, checksum and semaphores checked. After
    /// an error every call returns the same error.
    pub fn next_batch(
        &mut self,
        max: usize,
        out: &mut Vec<Descriptor>,
    ) -> Result<Option<usize>, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.step(max, out);
        if let Err(e) = &result {
            out.clear();
            self.failed = Some(e.clone());
        }
        result
    }

    fn step(&mut self, max: usize, out: &mut Vec<Descriptor>) -> Result<Option<usize>, Error> {
        out.clear();
        let remaining = loop {
            match self.header.counts().get(self.at.queue) {
                Some(&count) if self.at.index < count => break count - self.at.index,
                Some(_) => {
                    self.at.queue += 1;
                    self.at.index = 0;
                }
                None => {
                    if !self.done {
                        self.check_end()?;
                        self.done = true;
                    }
                    return Ok(None);
                }
            }
        };
        // At most MAX_BATCH, so the cast back to usize is lossless.
        let n = (max.clamp(1, MAX_BATCH) as u64).min(remaining);
        let raw = self.buffer.read(&mut self.r, n as usize, self.at, out)?;
        self.hasher.update(raw);
        if let Some(digests) = &mut self.digests {
            digests.record(self.at.queue, raw);
        }
        for (i, d) in out.iter().enumerate() {
            let index = self.at.index + i as u64;
            self.ledger.record(self.at.queue, index, d)?;
            self.bytes += u64::from(d.len());
        }
        self.at.index += n;
        self.at.offset += n * DESC;
        self.stats.descriptors += n;
        self.stats.batches += 1;
        Ok(Some(self.at.queue))
    }

    /// The end of the file: its origin (version 3), no trailing bytes, the checksum, every
    /// WAIT reachable.
    fn check_end(&mut self) -> Result<(), Error> {
        if self.header.has_origin() {
            let mut origin = [0u8; ORIGIN_BYTES as usize];
            let got = read_full(&mut self.r, &mut origin, self.at.offset)?;
            if got < origin.len() {
                return Err(Error::QueueFileTruncated {
                    offset: self.at.offset + got as u64,
                    needed: self.at.offset + ORIGIN_BYTES,
                    what: "the origin (version 3)".to_string(),
                });
            }
            self.hasher.update(&origin);
            self.origin = Some(u64::from_le_bytes(origin));
            self.at.offset += ORIGIN_BYTES;
        }
        let mut probe = [0u8; 1];
        if read_full(&mut self.r, &mut probe, self.at.offset)? != 0 {
            return Err(Error::QueueFileTrailing {
                offset: self.at.offset,
            });
        }
        let computed = self.hasher.finish_with_header(&self.raw_header);
        if computed != self.header.checksum {
            return Err(Error::QueueFileChecksum {
                stored: self.header.checksum,
                computed,
            });
        }
        self.ledger.check_complete()
    }

    /// The summary of a reader that has returned `None` (the whole file checked).
    fn summary(&self) -> QueueFileSummary {
        QueueFileSummary {
            header: self.header.clone(),
            descriptors: self.stats.descriptors,
            bytes: self.bytes,
            origin: self.origin,
        }
    }
}

/// Streams a whole file, checking its structure, every descriptor, the trailing bytes, the
/// checksum and the semaphores, holding at most [`MAX_BATCH`] descriptors.
pub fn verify<R: Read>(r: R) -> Result<QueueFileSummary, Error> {
    let mut reader = QueueFileReader::new(r)?;
    drain(&mut reader)?;
    Ok(reader.summary())
}

/// Reads a whole file through `reader`.
fn drain<R: Read>(reader: &mut QueueFileReader<R>) -> Result<(), Error> {
    let mut out = Vec::with_capacity(MAX_BATCH);
    while reader.next_batch(MAX_BATCH, &mut out)?.is_some() {}
    Ok(())
}

/// [`verify`], recording the chunk digests.
fn verify_recording<R: Read>(r: R) -> Result<(QueueFileSummary, ChunkDigests), Error> {
    let mut reader = QueueFileReader::new(r)?;
    reader.digests = Some(ChunkDigests::new(reader.header.queues()));
    drain(&mut reader)?;
    let mut digests = reader
        .digests
        .take()
        .unwrap_or_else(|| ChunkDigests::new(0));
    digests.close_chunk();
    Ok((reader.summary(), digests))
}

/// A file that passed [`verify`], read back queue by queue in any interleaving (by
/// seeking), for execution.
///
/// # What a later read is checked against
///
/// While it verifies, [`VerifiedQueueFile::open`] records a 64-bit digest of every
/// [`DIGEST_CHUNK`] descriptors of each queue (8 bytes per 32 KiB of file). Every later
/// [`VerifiedQueueFile::read_queue`] reads the whole chunks its descriptors lie in and
/// compares each with its digest before it decodes or hands out anything: a chunk that
/// changed since verification fails with [`Error::QueueFileChanged`] (naming the queue,
/// the chunk and its byte offset) and none of its descriptors is returned. So whatever
/// reads the file after `open` (the engine's validation pass, then its execution pass)
/// sees the descriptors verification saw, or an error.
///
/// The digest is a word-wise multiply-xor hash, not a cryptographic one: any change to a
/// single 8-byte word of a chunk is always caught, other changes unless they happen to
/// collide in 64 bits. It guards against a file rewritten or truncated while a replay
/// holds it (by another process, a crash, a bug), not against an adversary who crafts a
/// collision; keep files an adversary can write out of reach of the replay.
#[derive(Debug)]
pub struct VerifiedQueueFile<R> {
    r: R,
    start: u64,
    summary: QueueFileSummary,
    digests: ChunkDigests,
    cursors: [u64; MAX_QUEUES],
    buffer: BatchBuffer,
}

impl<R: Read + Seek> VerifiedQueueFile<R> {
    /// Verifies the file from the current position, then keeps it open for reading.
    pub fn open(mut r: R) -> Result<VerifiedQueueFile<R>, Error> {
        let start = r.stream_position().map_err(|e| io_error(0, e))?;
        let (summary, digests) = verify_recording(&mut r)?;
        Ok(VerifiedQueueFile {
            r,
            start,
            buffer: BatchBuffer::new(&summary.header),
            summary,
            digests,
            cursors: [0; MAX_QUEUES],
        })
    }

    /// The verified header.
    pub fn header(&self) -> &QueueFileHeader {
        &self.summary.header
    }

    /// What verification found.
    pub fn summary(&self) -> &QueueFileSummary {
        &self.summary
    }

    /// The most descriptors the per-queue reads have decoded at once (<= [`MAX_BATCH`];
    /// the raw buffer beneath holds at most two chunks more).
    pub fn max_buffered(&self) -> usize {
        self.buffer.max_buffered
    }

    /// Fills `out` (cleared first) with queue `queue`'s next at most `max` (clamped to
    /// `1..=MAX_BATCH`) descriptors; returns how many (0 once the queue is done). The
    /// chunks they lie in are checked against their digests first (see the type docs);
    /// on an error `out` stays empty and the queue's cursor does not move.
    pub fn read_queue(
        &mut self,
        queue: usize,
        max: usize,
        out: &mut Vec<Descriptor>,
    ) -> Result<usize, Error> {
        out.clear();
        let header = &self.summary.header;
        let (Some(&count), Some(cursor)) =
            (header.counts().get(queue), self.cursors.get_mut(queue))
        else {
            return Err(Error::NoSuchQueue {
                queue,
                queues: header.queues,
            });
        };
        let n = (max.clamp(1, MAX_BATCH) as u64).min(count - *cursor);
        if n == 0 {
            return Ok(0);
        }
        // The whole chunks holding descriptors `cursor..cursor + n`.
        let (first, lo) = (*cursor, *cursor - *cursor % CHUNK);
        let hi = (first + n).div_ceil(CHUNK).saturating_mul(CHUNK).min(count);
        let base = header.queue_offset(queue);
        let at = |index: u64| BatchAt {
            queue,
            index,
            offset: base + index * DESC,
        };
        // verify proved start + file length fits in 64 bits.
        self.r
            .seek(SeekFrom::Start(self.start + at(lo).offset))
            .map_err(|e| io_error(at(lo).offset, e))?;
        // At most MAX_BATCH + 2 * DIGEST_CHUNK descriptors: the cast is lossless.
        self.buffer.fill(&mut self.r, (hi - lo) as usize, at(lo))?;
        let chunks = self.buffer.raw.chunks(DIGEST_CHUNK * DESCRIPTOR_BYTES);
        for (k, raw) in (lo / CHUNK..).zip(chunks) {
            self.digests.check(queue, k, at(k * CHUNK).offset, raw)?;
        }
        self.buffer
            .decode((first - lo) as usize, n as usize, at(first), out)
            .inspect_err(|_| out.clear())?;
        *cursor += n;
        Ok(n as usize)
    }

    /// Starts every queue over from its first descriptor.
    pub fn rewind(&mut self) {
        self.cursors = [0; MAX_QUEUES];
    }

    /// The timing of the file's queues on `model`, streaming round-robin over the queues
    /// and never reading a queue that is blocked on a semaphore (so at most one batch per
    /// queue is pending). Rewinds before and after.
    pub fn timeline(&mut self, model: TimingModel, spans: bool) -> Result<TimelineReport, Error> {
        self.rewind();
        let queues = self.header().queues();
        let mut timeline = QueueTimeline::new(model, queues, spans)?;
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut progressed = true;
        while progressed {
            progressed = false;
            for q in 0..queues {
                if timeline.is_blocked(q) {
                    continue;
                }
                if self.read_queue(q, MAX_BATCH, &mut batch)? == 0 {
                    timeline.close(q)?;
                    continue;
                }
                progressed = true;
                for d in &batch {
                    timeline.push(q, d)?;
                }
            }
        }
        self.rewind();
        timeline.finish()
    }

    /// The underlying reader.
    pub fn into_inner(self) -> R {
        self.r
    }
}

impl VerifiedQueueFile<File> {
    /// Opens and verifies the file at `path`.
    pub fn open_path(path: &Path) -> Result<VerifiedQueueFile<File>, Error> {
        let file = File::open(path).map_err(|e| Error::QueueFileOpen {
            message: e.to_string(),
        })?;
        VerifiedQueueFile::open(file)
    }
}

/// A streaming writer: descriptors go out queue by queue as they come; `finish` patches
/// the header (see the module docs).
#[derive(Debug)]
pub struct QueueFileWriter<W: Write + Seek> {
    w: W,
    start: u64,
    generation: Generation,
    queues: usize,
    counts: [u64; MAX_QUEUES],
    current: usize,
    hasher: Fnv1a64,
    ledger: SemaphoreLedger,
    buf: Vec<u8>,
    flushed: u64,
    /// Whether some descriptor casts (the file is then version 2 at least).
    casts: bool,
    /// The origin, if the producer gave one (the file is then version 3).
    origin: Option<u64>,
}

impl<W: Write + Seek> QueueFileWriter<W> {
    /// Starts a file of `queues` (1..=16) queues at the writer's current position.
    pub fn new(
        mut w: W,
        generation: Generation,
        queues: usize,
    ) -> Result<QueueFileWriter<W>, Error> {
        if !(1..=MAX_QUEUES).contains(&queues) {
            return Err(Error::QueueCount {
                count: queues,
                max: MAX_QUEUES,
            });
        }
        let start = w.stream_position().map_err(|e| io_error(0, e))?;
        w.write_all(&[0u8; HEADER_BYTES as usize])
            .map_err(|e| io_error(0, e))?;
        Ok(QueueFileWriter {
            w,
            start,
            generation,
            queues,
            counts: [0; MAX_QUEUES],
            current: 0,
            hasher: Fnv1a64::new(),
            ledger: SemaphoreLedger::new(),
            buf: Vec::with_capacity(WRITE_CHUNK),
            flushed: 0,
            casts: false,
            origin: None,
        })
    }

    /// Tags the file with `origin`, what its queues were made for (a version 3 file; see
    /// the module docs).
    pub fn with_origin(mut self, origin: u64) -> QueueFileWriter<W> {
        self.origin = Some(origin);
        self
    }

    /// Appends `d` to queue `queue`; queues come in order (0 first, any may be empty) and
    /// each semaphore is signalled from one queue only.
    pub fn push(&mut self, queue: usize, d: &Descriptor) -> Result<(), Error> {
        let Some(count) = self.counts.get_mut(queue).filter(|_| queue < self.queues) else {
            return Err(Error::NoSuchQueue {
                queue,
                queues: self.queues,
            });
        };
        if queue < self.current {
            return Err(Error::QueueOrder {
                queue,
                current: self.current,
            });
        }
        self.ledger.record(queue, *count, d)?;
        *count += 1;
        self.current = queue;
        self.casts |= d.is_cast();
        self.buf.extend_from_slice(d.encode().as_bytes());
        if self.buf.len() >= WRITE_CHUNK {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> Result<(), Error> {
        let offset = HEADER_BYTES + self.flushed;
        self.hasher.update(&self.buf);
        self.w
            .write_all(&self.buf)
            .map_err(|e| io_error(offset, e))?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the rest, patches the header, leaves the writer at the end of the file and
    /// returns it. Fails (leaving the zero placeholder header) if a WAIT can never be met.
    pub fn finish(mut self) -> Result<W, Error> {
        if let Some(origin) = self.origin {
            self.buf.extend_from_slice(&origin.to_le_bytes());
        }
        self.flush_buf()?;
        self.ledger.check_complete()?;
        let version = match (self.origin, self.casts) {
            (Some(_), _) => VERSION,
            (None, true) => VERSION_WITH_CASTS,
            (None, false) => VERSION_WITHOUT_CASTS,
        };
        let mut header = RawHeader {
            magic: MAGIC,
            version: U16::new(version),
            generation: self.generation.version(),
            queue_count: self.queues as u8,
            descriptor_bytes: U32::new(DESCRIPTOR_BYTES as u32),
            checksum: U64::new(0),
            counts: self.counts.map(U64::new),
        };
        header.checksum = U64::new(self.hasher.finish_with_header(header.as_bytes()));
        let end = self.start + HEADER_BYTES + self.flushed;
        let io = |e| io_error(0, e);
        self.w.seek(SeekFrom::Start(self.start)).map_err(io)?;
        self.w.write_all(header.as_bytes()).map_err(io)?;
        self.w.seek(SeekFrom::Start(end)).map_err(io)?;
        self.w.flush().map_err(io)?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::tests::arb_descriptor;
    use crate::descriptor::{DescFlags, DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use crate::test_util::copy;
    use proptest::prelude::*;
    use std::io::Cursor;
    use std::num::NonZeroU32;

    fn sem(id: u8) -> SemId {
        SemId::new(id).unwrap()
    }

    fn wait(id: u8, count: u32) -> SemWait {
        SemWait {
            sem: sem(id),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    fn write_file(generation: Generation, queues: &[Vec<Descriptor>]) -> Vec<u8> {
        let mut w =
            QueueFileWriter::new(Cursor::new(Vec::new()), generation, queues.len()).unwrap();
        for (q, descs) in queues.iter().enumerate() {
            for d in descs {
                w.push(q, d).unwrap();
            }
        }
        w.finish().unwrap().into_inner()
    }

    /// Reads a whole file sequentially into per-queue lists.
    fn read_all(bytes: &[u8]) -> Result<(QueueFileHeader, Vec<Vec<Descriptor>>), Error> {
        let mut r = QueueFileReader::new(bytes)?;
        let mut queues = vec![Vec::new(); r.header().queues()];
        let mut batch = Vec::new();
        while let Some(q) = r.next_batch(3, &mut batch)? {
            queues[q].extend_from_slice(&batch);
        }
        Ok((r.header().clone(), queues))
    }

    /// Three queues: queue 0 signals semaphore 2 twice, queue 2 waits for both signals.
    fn small_queues() -> Vec<Vec<Descriptor>> {
        let add = Descriptor::new(
            DescOp::Add,
            FabricAddr(0x40),
            FabricAddr(0x80),
            16,
            Dtype::F32,
        )
        .unwrap();
        vec![
            vec![
                copy(0, 0x1000, 100).with_signal(sem(2)),
                add.with_signal(sem(2)),
            ],
            vec![],
            vec![Descriptor::fill(FabricAddr(0x2000), 8, Dtype::U16, 0xbeef)
                .unwrap()
                .with_wait(wait(2, 2))
                .with_flags(DescFlags::END_OF_INSTRUCTION | DescFlags::NOTIFY)],
        ]
    }

    /// A file from its parts, with a correct checksum (to reach the checks behind it):
    /// version 2, casts allowed and no origin.
    fn assemble(generation: u8, queues: u8, counts: &[u64], payload: &[u8]) -> Vec<u8> {
        assemble_version(VERSION_WITH_CASTS, generation, queues, counts, payload)
    }

    /// [`assemble`] with a given format version.
    fn assemble_version(
        version: u16,
        generation: u8,
        queues: u8,
        counts: &[u64],
        payload: &[u8],
    ) -> Vec<u8> {
        let mut header = RawHeader {
            magic: MAGIC,
            version: U16::new(version),
            generation,
            queue_count: queues,
            descriptor_bytes: U32::new(32),
            checksum: U64::new(0),
            counts: [U64::new(0); MAX_QUEUES],
        };
        for (slot, &c) in header.counts.iter_mut().zip(counts) {
            *slot = U64::new(c);
        }
        let mut h = Fnv1a64::new();
        h.update(payload);
        header.checksum = U64::new(h.finish_with_header(header.as_bytes()));
        [header.as_bytes(), payload].concat()
    }

    fn encoded(descs: &[Descriptor]) -> Vec<u8> {
        descs
            .iter()
            .flat_map(|d| d.encode().as_bytes().to_vec())
            .collect()
    }

    fn header_err(bytes: &[u8]) -> (&'static str, u64, u64) {
        match read_all(bytes).unwrap_err() {
            Error::QueueFileHeader {
                field,
                offset,
                value,
                ..
            } => (field, offset, value),
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn fnv1a64_known_vectors() {
        for (input, expect) in [
            (&b""[..], 0xcbf2_9ce4_8422_2325u64),
            (b"a", 0xaf63_dc4c_8601_ec8c),
            (b"foobar", 0x8594_4171_f739_67e8),
        ] {
            let mut h = Fnv1a64::new();
            h.update(input);
            assert_eq!(h.0, expect);
        }
    }

    #[test]
    fn layout_is_pinned() {
        let bytes = write_file(Generation::Cayman, &small_queues());
        assert_eq!(bytes.len(), 152 + 3 * 32);
        assert_eq!(&bytes[0..8], b"DMAQUEUE");
        assert_eq!(&bytes[8..10], &[1, 0]);
        assert_eq!((bytes[10], bytes[11]), (3, 3));
        assert_eq!(&bytes[12..16], &[32, 0, 0, 0]);
        assert_eq!(&bytes[24..32], &2u64.to_le_bytes());
        assert_eq!(&bytes[32..40], &0u64.to_le_bytes());
        assert_eq!(&bytes[40..48], &1u64.to_le_bytes());
        assert!(bytes[48..152].iter().all(|&b| b == 0));
        let q = small_queues();
        assert_eq!(&bytes[152..184], q[0][0].encode().as_bytes());
        assert_eq!(&bytes[216..248], q[2][0].encode().as_bytes());
        let mut h = Fnv1a64::new();
        h.update(&bytes[152..]);
        h.update(&bytes[..16]);
        h.update(&bytes[24..152]);
        assert_eq!(&bytes[16..24], &h.0.to_le_bytes());
    }

    #[test]
    fn small_file_round_trips() {
        let bytes = write_file(Generation::Mariana, &small_queues());
        let (header, queues) = read_all(&bytes).unwrap();
        assert_eq!(header.generation(), Generation::Mariana);
        assert_eq!(header.counts(), &[2, 0, 1]);
        assert_eq!(queues, small_queues());
        let summary = verify(&bytes[..]).unwrap();
        assert_eq!((summary.descriptors, summary.bytes), (3, 100 + 16 + 8));
    }

    #[test]
    fn rejects_wrong_magic() {
        let mut bytes = write_file(Generation::Sunda, &small_queues());
        bytes[0] = b'X';
        let (field, offset, value) = header_err(&bytes);
        assert_eq!((field, offset), ("magic", 0));
        assert_eq!(value.to_le_bytes(), *b"XMAQUEUE");
    }

    #[test]
    fn rejects_wrong_version() {
        for version in [0u8, 4, 0xff] {
            let mut bytes = write_file(Generation::Sunda, &small_queues());
            bytes[8] = version;
            assert_eq!(header_err(&bytes), ("version", 8, u64::from(version)));
        }
    }

    /// An f32 -> bf16 cast copy of 64 destination bytes.
    fn cast_copy() -> Descriptor {
        let (src, dst) = (FabricAddr(0x400), FabricAddr(0x800));
        Descriptor::cast(DescOp::Copy, src, Dtype::F32, dst, 64, Dtype::Bf16).unwrap()
    }

    #[test]
    fn a_file_with_a_cast_is_version_2_and_one_without_stays_version_1() {
        let mut queues = small_queues();
        queues[1].push(cast_copy());
        let bytes = write_file(Generation::Cayman, &queues);
        assert_eq!(&bytes[8..10], &[2, 0]);
        let (header, back) = read_all(&bytes).unwrap();
        assert_eq!((header.version(), back), (2, queues));
        let summary = VerifiedQueueFile::open(Cursor::new(&bytes)).unwrap();
        assert_eq!(summary.header().version(), 2);
        // no cast: version 1, readable as before
        let plain = write_file(Generation::Cayman, &small_queues());
        assert_eq!(read_all(&plain).unwrap().0.version(), 1);
        // a version 2 header over descriptors without casts reads the same
        let payload = encoded(&small_queues().concat());
        let v2 = assemble_version(2, 3, 3, &[2, 0, 1], &payload);
        assert_eq!(read_all(&v2).unwrap().1, small_queues());
    }

    #[test]
    fn an_origin_makes_version_3_and_is_checked_with_the_rest() {
        let mut queues = small_queues();
        queues[1].push(cast_copy());
        let write = |origin: Option<u64>| {
            let mut w =
                QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, 3).unwrap();
            if let Some(o) = origin {
                w = w.with_origin(o);
            }
            for (q, descs) in queues.iter().enumerate() {
                descs.iter().for_each(|d| w.push(q, d).unwrap());
            }
            w.finish().unwrap().into_inner()
        };
        let tag = 0x0123_4567_89ab_cdef;
        let bytes = write(Some(tag));
        assert_eq!(&bytes[8..10], &[3, 0]);
        assert_eq!(bytes.len(), 152 + 32 * 4 + 8);
        assert_eq!(&bytes[bytes.len() - 8..], &tag.to_le_bytes());
        let (header, back) = read_all(&bytes).unwrap();
        assert_eq!((header.version(), &back), (3, &queues));
        let file = VerifiedQueueFile::open(Cursor::new(&bytes)).unwrap();
        assert_eq!(file.summary().origin, Some(tag));
        // without one: no trailer, no origin
        let plain = VerifiedQueueFile::open(Cursor::new(write(None))).unwrap();
        assert_eq!(
            (plain.header().version(), plain.summary().origin),
            (2, None)
        );
        // the checksum covers the origin
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            read_all(&flipped).unwrap_err(),
            Error::QueueFileChecksum { .. }
        ));
        // a version 3 file cut inside its origin is truncated there
        let cut = &bytes[..bytes.len() - 3];
        assert_eq!(
            read_all(cut).unwrap_err(),
            Error::QueueFileTruncated {
                offset: 152 + 32 * 4 + 5,
                needed: 152 + 32 * 4 + 8,
                what: "the origin (version 3)".into(),
            }
        );
        // and one byte past it is trailing
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            read_all(&long).unwrap_err(),
            Error::QueueFileTrailing {
                offset: 152 + 32 * 4 + 8
            }
        );
    }

    #[test]
    fn a_cast_in_a_version_1_file_is_refused_naming_the_rule() {
        let payload = encoded(&[copy(0, 0, 4), cast_copy()]);
        let bytes = assemble_version(1, 3, 1, &[2], &payload);
        let e = read_all(&bytes).unwrap_err();
        let Error::QueueFileDescriptor {
            queue: 0,
            index: 1,
            offset: 184,
            source,
        } = &e
        else {
            panic!("unexpected {e}")
        };
        let Error::BadDescriptor { field, value, rule } = &**source else {
            panic!("unexpected {source}")
        };
        assert_eq!((*field, *value), ("src_dtype", 0xa));
        assert!(
            rule.contains("a version 1 queue file has no casts"),
            "{rule}"
        );
        assert!(VerifiedQueueFile::open(Cursor::new(&bytes)).is_err());
        // the same descriptors under version 2 read
        let bytes = assemble_version(2, 3, 1, &[2], &payload);
        assert_eq!(
            read_all(&bytes).unwrap().1,
            vec![vec![copy(0, 0, 4), cast_copy()]]
        );
    }

    #[test]
    fn rejects_unknown_generation() {
        for code in [0u8, 1, 6, 0xff] {
            let bytes = assemble(code, 1, &[0], &[]);
            assert_eq!(header_err(&bytes), ("generation", 10, u64::from(code)));
        }
    }

    #[test]
    fn rejects_zero_and_too_many_queues() {
        assert_eq!(
            header_err(&assemble(2, 0, &[], &[])),
            ("queue_count", 11, 0)
        );
        assert_eq!(
            header_err(&assemble(2, 17, &[], &[])),
            ("queue_count", 11, 17)
        );
        assert_eq!(
            header_err(&assemble(2, 255, &[], &[])),
            ("queue_count", 11, 255)
        );
    }

    #[test]
    fn rejects_wrong_descriptor_size() {
        let mut bytes = assemble(2, 1, &[0], &[]);
        bytes[12] = 64;
        assert_eq!(header_err(&bytes), ("descriptor_bytes", 12, 64));
    }

    #[test]
    fn rejects_counts_in_unused_slots() {
        let bytes = assemble(2, 2, &[0, 0, 5], &[]);
        assert_eq!(header_err(&bytes), ("count", 24 + 16, 5));
    }

    #[test]
    fn rejects_counts_that_overflow() {
        let bytes = assemble(2, 2, &[1 << 58, 1 << 58], &[]);
        let e = read_all(&bytes).unwrap_err();
        assert!(
            matches!(
                e,
                Error::QueueFileHeader {
                    field: "count",
                    offset: 32,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("overflow"), "{e}");
        let huge = assemble(2, 1, &[u64::MAX], &[]);
        assert_eq!(header_err(&huge), ("count", 24, u64::MAX));
    }

    #[test]
    fn rejects_truncated_header() {
        let bytes = write_file(Generation::Sunda, &small_queues());
        let e = read_all(&bytes[..100]).unwrap_err();
        assert_eq!(
            e,
            Error::QueueFileTruncated {
                offset: 100,
                needed: 152,
                what: "the header".to_string()
            }
        );
    }

    #[test]
    fn rejects_truncated_payload() {
        let bytes = write_file(Generation::Sunda, &small_queues());
        let e = read_all(&bytes[..152 + 32 + 10]).unwrap_err();
        assert_eq!(
            e,
            Error::QueueFileTruncated {
                offset: 194,
                needed: 216,
                what: "queue 0 descriptor 1".to_string()
            }
        );
        assert_eq!(
            e.to_string(),
            "queue file truncated at byte 194: queue 0 descriptor 1 needs bytes up to 216"
        );
        // counts that promise far more than the file holds are just a truncation
        let lying = assemble(2, 1, &[1 << 40], &encoded(&[copy(0, 0, 1)]));
        assert!(matches!(
            read_all(&lying),
            Err(Error::QueueFileTruncated { offset: 184, .. })
        ));
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut bytes = write_file(Generation::Sunda, &small_queues());
        bytes.push(0);
        assert_eq!(
            read_all(&bytes).unwrap_err(),
            Error::QueueFileTrailing { offset: 248 }
        );
    }

    #[test]
    fn rejects_checksum_mismatch() {
        let mut bytes = write_file(Generation::Sunda, &small_queues());
        let stored = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        bytes[160] ^= 0x01; // dst of the first descriptor: still a valid descriptor
        match read_all(&bytes).unwrap_err() {
            Error::QueueFileChecksum {
                stored: s,
                computed,
            } => {
                assert_eq!(s, stored);
                assert_ne!(computed, stored);
            }
            e => panic!("unexpected {e}"),
        }
    }

    #[test]
    fn rejects_bad_descriptor_naming_queue_index_and_offset() {
        let mut payload = encoded(&[copy(0, 0, 4), copy(0, 0, 4), copy(0, 0, 4)]);
        payload[64 + 21] = 0x77; // queue 1 descriptor 1: unknown op
        let bytes = assemble(3, 2, &[1, 2], &payload);
        let e = read_all(&bytes).unwrap_err();
        let Error::QueueFileDescriptor {
            queue,
            index,
            offset,
            source,
        } = &e
        else {
            panic!("unexpected {e}")
        };
        assert_eq!((*queue, *index, *offset), (1, 1, 152 + 64));
        assert!(matches!(
            **source,
            Error::BadDescriptor {
                field: "op",
                value: 0x77,
                ..
            }
        ));
        assert!(
            e.to_string()
                .starts_with("queue file queue 1 descriptor 1 at byte 216: "),
            "{e}"
        );
    }

    #[test]
    fn rejects_semaphore_signalled_by_two_queues() {
        let s = copy(0, 0, 4).with_signal(sem(7));
        let bytes = assemble(3, 2, &[1, 1], &encoded(&[s, s]));
        assert_eq!(
            read_all(&bytes).unwrap_err(),
            Error::SemaphoreOwner {
                sem: 7,
                queue: 1,
                index: 0,
                owner: 0
            }
        );
    }

    #[test]
    fn rejects_wait_beyond_every_signal() {
        let descs = [
            copy(0, 0, 4).with_signal(sem(1)),
            copy(0, 0, 4).with_wait(wait(1, 3)),
        ];
        let bytes = assemble(3, 2, &[1, 1], &encoded(&descs));
        assert_eq!(
            read_all(&bytes).unwrap_err(),
            Error::SemaphoreNeverReached {
                sem: 1,
                count: 3,
                queue: 1,
                index: 0,
                signals: 1
            }
        );
    }

    #[test]
    fn errors_are_sticky() {
        let bytes = write_file(Generation::Sunda, &small_queues());
        let mut r = QueueFileReader::new(&bytes[..200]).unwrap();
        let mut out = Vec::new();
        let first = r.next_batch(16, &mut out).unwrap_err();
        assert_eq!(r.next_batch(16, &mut out).unwrap_err(), first);
        assert!(out.is_empty());
    }

    #[test]
    fn writer_rejects_bad_queue_counts_and_order() {
        let c = || Cursor::new(Vec::new());
        for n in [0, 17] {
            let e = QueueFileWriter::new(c(), Generation::Sunda, n).unwrap_err();
            assert_eq!(e, Error::QueueCount { count: n, max: 16 });
        }
        let mut w = QueueFileWriter::new(c(), Generation::Sunda, 3).unwrap();
        w.push(1, &copy(0, 0, 1)).unwrap();
        assert_eq!(
            w.push(0, &copy(0, 0, 1)).unwrap_err(),
            Error::QueueOrder {
                queue: 0,
                current: 1
            }
        );
        assert_eq!(
            w.push(3, &copy(0, 0, 1)).unwrap_err(),
            Error::NoSuchQueue {
                queue: 3,
                queues: 3
            }
        );
        let s = copy(0, 0, 1).with_signal(sem(0));
        w.push(1, &s).unwrap();
        assert!(matches!(
            w.push(2, &s),
            Err(Error::SemaphoreOwner { owner: 1, .. })
        ));
    }

    #[test]
    fn unfinished_or_failed_files_are_rejected() {
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Sunda, 1).unwrap();
        w.push(0, &copy(0, 0, 1).with_wait(wait(0, 1))).unwrap();
        let e = w.finish().unwrap_err();
        assert!(
            matches!(e, Error::SemaphoreNeverReached { sem: 0, .. }),
            "{e}"
        );
        // what an unfinished writer leaves: the zero placeholder header
        let mut zero = vec![0u8; 152];
        zero.extend_from_slice(&encoded(&[copy(0, 0, 1)]));
        assert_eq!(header_err(&zero), ("magic", 0, 0));
    }

    #[test]
    fn every_byte_flip_is_rejected_or_harmless() {
        let bytes = write_file(Generation::Cayman, &small_queues());
        let good = read_all(&bytes).unwrap();
        let mut rejected = 0;
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= mask;
                match read_all(&bad) {
                    Ok(got) => assert_eq!(got, good, "byte {i} ^ {mask:#x}"),
                    Err(_) => rejected += 1,
                }
                if let Ok(s) = verify(&bad[..]) {
                    assert_eq!(s.header, good.0, "byte {i} ^ {mask:#x}");
                }
            }
        }
        // FNV-1a detects every single-byte change, so nothing slips through.
        assert_eq!(rejected, 3 * bytes.len());
    }

    /// Random queues whose semaphores obey the file rules: queue `q` signals only
    /// semaphore `q`, and a wait is kept only if its count is reachable.
    fn legal_queues(queues: usize, descs: Vec<(usize, Descriptor)>) -> Vec<Vec<Descriptor>> {
        let mut out = vec![Vec::new(); queues];
        for (q, d) in descs {
            let q = q % queues;
            let d = match d.signal() {
                Some(_) => d.with_signal(sem(q as u8)),
                None => d,
            };
            out[q].push(d);
        }
        let mut signals = [0u64; 16];
        for (q, descs) in out.iter().enumerate() {
            signals[q] = descs.iter().filter(|d| d.signal().is_some()).count() as u64;
        }
        for d in out.iter_mut().flatten() {
            if let Some(w) = d.wait() {
                let reachable = u64::from(w.count.get()) <= signals[w.sem.index()];
                let plain = Descriptor::new(d.op(), d.src(), d.dst(), d.len(), d.dtype()).unwrap();
                let plain = plain.with_flags(d.flags());
                let plain = d.signal().map_or(plain, |s| plain.with_signal(s));
                *d = if reachable { plain.with_wait(w) } else { plain };
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        #[test]
        fn random_files_round_trip(
            queues in 1usize..=16,
            descs in proptest::collection::vec((0usize..16, arb_descriptor()), 0..3000),
            max in 1usize..700,
        ) {
            let queues_in = legal_queues(queues, descs);
            let bytes = write_file(Generation::Maverick, &queues_in);
            let (header, seq) = read_all(&bytes).unwrap();
            prop_assert_eq!(header.queues(), queues);
            prop_assert_eq!(&seq, &queues_in);
            // the seekable reader, queues interleaved in batches of `max`
            let mut f = VerifiedQueueFile::open(Cursor::new(&bytes)).unwrap();
            let mut got = vec![Vec::new(); queues];
            let mut batch = Vec::new();
            let mut busy = true;
            while busy {
                busy = false;
                for (q, list) in got.iter_mut().enumerate().rev() {
                    busy |= f.read_queue(q, max, &mut batch).unwrap() > 0;
                    list.extend_from_slice(&batch);
                }
            }
            prop_assert_eq!(&got, &queues_in);
            prop_assert!(f.max_buffered() <= max);
        }
    }

    #[test]
    fn verified_file_rejects_unknown_queue_and_rewinds() {
        let bytes = write_file(Generation::Sunda, &small_queues());
        let mut f = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            f.read_queue(3, 1, &mut out).unwrap_err(),
            Error::NoSuchQueue {
                queue: 3,
                queues: 3
            }
        );
        assert_eq!(f.read_queue(0, 100, &mut out).unwrap(), 2);
        assert_eq!(f.read_queue(0, 100, &mut out).unwrap(), 0);
        f.rewind();
        assert_eq!(f.read_queue(0, 1, &mut out).unwrap(), 1);
        assert_eq!(out, small_queues()[0][..1]);
    }

    #[test]
    fn verified_open_refuses_a_bad_file() {
        let mut bytes = write_file(Generation::Sunda, &small_queues());
        bytes[200] ^= 0x10;
        assert!(VerifiedQueueFile::open(Cursor::new(bytes)).is_err());
    }

    /// 2600 descriptors in queue 1: chunks 0 and 1 are whole, chunk 2 holds 552.
    fn three_chunk_file() -> (Vec<Vec<Descriptor>>, Vec<u8>) {
        let queues = vec![
            vec![copy(0, 0x10, 8); 3],
            (0..2600).map(|i| copy(i * 8, 0x4000 + i * 8, 8)).collect(),
        ];
        let bytes = write_file(Generation::Cayman, &queues);
        (queues, bytes)
    }

    #[test]
    fn chunked_reads_at_any_batch_size_return_the_verified_queues() {
        let (queues, bytes) = three_chunk_file();
        for max in [1, 700, 1024, 1500, MAX_BATCH] {
            let mut f = VerifiedQueueFile::open(Cursor::new(bytes.clone())).unwrap();
            let (mut got, mut batch) = (Vec::new(), Vec::new());
            while f.read_queue(1, max, &mut batch).unwrap() > 0 {
                assert!(batch.len() <= max);
                got.extend_from_slice(&batch);
            }
            assert_eq!(got, queues[1], "max {max}");
            assert_eq!(f.max_buffered(), max.min(2600));
        }
    }

    #[test]
    fn a_chunk_changed_after_verification_is_refused_whole() {
        let (queues, bytes) = three_chunk_file();
        let mut f = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        // queue 1 starts after queue 0's 3 descriptors; flip a bit of its descriptor 1500
        // (chunk 1), in the length field, so that it still decodes
        let q1 = 152 + 3 * 32;
        let at = q1 + 1500 * 32 + 16;
        f.r.get_mut()[at] ^= 0x08;
        let mut out = Vec::new();
        assert_eq!(f.read_queue(1, 1024, &mut out).unwrap(), 1024); // chunk 0 is intact
        assert_eq!(out, queues[1][..1024]);
        let want = Error::QueueFileChanged {
            queue: 1,
            chunk: 1,
            first: 1024,
            offset: q1 as u64 + 1024 * 32,
        };
        assert_eq!(f.read_queue(1, 1, &mut out).unwrap_err(), want);
        assert!(out.is_empty());
        // the cursor did not move: the same read fails again
        assert_eq!(f.read_queue(1, 5000, &mut out).unwrap_err(), want);
        // a read that starts in chunk 0 and runs into chunk 1 returns nothing of either
        f.rewind();
        assert_eq!(f.read_queue(1, 1000, &mut out).unwrap(), 1000);
        assert_eq!(f.read_queue(1, 100, &mut out).unwrap_err(), want);
        assert!(out.is_empty());
        // other queues and chunks are unaffected
        assert_eq!(f.read_queue(0, 10, &mut out).unwrap(), 3);
        // a truncated file fails in the chunk it cuts
        f.r.get_mut()[at] ^= 0x08;
        f.r.get_mut().truncate(q1 + 2100 * 32);
        f.rewind();
        for _ in 0..2 {
            assert_eq!(f.read_queue(1, 1024, &mut out).unwrap(), 1024);
        }
        assert!(matches!(
            f.read_queue(1, 1024, &mut out),
            Err(Error::QueueFileTruncated { .. })
        ));
    }

    /// Descriptor `i` of the large-file test.
    fn nth(i: u64) -> Descriptor {
        let len = 1 + (i % 65_536) as u32;
        copy(i * 64, 0x100_0000_0000 + i, len)
    }

    #[test]
    fn a_million_descriptors_stream_with_a_bounded_window() {
        const QUEUES: u64 = 16;
        const PER_QUEUE: u64 = 62_500;
        let path = std::env::temp_dir().join(format!("dma-queue-file-{}.bin", std::process::id()));
        let file = File::create(&path).unwrap();
        let mut w = QueueFileWriter::new(file, Generation::Cayman, QUEUES as usize).unwrap();
        for i in 0..QUEUES * PER_QUEUE {
            w.push((i / PER_QUEUE) as usize, &nth(i)).unwrap();
        }
        drop(w.finish().unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            152 + 32 * 1_000_000
        );

        let mut r = QueueFileReader::new(File::open(&path).unwrap()).unwrap();
        let mut batch = Vec::new();
        let mut next = 0u64;
        while let Some(q) = r.next_batch(1_000_000, &mut batch).unwrap() {
            assert_eq!(q as u64, next / PER_QUEUE);
            for d in &batch {
                assert_eq!(*d, nth(next));
                next += 1;
            }
        }
        assert_eq!(next, 1_000_000);
        let stats = r.stats();
        assert_eq!(stats.descriptors, 1_000_000);
        assert_eq!(stats.max_buffered, MAX_BATCH);

        let mut f = VerifiedQueueFile::open_path(&path).unwrap();
        assert_eq!(f.summary().descriptors, 1_000_000);
        let mut cursors = [0u64; QUEUES as usize];
        while cursors.iter().any(|&c| c < PER_QUEUE) {
            for (q, c) in cursors.iter_mut().enumerate() {
                let n = f.read_queue(q, 1000, &mut batch).unwrap() as u64;
                assert_eq!(
                    batch.first(),
                    (n > 0).then(|| nth(q as u64 * PER_QUEUE + *c)).as_ref()
                );
                *c += n;
            }
        }
        assert_eq!(f.max_buffered(), 1000);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_named_as_such_not_by_a_byte() {
        let path = std::env::temp_dir().join("hostsim-no-such-queue-file.dmaq");
        let e = VerifiedQueueFile::open_path(&path).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::QueueFileOpen { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("the queue file cannot be opened: "),
            "{e}"
        );
    }

    #[test]
    fn timeline_from_a_file_matches_pushing_in_queue_order() {
        let queues = small_queues();
        let bytes = write_file(Generation::Cayman, &queues);
        let model = TimingModel::new(Generation::Cayman);
        let mut f = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        let from_file = f.timeline(model, true).unwrap();
        let mut t = QueueTimeline::new(model, 3, true).unwrap();
        for (q, descs) in queues.iter().enumerate() {
            for d in descs {
                t.push(q, d).unwrap();
            }
        }
        assert_eq!(from_file, t.finish().unwrap());
        assert_eq!(from_file.queues[2].descriptors, 1);
    }
}
