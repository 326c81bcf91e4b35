//! NumPy `.npy` files (format versions 1.0, 2.0 and 3.0): the way tensors enter and
//! leave the model, in the conventions of the people who use it.
//!
//! Supported element types are the fabric's dtypes, little-endian or byte-sized:
//! `|u1 |i1 <u2 <i2 <u4 <i4 <f2 <f4`; `bf16` tensors travel as raw bits in `<u2` arrays
//! (numpy has no bfloat16), so a `.npy` file's dtype is checked against the tensor's
//! *storage* dtype ([`storage_descr`]). C order only (`fortran_order: False`).
//!
//! Reading never trusts the file: the magic, version, header length, header dictionary
//! (parsed whole: exactly `descr`, `fortran_order` and `shape`, each once), shape product
//! and payload length are all checked, and every failure names the file and the rule. A
//! file is read only once its header matches its length, and only a regular file is.
//! Writing is atomic: the bytes go to a temporary file beside the target, which is then
//! renamed over it, so an interrupted write never leaves a truncated file.

use std::path::Path;

use dma::Dtype;

use crate::error::Error;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// A tensor read from or written to a `.npy` file: its shape and little-endian bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyArray {
    /// The numpy `descr` string (`<f4`, `|u1`, ...).
    pub descr: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// The numpy `descr` a tensor of `dtype` is stored as (`bf16` as raw `<u2` bits).
pub fn storage_descr(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::U8 => "|u1",
        Dtype::I8 => "|i1",
        Dtype::U16 | Dtype::Bf16 => "<u2",
        Dtype::I16 => "<i2",
        Dtype::U32 => "<u4",
        Dtype::I32 => "<i4",
        Dtype::I64 => "<i8",
        Dtype::F16 => "<f2",
        Dtype::F32 => "<f4",
    }
}

fn descr_size(descr: &str) -> Option<usize> {
    Dtype::ALL
        .into_iter()
        .find(|&d| storage_descr(d) == descr)
        .map(Dtype::size)
}

fn bad(file: &str, rule: impl Into<String>) -> Error {
    Error::Npy {
        file: file.to_string(),
        rule: rule.into(),
    }
}

/// Encodes an array as a version 1.0 `.npy` image (2.0 when the header needs it).
pub fn encode(a: &NpyArray) -> Vec<u8> {
    let mut out = header(&a.descr, &a.shape);
    out.extend_from_slice(&a.data);
    out
}

/// The bytes of a `.npy` file before its payload, for an array of `descr` and `shape`
/// (version 1.0, or 2.0 when the header needs it).
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let shape = match shape {
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let v1 = 10 + dict.len() < 65536 - 64;
    let prefix = if v1 { 10 } else { 12 };
    let pad = (64 - (prefix + dict.len() + 1) % 64) % 64;
    let header_len = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(prefix + header_len);
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

/// What a `.npy` header says: the payload's `descr` and `shape`, where the payload
/// starts, and how many bytes it must have.
struct Header {
    descr: String,
    shape: Vec<u64>,
    payload_at: usize,
    payload_bytes: u64,
}

/// Bytes before a header dictionary of a version 2.0 or 3.0 file (the longest prefix).
const PREFIX: usize = 12;

/// Longest header dictionary read (numpy writes a few hundred bytes).
const MAX_HEADER: usize = 1 << 20;

/// Where the header dictionary of the image starting with `bytes` starts, and its
/// length: the magic, version and length checked.
fn prefix(file: &str, bytes: &[u8]) -> Result<(usize, usize), Error> {
    if bytes.get(..6) != Some(MAGIC.as_slice()) {
        return Err(bad(
            file,
            "not a .npy file (the magic \\x93NUMPY is missing)",
        ));
    }
    let (len, start) = match bytes.get(6..8) {
        Some([1, 0]) => (
            bytes
                .get(8..10)
                .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))),
            10,
        ),
        Some([2 | 3, 0]) => (
            bytes
                .get(8..PREFIX)
                .and_then(|b| usize::try_from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()),
            PREFIX,
        ),
        _ => {
            return Err(bad(
                file,
                "unsupported .npy version (1.0, 2.0 and 3.0 are read)",
            ))
        }
    };
    let len = len.ok_or_else(|| bad(file, "truncated header"))?;
    if len > MAX_HEADER {
        return Err(bad(
            file,
            format!("header length {len} is over the {MAX_HEADER} bytes read"),
        ));
    }
    Ok((start, len))
}

