//! NumPy `.npy` files (format versions 1.0, 2.0 and 3.0): the way tensors enter and
//! leave the model, in the conventions of the people who use it.
//!
//! Supported element types are the fabric's dtypes, little-endian or byte-sized:
//! `|u1 |i1 <u2 <i2 <u4 <i4 <f2 <f4`; `bf16` tensors travel as raw bits in `<u2` arrays
//! (numpy has no bfloat16), so a `.npy` file's dtype is checked against the tensor's
//! *storage* dtype ([`storage_descr`]). C order only (`fortran_order: False`).
//!
//! Reading never trusts the file: the magic, version, header length, header dictionary,
//! shape product and payload length are all checked, and every failure names the file
//! and the rule. Writing is atomic: the bytes go to a temporary file beside the target,
//! which is then renamed over it, so an interrupted write never leaves a truncated file.

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
    let shape = match a.shape.as_slice() {
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.descr
    );
    let v1 = 10 + dict.len() < 65536 - 64;
    let prefix = if v1 { 10 } else { 12 };
    let pad = (64 - (prefix + dict.len() + 1) % 64) % 64;
    let header_len = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(prefix + header_len + a.data.len());
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
    out.extend_from_slice(&a.data);
    out
}

/// Decodes a `.npy` image; `file` names it in errors.
pub fn decode(file: &str, bytes: &[u8]) -> Result<NpyArray, Error> {
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
                .get(8..12)
                .and_then(|b| usize::try_from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()),
            12,
        ),
        _ => {
            return Err(bad(
                file,
                "unsupported .npy version (1.0, 2.0 and 3.0 are read)",
            ))
        }
    };
    let end = len
        .and_then(|l| l.checked_add(start))
        .ok_or_else(|| bad(file, "truncated header"))?;
    let header = bytes
        .get(start..end)
        .ok_or_else(|| bad(file, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(file, "header is not text"))?;
    let (descr, shape) = parse_header(file, header)?;
    let size = descr_size(&descr).ok_or_else(|| {
        bad(
            file,
            format!("dtype {descr:?} is not one of |u1 |i1 <u2 <i2 <u4 <i4 <f2 <f4"),
        )
    })?;
    let count = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let want = count
        .and_then(|c| c.checked_mul(size as u64))
        .ok_or_else(|| bad(file, "shape overflows"))?;
    let data = bytes.get(end..).unwrap_or_default();
    if data.len() as u64 != want {
        return Err(bad(
            file,
            format!(
                "payload is {} bytes but shape {shape:?} of {descr} needs {want}",
                data.len()
            ),
        ));
    }
    Ok(NpyArray {
        descr,
        shape,
        data: data.to_vec(),
    })
}

/// The `descr` and `shape` of a header dictionary; C order is required.
fn parse_header(file: &str, h: &str) -> Result<(String, Vec<u64>), Error> {
    let value = |key: &str| -> Result<&str, Error> {
        let at = h
            .find(&format!("'{key}':"))
            .ok_or_else(|| bad(file, format!("header has no '{key}'")))?;
        Ok(h[at + key.len() + 3..].trim_start())
    };
    let descr = value("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| bad(file, "descr is not a quoted string"))?;
    if !value("fortran_order")?.starts_with("False") {
        return Err(bad(
            file,
            "Fortran-order arrays are not supported (save with C order)",
        ));
    }
    let shape = value("shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad(file, "shape is not a tuple"))?;
    let dims = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| bad(file, format!("shape entry {s:?} is not a count")))
        })
        .collect::<Result<Vec<u64>, Error>>()?;
    Ok((descr.to_string(), dims))
}

/// Reads a `.npy` file.
pub fn read(path: &Path) -> Result<NpyArray, Error> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| bad(&name, format!("cannot be read: {e}")))?;
    decode(&name, &bytes)
}

/// Writes a `.npy` file atomically (a temporary file beside it, then a rename).
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
            (replace(&good, "False", "True "), "Fortran"),
        ];
        for (img, rule) in cases {
            let e = decode("x.npy", &img).unwrap_err().to_string();
            assert!(e.contains("x.npy") && e.contains(rule), "{rule}: {e}");
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
