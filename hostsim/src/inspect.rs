//! `hostsim inspect`: the descriptors of a queue file, one per line, as a fixed-width
//! table or as JSON lines.
//!
//! The file is verified whole first ([`dma::VerifiedQueueFile`]: structure, every
//! descriptor, checksum, semaphores), so a bad file is reported (what is wrong and its byte
//! offset) before one line of the listing is written. The listing then streams queue by
//! queue in batches of at most [`dma::queue_file::MAX_BATCH`] descriptors: memory stays
//! bounded whatever the file's size (the optional per-descriptor op list for the SVG
//! timeline is one byte per descriptor).
//!
//! Addresses are shown located on the file's generation: `hbm:0x1000`, `sbuf:3:0x40`
//! (space, partition, offset, the notation of ADDR4 fields in `isa decode`), or raw hex
//! for an address in no region. A FILL's source field holds its element, shown as
//! `fill=0x...`. A cast's dtype reads `src->dst` (`f32->bf16`; its bytes are the
//! destination's), and its JSON line names the source's dtype in `src_dtype` (`null` for
//! a descriptor that does not cast).

use std::io::{Read, Seek, Write};

use dma::queue_file::MAX_BATCH;
use dma::{AddressMap, DescFlags, DescOp, Descriptor, FabricAddr, Space, VerifiedQueueFile};
use serde_json::{json, Value};

use crate::error::Error;
use crate::progress::Progress;

/// How the listing is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListingFormat {
    /// A header and a fixed-width table.
    Table,
    /// One JSON object per line: a header record, then one per descriptor.
    JsonLines,
}

/// Per queue, each descriptor's op in queue order (what the SVG timeline colours).
pub type QueueOps = Vec<Vec<DescOp>>;

/// The column header of the table.
pub const TABLE_HEADER: &str =
    "queue   position  src                    dst                    bytes  op        dtype  flags";

/// Writes the listing of `file` to `out`, counting descriptors on `progress`; returns each
/// queue's ops if `collect_ops`, else an empty list.
pub fn write_listing<R: Read + Seek, W: Write>(
    file: &mut VerifiedQueueFile<R>,
    format: ListingFormat,
    out: &mut W,
    progress: &mut Progress,
    collect_ops: bool,
) -> Result<QueueOps, Error> {
    let map = AddressMap::new(file.header().generation());
    write_header(file, format, out)?;
    let mut ops: QueueOps = Vec::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    file.rewind();
    for queue in 0..file.header().queues() {
        let mut position = 0u64;
        let mut queue_ops = Vec::new();
        while file.read_queue(queue, MAX_BATCH, &mut batch)? > 0 {
            for d in &batch {
                let line = match format {
                    ListingFormat::Table => table_line(&map, queue, position, d),
                    ListingFormat::JsonLines => json_line(&map, queue, position, d),
                };
                writeln!(out, "{line}").map_err(output_error)?;
                position += 1;
            }
            if collect_ops {
                queue_ops.extend(batch.iter().map(Descriptor::op));
            }
            progress.inc(batch.len() as u64);
        }
        ops.push(queue_ops);
    }
    file.rewind();
    out.flush().map_err(output_error)?;
    Ok(if collect_ops { ops } else { Vec::new() })
}

fn output_error(e: std::io::Error) -> Error {
    Error::Output {
        what: "the listing".into(),
        message: e.to_string(),
    }
}

fn write_header<R, W: Write>(
    file: &VerifiedQueueFile<R>,
    format: ListingFormat,
    out: &mut W,
) -> Result<(), Error>
where
    R: Read + Seek,
{
    let summary = file.summary();
    let header = &summary.header;
    let g = header.generation();
    // what gen made the file for (a digest of the scenario's initial tensors), if it says
    let origin = summary.origin.map(|o| format!("{o:#018x}"));
    let text = match format {
        ListingFormat::JsonLines => json_object(&[
            ("record", "header".into()),
            ("generation", g.name().into()),
            ("version", g.version().into()),
            ("queues", header.queues().into()),
            ("counts", header.counts().into()),
            ("descriptors", summary.descriptors.into()),
            ("bytes", summary.bytes.into()),
            ("origin", origin.into()),
        ]),
        ListingFormat::Table => {
            let counts: Vec<String> = header
                .counts()
                .iter()
                .enumerate()
                .map(|(q, n)| format!("q{q}={n}"))
                .collect();
            let origin = origin.map_or(String::new(), |o| format!(", origin {o}"));
            format!(
                "queue file: {} (v{}), {} queues, {} descriptors, {} bytes{origin}\ncounts: {}\n{TABLE_HEADER}",
                g.name(),
                g.version(),
                header.queues(),
                summary.descriptors,
                summary.bytes,
                counts.join(" ")
            )
        }
    };
    writeln!(out, "{text}").map_err(output_error)
}