/// The header of the image starting with `bytes` (the payload need not be there);
/// `file` names it in errors.
fn decode_header(file: &str, bytes: &[u8]) -> Result<Header, Error> {
    let (start, len) = prefix(file, bytes)?;
    let header = bytes
        .get(start..start + len)
        .ok_or_else(|| bad(file, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(file, "header is not text"))?;
    let (descr, shape) = parse_header(file, header)?;
    let size = descr_size(&descr).ok_or_else(|| {
        let mut known: Vec<&str> = Dtype::ALL.into_iter().map(storage_descr).collect();
        known.dedup();
        bad(
            file,
            format!(
                "dtype {descr:?} is not one of {} (a bf16 tensor takes its raw bits as <u2: save a.view(np.uint16))",
                known.join(" ")
            ),
        )
    })?;
    let count = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let payload_bytes = count
        .and_then(|c| c.checked_mul(size as u64))
        .ok_or_else(|| bad(file, "shape overflows"))?;
    Ok(Header {
        descr,
        shape,
        payload_at: start + len,
        payload_bytes,
    })
}

impl Header {
    /// The array of `payload`, which must be exactly the header's size.
    fn array(self, file: &str, payload: &[u8]) -> Result<NpyArray, Error> {
        if payload.len() as u64 != self.payload_bytes {
            return Err(self.payload_error(file, payload.len() as u64));
        }
        Ok(NpyArray {
            descr: self.descr,
            shape: self.shape,
            data: payload.to_vec(),
        })
    }

    fn payload_error(&self, file: &str, have: u64) -> Error {
        let (shape, descr, want) = (&self.shape, &self.descr, self.payload_bytes);
        bad(
            file,
            format!("payload is {have} bytes but shape {shape:?} of {descr} needs {want}"),
        )
    }
}

/// Decodes a `.npy` image; `file` names it in errors.
pub fn decode(file: &str, bytes: &[u8]) -> Result<NpyArray, Error> {
    let header = decode_header(file, bytes)?;
    let payload = bytes.get(header.payload_at..).unwrap_or_default();
    header.array(file, payload)
}

/// The `descr` and `shape` of a header dictionary, parsed whole: exactly the keys
/// `'descr'` (a quoted string), `'fortran_order'` (which must be `False`: C order only)
/// and `'shape'` (a tuple of counts), each once, in any order, then only white space.
fn parse_header(file: &str, h: &str) -> Result<(String, Vec<u64>), Error> {
    let err = |rule: String| bad(file, format!("header {rule}"));
    let mut p = Dict(h);
    p.expect('{').map_err(err)?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    while !p.eat('}') {
        let key = p.string().map_err(err)?;
        p.expect(':').map_err(err)?;
        let slot_taken = match key {
            "descr" => descr
                .replace(p.string().map_err(err)?.to_string())
                .is_some(),
            "fortran_order" => fortran.replace(p.boolean().map_err(err)?).is_some(),
            "shape" => shape.replace(p.tuple().map_err(err)?).is_some(),
            other => {
                return Err(err(format!(
                "has the key {other:?}: a .npy header has exactly descr, fortran_order and shape"
            )))
            }
        };
        if slot_taken {
            return Err(err(format!("has the key {key:?} twice")));
        }
        if !p.eat(',') {
            p.expect('}').map_err(err)?;
            break;
        }
    }
    if !p.0.trim().is_empty() {
        return Err(err(format!("has {:?} after its dictionary", p.0.trim())));
    }
    let missing = |key: &str| err(format!("has no '{key}'"));
    let (descr, shape) = (
        descr.ok_or_else(|| missing("descr"))?,
        shape.ok_or_else(|| missing("shape"))?,
    );
    if fortran.ok_or_else(|| missing("fortran_order"))? {
        return Err(bad(
            file,
            "Fortran-order arrays are not supported (save with C order)",
        ));
    }
    Ok((descr, shape))
}

/// The rest of a header dictionary's text, read token by token (white space skipped).
struct Dict<'a>(&'a str);

impl<'a> Dict<'a> {
    /// Skips white space and takes `c` if it comes next.
    fn eat(&mut self, c: char) -> bool {
        self.0 = self.0.trim_start();
        match self.0.strip_prefix(c) {
            Some(rest) => {
                self.0 = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        match self.eat(c) {
            true => Ok(()),
            false => Err(format!(
                "is not a dictionary: {c:?} expected at {:?}",
                self.head()
            )),
        }
    }

    /// The next few characters, for messages.
    fn head(&self) -> String {
        self.0.chars().take(12).collect()
    }

    /// A string in single or double quotes, without escapes.
    fn string(&mut self) -> Result<&'a str, String> {
        self.0 = self.0.trim_start();
        let quote = self.0.chars().next().filter(|&q| q == '\'' || q == '"');
        let body = quote.and_then(|q| Some((q, self.0[1..].split_once(q)?)));
        match body {
            Some((_, (text, rest))) if !text.contains('\\') => {
                self.0 = rest;
                Ok(text)
            }
            _ => Err(format!("has no quoted string at {:?}", self.head())),
        }
    }

    fn boolean(&mut self) -> Result<bool, String> {
        for (word, value) in [("True", true), ("False", false)] {
            self.0 = self.0.trim_start();
            if let Some(rest) = self.0.strip_prefix(word) {
                self.0 = rest;
                return Ok(value);
            }
        }
        Err(format!("has no True or False at {:?}", self.head()))
    }

    /// A tuple of counts: `()`, `(n,)`, `(n, m)`, ...
    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect('(')?;
        let mut dims = Vec::new();
        while !self.eat(')') {
            self.0 = self.0.trim_start();
            let digits = self.0.len()
                - self
                    .0
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            let n = self.0[..digits]
                .parse::<u64>()
                .map_err(|_| format!("shape entry at {:?} is not a count", self.head()))?;
            self.0 = &self.0[digits..];
            dims.push(n);
            if !self.eat(',') {
                self.expect(')')?;
                break;
            }
        }
        Ok(dims)
    }
}