/// `hbm:0x1000`, `sbuf:3:0x40`, `psum:0:0x0`, or raw hex outside every region.
pub fn located(map: &AddressMap, addr: FabricAddr) -> String {
    match map.locate(addr) {
        Ok(loc) if loc.space == Space::Hbm => format!("hbm:{:#x}", loc.offset),
        Ok(loc) => format!("{}:{}:{:#x}", loc.space.name(), loc.partition, loc.offset),
        Err(_) => format!("{:#x}", addr.0),
    }
}

fn source_text(map: &AddressMap, d: &Descriptor) -> String {
    match d.op() {
        DescOp::Fill => format!("fill={:#x}", d.src().0),
        _ => located(map, d.src()),
    }
}

/// The flags column: `eoi`, `notify`, `wait(s3>=2)`, `signal(s1)`, comma-separated, or `-`.
pub fn flags_text(d: &Descriptor) -> String {
    let mut parts = Vec::new();
    if d.flags().contains(DescFlags::END_OF_INSTRUCTION) {
        parts.push("eoi".to_string());
    }
    if d.flags().contains(DescFlags::NOTIFY) {
        parts.push("notify".to_string());
    }
    if let Some(w) = d.wait() {
        parts.push(format!("wait(s{}>={})", w.sem.get(), w.count));
    }
    if let Some(s) = d.signal() {
        parts.push(format!("signal(s{})", s.get()));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// The dtype column: the dtype, or `src->dst` for a cast.
pub fn dtype_text(d: &Descriptor) -> String {
    match d.is_cast() {
        true => format!("{}->{}", d.src_dtype(), d.dtype()),
        false => d.dtype().name().to_string(),
    }
}

/// One table row (columns as [`TABLE_HEADER`]).
pub fn table_line(map: &AddressMap, queue: usize, position: u64, d: &Descriptor) -> String {
    format!(
        "{queue:>5} {position:>10}  {:<22} {:<22} {:>5}  {:<8}  {:<5}  {}",
        source_text(map, d),
        located(map, d.dst()),
        d.len(),
        d.op().name(),
        dtype_text(d),
        flags_text(d)
    )
}

/// A JSON object with its keys in the given order (serde_json's maps sort them).
pub fn json_object(pairs: &[(&str, Value)]) -> String {
    let fields: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(*k)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// One descriptor as a JSON object (keys in table order).
pub fn json_line(map: &AddressMap, queue: usize, position: u64, d: &Descriptor) -> String {
    let fill = d.op() == DescOp::Fill;
    let src_at = if fill {
        Value::Null
    } else {
        located(map, d.src()).into()
    };
    json_object(&[
        ("record", "descriptor".into()),
        ("queue", queue.into()),
        ("position", position.into()),
        ("src", d.src().0.into()),
        ("src_at", src_at),
        ("dst", d.dst().0.into()),
        ("dst_at", located(map, d.dst()).into()),
        ("bytes", d.len().into()),
        ("op", d.op().name().into()),
        ("dtype", d.dtype().name().into()),
        (
            "src_dtype",
            d.is_cast().then(|| d.src_dtype().name()).into(),
        ),
        (
            "end_of_instruction",
            d.flags().contains(DescFlags::END_OF_INSTRUCTION).into(),
        ),
        ("notify", d.flags().contains(DescFlags::NOTIFY).into()),
        (
            "wait",
            d.wait()
                .map(|w| json!({"sem": w.sem.get(), "count": w.count.get()}))
                .into(),
        ),
        ("signal", d.signal().map(|s| s.get()).into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{Dtype, Generation, QueueFileWriter, SemId, SemWait};
    use std::io::Cursor;
    use std::num::NonZeroU32;

    fn sbuf(map: &AddressMap, p: u32, off: u64) -> FabricAddr {
        map.fabric_addr(dma::Location {
            space: Space::Sbuf,
            partition: p,
            offset: off,
        })
        .unwrap()
    }

    /// Two queues: a copy that signals s2, then a FILL and a max that waits for it.
    pub(crate) fn small_file() -> Vec<u8> {
        let map = AddressMap::new(Generation::Cayman);
        let copy = Descriptor::new(
            DescOp::Copy,
            FabricAddr(0x1000),
            sbuf(&map, 3, 0x40),
            256,
            Dtype::F32,
        )
        .unwrap()
        .with_flags(DescFlags::END_OF_INSTRUCTION | DescFlags::NOTIFY)
        .with_signal(SemId::new(2).unwrap());
        let fill = Descriptor::fill(FabricAddr(0x2000), 64, Dtype::U32, 0xdead).unwrap();
        let wait = SemWait {
            sem: SemId::new(2).unwrap(),
            count: NonZeroU32::new(1).unwrap(),
        };
        let max = Descriptor::new(
            DescOp::Max,
            sbuf(&map, 3, 0x40),
            FabricAddr(0x3000),
            256,
            Dtype::F32,
        )
        .unwrap()
        .with_wait(wait);
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, 2).unwrap();
        w.push(0, &copy).unwrap();
        w.push(1, &fill).unwrap();
        w.push(1, &max).unwrap();
        w.finish().unwrap().into_inner()
    }

    fn listing(bytes: Vec<u8>, format: ListingFormat) -> (String, QueueOps) {
        let mut file = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        let mut out = Vec::new();
        let mut progress = Progress::hidden(0, "inspect");
        let ops = write_listing(&mut file, format, &mut out, &mut progress, true).unwrap();
        assert_eq!(progress.done(), 3);
        (String::from_utf8(out).unwrap(), ops)
    }

    #[test]
    fn table_lists_every_descriptor() {
        let (text, ops) = listing(small_file(), ListingFormat::Table);
        let expected = format!(
            "queue file: cayman (v3), 2 queues, 3 descriptors, 576 bytes\n\
             counts: q0=1 q1=2\n\
             {TABLE_HEADER}\n    \
                 0          0  hbm:0x1000             sbuf:3:0x40              256  copy      f32    eoi,notify,signal(s2)\n    \
                 1          0  fill=0xdead            hbm:0x2000                64  fill      u32    -\n    \
                 1          1  sbuf:3:0x40            hbm:0x3000               256  max       f32    wait(s2>=1)\n"
        );
        assert_eq!(text, expected);
        assert_eq!(
            ops,
            vec![vec![DescOp::Copy], vec![DescOp::Fill, DescOp::Max]]
        );
    }

    #[test]
    fn json_lines_parse_and_carry_every_field() {
        let (text, _) = listing(small_file(), ListingFormat::JsonLines);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[0],
            json!({"record": "header", "generation": "cayman", "version": 3, "queues": 2,
                   "counts": [1, 2], "descriptors": 3, "bytes": 576, "origin": null})
        );
        let map = AddressMap::new(Generation::Cayman);
        assert_eq!(
            lines[1],
            json!({"record": "descriptor", "queue": 0, "position": 0, "src": 0x1000,
                   "src_at": "hbm:0x1000", "dst": sbuf(&map, 3, 0x40).0, "dst_at": "sbuf:3:0x40",
                   "bytes": 256, "op": "copy", "dtype": "f32", "src_dtype": null, "end_of_instruction": true,
                   "notify": true, "wait": null, "signal": 2})
        );
        assert!(text.lines().nth(1).unwrap().starts_with(
            "{\"record\":\"descriptor\",\"queue\":0,\"position\":0,\"src\":4096,\"src_at\":\"hbm:0x1000\","
        ));
        assert_eq!(lines[2]["src_at"], Value::Null);
        assert_eq!(lines[2]["src"], json!(0xdead));
        assert_eq!(lines[3]["wait"], json!({"sem": 2, "count": 1}));
    }

    #[test]
    fn a_cast_lists_both_dtypes() {
        let cast = Descriptor::cast(
            DescOp::Add,
            FabricAddr(0x1000),
            Dtype::F32,
            FabricAddr(0x8000),
            64,
            Dtype::Bf16,
        )
        .unwrap();
        let map = AddressMap::new(Generation::Cayman);
        assert_eq!(
            table_line(&map, 2, 7, &cast),
            "    2          7  hbm:0x1000             hbm:0x8000                64  add       f32->bf16  -"
        );
        let line: Value = serde_json::from_str(&json_line(&map, 2, 7, &cast)).unwrap();
        assert_eq!(
            (&line["dtype"], &line["src_dtype"]),
            (&json!("bf16"), &json!("f32"))
        );
        assert_eq!(line["bytes"], json!(64));
        // a file with it is version 2 and lists it so
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, 1).unwrap();
        w.push(0, &cast).unwrap();
        let mut file =
            VerifiedQueueFile::open(Cursor::new(w.finish().unwrap().into_inner())).unwrap();
        assert_eq!(file.header().version(), 2);
        let mut out = Vec::new();
        let mut progress = Progress::hidden(0, "inspect");
        write_listing(
            &mut file,
            ListingFormat::Table,
            &mut out,
            &mut progress,
            false,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines().last().unwrap().contains("add       f32->bf16"),
            "{text}"
        );
    }

    #[test]
    fn bad_file_fails_before_any_output() {
        let mut bytes = small_file();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let e = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap_err();
        assert!(matches!(e, dma::Error::QueueFileChecksum { .. }), "{e}");
    }

    #[test]
    fn addresses_outside_every_region_are_raw() {
        let map = AddressMap::new(Generation::Sunda);
        assert_eq!(
            located(&map, FabricAddr(0x100_0000_0000 - 1)),
            "0xffffffffff"
        );
        assert_eq!(located(&map, sbuf(&map, 127, 8)), "sbuf:127:0x8");
    }
}