/// Reads a `.npy` file: a regular file whose length is what its header says, read only
/// once the header is checked (so a huge or endless file is refused, not read).
pub fn read(path: &Path) -> Result<NpyArray, Error> {
    use std::io::Read;
    let name = path.display().to_string();
    let cannot = |e: std::io::Error| bad(&name, format!("cannot be read: {e}"));
    // looked at before it is opened: opening a FIFO waits for a writer
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(bad(&name, "is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(cannot)?;
    let size = file.metadata().map_err(cannot)?;
    let mut file = std::io::BufReader::new(file);
    let mut head = Vec::new();
    (&mut file)
        .take(PREFIX as u64)
        .read_to_end(&mut head)
        .map_err(cannot)?;
    let (start, len) = prefix(&name, &head)?;
    let rest = (start + len).saturating_sub(head.len());
    (&mut file)
        .take(rest as u64)
        .read_to_end(&mut head)
        .map_err(cannot)?;
    let header = decode_header(&name, &head)?;
    let have = size.len().saturating_sub(header.payload_at as u64);
    if have != header.payload_bytes {
        return Err(header.payload_error(&name, have));
    }
    // the header was read to its end, so `head` holds at most its prefix's extra bytes
    let mut payload = head.split_off(header.payload_at.min(head.len()));
    file.take(have).read_to_end(&mut payload).map_err(cannot)?;
    header.array(&name, &payload)
}

/// Writes `a` to `path` atomically.
pub fn write(path: &Path, a: &NpyArray) -> Result<(), Error> {
    let name = path.display().to_string();
    crate::atomic_file::write_bytes(path, &encode(a), |stage, e| {
        bad(&name, format!("cannot be {stage}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `np.save` of `np.arange(6, dtype=np.float32).reshape(2, 3)`, byte for byte: the
    /// dictionary padded with spaces and a newline to a 118-byte header (0x76), so the
    /// payload starts at byte 128.
    #[test]
    fn reads_what_numpy_writes() {
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let mut img = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
        img.extend_from_slice(dict.as_bytes());
        img.resize(127, b' ');
        img.push(b'\n');
        let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        img.extend_from_slice(&data);
        let a = decode("a.npy", &img).unwrap();
        assert_eq!(
            a,
            NpyArray {
                descr: "<f4".into(),
                shape: vec![2, 3],
                data
            }
        );
        assert_eq!(encode(&a), img, "our header is numpy's");
    }

    fn replace(img: &[u8], from: &str, to: &str) -> Vec<u8> {
        let at = img
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        [&img[..at], to.as_bytes(), &img[at + from.len()..]].concat()
    }

    #[test]
    fn rejections_name_the_file_and_the_rule() {
        let good = encode(&NpyArray {
            descr: "<u4".into(),
            shape: vec![3],
            data: vec![0; 12],
        });
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"PK\x03\x04".to_vec(), "magic"),
            ([&good[..6], &[9, 0], &good[8..]].concat(), "version"),
            (good[..20].to_vec(), "truncated header"),
            (good[..good.len() - 1].to_vec(), "payload is 11 bytes"),
            (replace(&good, "<u4", "<f8"), "<f8"),
            // every stored dtype is listed, i64 too, and bf16's raw bits are suggested
            (
                replace(&good, "<u4", "<V2"),
                "\"<V2\" is not one of |i1 |u1 <i2 <u2 <f2 <i4 <u4 <f4 <i8 (a bf16 tensor takes its raw bits as <u2",
            ),
            (replace(&good, "False", "True "), "Fortran"),
            // a header is parsed whole, not searched: keys hidden in values, extra,
            // repeated or missing keys, and text after the dictionary are refused
            (
                replace(
                    &good,
                    "'fortran_order': False",
                    "'x': 'fortran_order': False",
                ),
                "has the key \"x\"",
            ),
            (
                replace(&good, "'descr': '<u4'", "'descr': '<u4', 'descr': '<u4'"),
                "has the key \"descr\" twice",
            ),
            (
                replace(&good, "'shape': (3,), }", "'shape': (3,), } x  "),
                "has \"x\" after its dictionary",
            ),
            (
                replace(&good, "'shape': (3,), ", &" ".repeat(15)),
                "has no 'shape'",
            ),
            (replace(&good, "(3,)", "(3;)"), "')' expected"),
            (replace(&good, "(3,)", "(-3)"), "is not a count"),
            (replace(&good, "'<u4'", "<u4  "), "no quoted string"),
        ];
        for (img, rule) in cases {
            let e = decode("x.npy", &img).unwrap_err().to_string();
            assert!(e.contains("x.npy") && e.contains(rule), "{rule}: {e}");
        }
    }

    #[test]
    fn a_file_is_read_only_once_its_header_says_its_length() {
        let dir = std::env::temp_dir().join(format!("hostsim-npy-len-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = NpyArray {
            descr: "<u4".into(),
            shape: vec![3],
            data: vec![7; 12],
        };
        let path = dir.join("a.npy");
        write(&path, &a).unwrap();
        assert_eq!(read(&path).unwrap(), a);
        // 4 GiB past its header (sparse): refused by its length, not read
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(encode(&a).len() as u64 + (4 << 30)).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("payload is 4294967308 bytes"), "{e}");
        // no header to read
        std::fs::write(&path, b"\x93NUMPY\x01\x00\x40").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("truncated header"), "{e}");
        // a folder or a FIFO is not a file (a FIFO is not even opened: that would wait)
        let fifo = dir.join("f.npy");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.expect("mkfifo runs").success());
        for p in [&dir, &fifo] {
            let e = read(p).unwrap_err().to_string();
            assert!(e.contains("is not a regular file"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        /// Reading a file and decoding its bytes agree, whatever the bytes.
        #[test]
        fn read_agrees_with_decode(bytes in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let good = encode(&NpyArray { descr: "<u2".into(), shape: vec![2, 3], data: (0..12).collect() });
            let mut img = if bytes.len() % 2 == 0 { good } else { bytes };
            img.truncate(cut.max(1));
            let path = std::env::temp_dir().join(format!("hostsim-npy-agree-{}.npy", std::process::id()));
            std::fs::write(&path, &img).unwrap();
            let (r, d) = (read(&path), decode(&path.display().to_string(), &img));
            std::fs::remove_file(&path).unwrap();
            prop_assert_eq!(r.map_err(|e| e.to_string()), d.map_err(|e| e.to_string()));
        }
    }

    #[test]
    fn writes_atomically_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("hostsim-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.npy");
        let a = NpyArray {
            descr: storage_descr(Dtype::Bf16).into(),
            shape: vec![2, 2],
            data: vec![1, 2, 3, 4, 5, 6, 7, 8],
        };
        write(&path, &a).unwrap();
        assert_eq!(read(&path).unwrap(), a);
        assert!(!path.with_extension("npy.partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #[test]
        fn round_trips(d in 0usize..9, shape in proptest::collection::vec(0u64..5, 0..4), seed in any::<u8>()) {
            let dtype = Dtype::ALL[d];
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n * dtype.size() as u64).map(|i| (i as u8).wrapping_mul(seed)).collect();
            let a = NpyArray { descr: storage_descr(dtype).into(), shape, data };
            let img = encode(&a);
            prop_assert_eq!((img.len() - a.data.len()) % 64, 0);
            prop_assert_eq!(decode("p.npy", &img).unwrap(), a);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode("f.npy", &bytes);
        }
    }
}
