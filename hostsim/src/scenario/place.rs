//! Tensors on the fabric: every `[[tensor]]` checked (name, shape, size, space, fit),
//! placed (its `addr`/`partition`, or automatically: aligned, without overlap, inside its
//! space) and given its initial bytes (`zeros`, `iota` or a `.npy` file whose dtype and
//! shape must agree).
//!
//! # Layout
//!
//! A tensor's two-dimensional view is `[shape[0], prod(shape[1..])]`. In HBM it is one
//! contiguous row-major block from `addr`. In SBUF/PSUM row `r` is partition
//! `partition + r`, its elements contiguous from byte `addr` of that partition. Every
//! tensor is an `(partitions, byte range)` rectangle of its space (HBM has one
//! "partition"); two tensors may not share a byte.
//!
//! DMA-side ops (`dma_gather`, `dma_scatter`, `dma_copy`, the table and data of
//! `embedding_update`) see a tensor row-major from its start, so on core such an operand
//! lies in one partition (`shape[0] = 1`); a shape `[1, R, C...]` gives it `R` rows there
//! ([`Placed::row_view`]).
//!
//! Automatic placement goes in file order after the tensors with an explicit `addr`:
//! each takes the lowest [`ALIGN`]-aligned offset (HBM: address) at which its rectangle
//! fits its space and meets no tensor placed before it; an sbuf/psum tensor without
//! `partition` starts at partition 0.

use std::path::Path;

use dma::{AddressMap, Dtype, FabricAddr, Location, Space};

use super::model::{Init, TensorSpec};
use crate::error::Error;
use crate::nki::Tensor;
use crate::npy::{self, NpyArray};

/// The alignment of automatically placed tensors, bytes.
pub const ALIGN: u64 = 64;
/// The largest tensor a scenario may declare (its bytes are held on the host), bytes.
pub const MAX_TENSOR_BYTES: u64 = 1 << 30;

/// A tensor placed on the fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Its index in the scenario's `[[tensor]]` list.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its space.
    pub space: Space,
    /// Its element dtype.
    pub dtype: Dtype,
    /// Its full shape.
    pub shape: Vec<u64>,
    /// `[shape[0], prod(shape[1..])]`.
    pub view: [u32; 2],
    /// HBM: the byte address; SBUF/PSUM: the byte offset inside each partition.
    pub offset: u64,
    /// SBUF/PSUM: the first partition (0 in HBM).
    pub partition: u32,
    /// Declared `init = "uninit"`: the sanitizer flags reads of bytes no op wrote.
    pub uninit: bool,
}

impl Placed {
    /// Bytes of one row of the view.
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.view[1]) * self.dtype.size() as u64
    }

    /// Bytes of the whole tensor.
    pub fn bytes(&self) -> u64 {
        u64::from(self.view[0]) * self.row_bytes()
    }

    /// `(partitions, first byte, end byte)` of the rectangle it occupies.
    fn rect(&self) -> (std::ops::Range<u32>, u64, u64) {
        match self.space {
            Space::Hbm => (0..1, self.offset, self.offset + self.bytes()),
            _ => (
                self.partition..self.partition + self.view[0],
                self.offset,
                self.offset + self.row_bytes(),
            ),
        }
    }

    /// Whether it shares a byte with `other`.
    fn overlaps(&self, other: &Placed) -> bool {
        let (pa, lo_a, hi_a) = self.rect();
        let (pb, lo_b, hi_b) = other.rect();
        self.space == other.space
            && pa.start < pb.end
            && pb.start < pa.end
            && lo_a < hi_b
            && lo_b < hi_a
    }

    /// Its contiguous fabric runs in row-major order: one in HBM, one per partition on
    /// core.
    pub fn runs(&self, map: &AddressMap) -> Result<Vec<(FabricAddr, u64)>, Error> {
        if self.space == Space::Hbm {
            return Ok(vec![(FabricAddr(self.offset), self.bytes())]);
        }
        (0..self.view[0])
            .map(|r| {
                let loc = Location {
                    space: self.space,
                    partition: self.partition + r,
                    offset: self.offset,
                };
                Ok((map.fabric_addr(loc)?, self.row_bytes()))
            })
            .collect()
    }

    /// Writes `bytes` (its contents, row-major) onto `fabric`.
    pub fn write(&self, fabric: &mut dma::Fabric, bytes: &[u8]) -> Result<(), Error> {
        let map = *fabric.map();
        let mut at = 0usize;
        for (addr, len) in self.runs(&map)? {
            let end = at + len as usize;
            let row = bytes.get(at..end).ok_or_else(|| Error::ScenarioTensor {
                index: self.index,
                name: self.name.clone(),
                rule: format!("{} bytes given for its {} bytes", bytes.len(), self.bytes()),
            })?;
            fabric.write(addr, row)?;
            at = end;
        }
        Ok(())
    }

    /// Its contents on `fabric`, row-major.
    pub fn read(&self, fabric: &dma::Fabric) -> Result<Vec<u8>, Error> {
        let map = *fabric.map();
        let mut data = vec![0u8; self.bytes() as usize];
        let mut at = 0usize;
        for (addr, len) in self.runs(&map)? {
            let end = at + len as usize;
            // the runs add up to bytes(), so every row is inside `data`
            if let Some(row) = data.get_mut(at..end) {
                fabric.read(addr, row)?;
            }
            at = end;
        }
        Ok(data)
    }

    /// Writes its contents on `fabric`, row-major, into `out`, a bounded piece at a time
    /// (a tensor may be 1 GiB).
    pub fn stream(&self, fabric: &dma::Fabric, out: &mut impl std::io::Write) -> Result<(), Error> {
        const PIECE: u64 = 1 << 20;
        let mut buf = Vec::new();
        for (addr, len) in self.runs(fabric.map())? {
            for at in (0..len).step_by(PIECE as usize) {
                buf.resize(PIECE.min(len - at) as usize, 0);
                fabric.read(FabricAddr(addr.0 + at), &mut buf)?;
                out.write_all(&buf).map_err(|e| Error::Scenario {
                    what: self.name.clone(),
                    rule: format!("its contents cannot be written: {e}"),
                })?;
            }
        }
        Ok(())
    }

    /// Its fabric start (element 0).
    pub fn start(&self, map: &AddressMap) -> Result<FabricAddr, Error> {
        let loc = Location {
            space: self.space,
            partition: self.partition,
            offset: self.offset,
        };
        match self.space {
            Space::Hbm => Ok(FabricAddr(self.offset)),
            _ => Ok(map.fabric_addr(loc)?),
        }
    }

    /// The tensor as an NKI-level operand (its two-dimensional view).
    pub fn nki(&self, map: &AddressMap) -> Result<Tensor, Error> {
        Ok(Tensor::new(self.start(map)?, self.view, self.dtype))
    }

    /// Its rows as a DMA-side op sees them (row-major from its start): the view, except
    /// that an on-core tensor of shape `[1, R, ...]` (one partition, rank 3 or more) is
    /// `[R, prod(shape[2..])]`.
    pub fn row_view(&self) -> [u32; 2] {
        match self.shape.as_slice() {
            [1, rows, rest @ ..] if self.space != Space::Hbm && !rest.is_empty() => {
                // The tensor's size (at most 2^30 bytes) bounds both below 2^32.
                let rows = *rows as u32;
                [rows, self.view[1] / rows.max(1)]
            }
            _ => self.view,
        }
    }

    /// The tensor as a DMA-side NKI operand ([`Placed::row_view`]).
    pub fn nki_rows(&self, map: &AddressMap) -> Result<Tensor, Error> {
        Ok(Tensor::new(self.start(map)?, self.row_view(), self.dtype))
    }
}

/// The error for tensor `spec` (number `index`) breaking `rule`.
fn tensor_error(index: usize, spec: &TensorSpec, rule: impl Into<String>) -> Error {
    Error::ScenarioTensor {
        index,
        name: spec.name.clone(),
        rule: rule.into(),
    }
}

/// Checks and places every tensor (explicit ones first, then the rest in file order).
pub fn place(map: &AddressMap, specs: &[TensorSpec]) -> Result<Vec<Placed>, Error> {
    let mut placed: Vec<Option<Placed>> = vec![None; specs.len()];
    let mut taken: Vec<Placed> = Vec::with_capacity(specs.len());
    let explicit = specs.iter().enumerate().filter(|(_, s)| s.addr.is_some());
    let automatic = specs.iter().enumerate().filter(|(_, s)| s.addr.is_none());
    for (index, spec) in explicit.chain(automatic) {
        check_name(index, spec, &specs[..index])?;
        let mut t = unplaced(map, index, spec)?;
        t.offset = match spec.addr {
            Some(addr) => explicit_offset(map, index, spec, &t, addr, &taken)?,
            None => free_offset(map, index, spec, &t, &taken)?,
        };
        taken.push(t.clone());
        placed[index] = Some(t);
    }
    Ok(placed.into_iter().flatten().collect())
}

/// Longest tensor name: `NAME.npy.partial` (the output file, while it is written) stays
/// well inside the 255-byte file names of common file systems.
const MAX_NAME: usize = 200;

/// Names are unique, of 1 to [`MAX_NAME`] file-name safe characters (`[A-Za-z0-9_-]`).
fn check_name(index: usize, spec: &TensorSpec, earlier: &[TensorSpec]) -> Result<(), Error> {
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let fits = (1..=MAX_NAME).contains(&spec.name.len());
    if !fits || !spec.name.chars().all(safe) {
        let rule = "a name is 1 to 200 of A-Z a-z 0-9 _ - (it names the output file NAME.npy)";
        return Err(tensor_error(index, spec, rule));
    }
    match earlier.iter().position(|e| e.name == spec.name) {
        Some(j) => Err(tensor_error(
            index,
            spec,
            format!("the name is already taken by tensor {j}"),
        )),
        None => Ok(()),
    }
}

/// The tensor with its shape, size and partitions checked, not yet given an offset.
fn unplaced(map: &AddressMap, index: usize, spec: &TensorSpec) -> Result<Placed, Error> {
    let err = |rule: String| tensor_error(index, spec, rule);
    let (&rows, rest) = spec
        .shape
        .split_first()
        .ok_or_else(|| err("shape must have at least one dimension".into()))?;
    if let Some(d) = spec.shape.iter().position(|&n| n == 0) {
        return Err(err(format!(
            "shape[{d}] = 0: every dimension must be at least 1"
        )));
    }
    let dtype = spec.dtype.0;
    let cols = rest.iter().try_fold(1u64, |a, &n| a.checked_mul(n));
    let bytes = cols
        .and_then(|c| c.checked_mul(rows))
        .and_then(|n| n.checked_mul(dtype.size() as u64))
        .filter(|&b| b <= MAX_TENSOR_BYTES)
        .ok_or_else(|| {
            err(format!(
                "shape {:?} of {dtype} is more than {MAX_TENSOR_BYTES} bytes (the largest scenario tensor)",
                spec.shape
            ))
        })?;
    // bytes <= 2^30 bounds both factors below 2^32.
    let view = [rows as u32, (bytes / rows / dtype.size() as u64) as u32];
    let space = spec.space.0;
    let partition = match (space, spec.partition) {
        (Space::Hbm, Some(p)) => {
            return Err(err(format!(
                "partition = {p}: only sbuf and psum tensors have partitions"
            )))
        }
        (Space::Hbm, None) => 0,
        (_, p) => p.unwrap_or(0),
    };
    let t = Placed {
        index,
        name: spec.name.clone(),
        space,
        dtype,
        shape: spec.shape.clone(),
        view,
        offset: 0,
        partition,
        uninit: spec.init == Init::Uninit,
    };
    check_partitions(map, &t).map_err(err)?;
    Ok(t)
}

/// On core, `partition + shape[0]` partitions and one row must fit the space.
fn check_partitions(map: &AddressMap, t: &Placed) -> Result<(), String> {
    if t.space == Space::Hbm {
        return Ok(());
    }
    let have = map.partitions(t.space);
    let end = u64::from(t.partition) + u64::from(t.view[0]);
    if end > u64::from(have) {
        return Err(format!(
            "partitions {}..={} do not fit {} ({have} partitions; shape[0] is the partition count)",
            t.partition,
            end - 1,
            t.space.name()
        ));
    }
    let room = map.partition_bytes(t.space);
    if t.row_bytes() > room {
        return Err(format!(
            "{} bytes per partition do not fit a {} partition ({room} bytes)",
            t.row_bytes(),
            t.space.name()
        ));
    }
    Ok(())
}

/// The bytes its space holds along the offset axis (HBM: its size; on core: a partition).
fn space_bytes(map: &AddressMap, space: Space) -> u64 {
    map.partition_bytes(space)
}

/// The end byte of `t` at offset `offset`, if it fits its space.
fn fits(map: &AddressMap, t: &Placed, offset: u64) -> bool {
    let len = match t.space {
        Space::Hbm => t.bytes(),
        _ => t.row_bytes(),
    };
    offset
        .checked_add(len)
        .is_some_and(|end| end <= space_bytes(map, t.space))
}

/// An explicit `addr`: element-aligned, inside the space, overlapping nothing placed.
fn explicit_offset(
    map: &AddressMap,
    index: usize,
    spec: &TensorSpec,
    t: &Placed,
    addr: u64,
    taken: &[Placed],
) -> Result<u64, Error> {
    let size = t.dtype.size() as u64;
    if !addr.is_multiple_of(size) {
        let rule = format!("addr = {addr:#x}: must be a multiple of the {size}-byte element");
        return Err(tensor_error(index, spec, rule));
    }
    if !fits(map, t, addr) {
        let rule = format!(
            "addr = {addr:#x}: {} bytes from there do not fit {} ({} bytes{})",
            match t.space {
                Space::Hbm => t.bytes(),
                _ => t.row_bytes(),
            },
            t.space.name(),
            space_bytes(map, t.space),
            if t.space == Space::Hbm {
                ""
            } else {
                " per partition"
            },
        );
        return Err(tensor_error(index, spec, rule));
    }
    let at = Placed {
        offset: addr,
        ..t.clone()
    };
    match taken.iter().find(|o| at.overlaps(o)) {
        Some(o) => Err(tensor_error(
            index,
            spec,
            format!("addr = {addr:#x}: overlaps tensor {} ({})", o.index, o.name),
        )),
        None => Ok(addr),
    }
}

/// The lowest aligned offset where `t` fits and overlaps nothing in `taken`.
fn free_offset(
    map: &AddressMap,
    index: usize,
    spec: &TensorSpec,
    t: &Placed,
    taken: &[Placed],
) -> Result<u64, Error> {
    let (parts, lo, hi) = t.rect();
    let len = hi - lo;
    // Only tensors of its space and partitions can overlap it: their byte ranges by
    // start, each with the furthest end among those up to it, so that a candidate's
    // test is one binary search (a scan of every tensor per candidate was cubic in the
    // tensor count: 13 s for 4000 tensors).
    let mut rivals: Vec<(u64, u64)> = taken
        .iter()
        .filter(|o| o.space == t.space)
        .map(Placed::rect)
        .filter(|(p, ..)| p.start < parts.end && parts.start < p.end)
        .map(|(_, lo, hi)| (lo, hi))
        .collect();
    rivals.sort_unstable();
    let reach: Vec<u64> = rivals
        .iter()
        .scan(0, |far, &(_, hi)| {
            *far = hi.max(*far);
            Some(*far)
        })
        .collect();
    // free: no rival starting before its end reaches past its start
    let free = |off: u64| {
        let before_end = rivals.partition_point(|&(lo, _)| lo < off.saturating_add(len));
        before_end == 0 || reach[before_end - 1] <= off
    };
    let mut candidates: Vec<u64> = std::iter::once(0)
        .chain(
            taken
                .iter()
                .filter_map(|o| o.rect().2.checked_next_multiple_of(ALIGN)),
        )
        .collect();
    candidates.sort_unstable();
    candidates
        .into_iter()
        .find(|&off| fits(map, t, off) && free(off))
        .ok_or_else(|| {
            let rule = format!(
                "no free range of {} bytes left in {} for it",
                t.bytes(),
                t.space.name()
            );
            tensor_error(index, spec, rule)
        })
}

/// Reads the `.npy` file a scenario names (a path relative to the scenario's folder).
pub type NpyReader<'a> = &'a dyn Fn(&Path) -> Result<NpyArray, Error>;

/// The initial bytes of `spec` (`None`: zeros), a `.npy` init read by `read`.
pub fn initial_bytes(
    index: usize,
    spec: &TensorSpec,
    t: &Placed,
    read: NpyReader<'_>,
) -> Result<Option<Vec<u8>>, Error> {
    match &spec.init {
        Init::Zeros => Ok(None),
        Init::Iota => Ok(Some(iota(t.dtype, t.bytes() / t.dtype.size() as u64))),
        Init::Uninit => Ok(Some(vec![0xff; t.bytes() as usize])),
        Init::Npy(file) => {
            // `init` is a keyword or a file: name both where the file is not there
            let a = read(file).map_err(|e| {
                let rule = format!(
                    "init = {:?} must be zeros, iota, uninit or a readable .npy file ({e})",
                    file.display()
                );
                tensor_error(index, spec, rule)
            })?;
            check_npy(index, spec, t, file, &a)?;
            Ok(Some(a.data))
        }
    }
}

/// A `.npy` init must hold the tensor's storage dtype and exactly its shape.
fn check_npy(
    index: usize,
    spec: &TensorSpec,
    t: &Placed,
    file: &Path,
    a: &NpyArray,
) -> Result<(), Error> {
    let want = npy::storage_descr(t.dtype);
    if a.descr != want {
        let rule = format!(
            "init {} holds {} but dtype {} is stored as {want}",
            file.display(),
            a.descr,
            t.dtype
        );
        return Err(tensor_error(index, spec, rule));
    }
    if a.shape != t.shape {
        let rule = format!(
            "init {} has shape {:?} but the tensor's shape is {:?}",
            file.display(),
            a.shape,
            t.shape
        );
        return Err(tensor_error(index, spec, rule));
    }
    Ok(())
}

/// `n` elements `0, 1, 2, ...` of `dtype`, little-endian (integers wrap; floats round to
/// nearest even).
pub fn iota(dtype: Dtype, n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((n as usize).saturating_mul(dtype.size()));
    for i in 0..n {
        match dtype {
            Dtype::U8 | Dtype::I8 => out.push(i as u8),
            Dtype::U16 | Dtype::I16 => out.extend_from_slice(&(i as u16).to_le_bytes()),
            Dtype::U32 | Dtype::I32 => out.extend_from_slice(&(i as u32).to_le_bytes()),
            Dtype::I64 => out.extend_from_slice(&i.to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&half::f16::from_f64(i as f64).to_le_bytes()),
            Dtype::Bf16 => out.extend_from_slice(&half::bf16::from_f64(i as f64).to_le_bytes()),
            Dtype::F32 => out.extend_from_slice(&(i as f32).to_le_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::model::{DtypeName, SpaceName};
    use dma::Generation;

    fn spec(name: &str, space: Space, dtype: Dtype, shape: &[u64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            space: SpaceName(space),
            dtype: DtypeName(dtype),
            shape: shape.to_vec(),
            init: Init::Zeros,
            addr: None,
            partition: None,
        }
    }

    fn at(mut s: TensorSpec, addr: u64) -> TensorSpec {
        s.addr = Some(addr);
        s
    }

    fn map() -> AddressMap {
        AddressMap::new(Generation::Sunda)
    }

    /// First fit as the definition says: the lowest of 0 and every placed tensor's
    /// aligned end that fits and overlaps no placed tensor.
    fn first_fit(map: &AddressMap, t: &Placed, taken: &[Placed]) -> Option<u64> {
        let mut candidates: Vec<u64> = std::iter::once(0)
            .chain(taken.iter().map(|o| o.rect().2.next_multiple_of(ALIGN)))
            .collect();
        candidates.sort_unstable();
        candidates.into_iter().find(|&off| {
            let at = Placed {
                offset: off,
                ..t.clone()
            };
            fits(map, t, off) && !taken.iter().any(|o| at.overlaps(o))
        })
    }

    proptest::proptest! {
        /// Tensors of random spaces, partitions and sizes, placed one by one: each goes
        /// where the definition puts it.
        #[test]
        fn placement_is_first_fit(
            tensors in proptest::collection::vec((0..3usize, 0u32..6, 1u32..4, 1u64..40_000), 1..40),
        ) {
            let m = map();
            let mut taken: Vec<Placed> = Vec::new();
            for (i, &(space, partition, rows, cols)) in tensors.iter().enumerate() {
                let space = [Space::Hbm, Space::Sbuf, Space::Psum][space];
                let cols = if space == Space::Hbm { cols * 64 } else { cols % 2048 + 1 };
                let mut s = spec(&format!("t{i}"), space, Dtype::U8, &[u64::from(rows), cols]);
                if space != Space::Hbm {
                    s.partition = Some(partition);
                }
                let Ok(mut t) = unplaced(&m, i, &s) else { continue };
                let want = first_fit(&m, &t, &taken);
                proptest::prop_assert_eq!(free_offset(&m, i, &s, &t, &taken).ok(), want);
                if let Some(off) = want {
                    t.offset = off;
                    taken.push(t);
                }
            }
        }
    }

    fn rule_of(specs: &[TensorSpec]) -> (usize, String) {
        match place(&map(), specs) {
            Err(Error::ScenarioTensor { index, name, rule }) => {
                assert_eq!(name, specs[index].name);
                (index, rule)
            }
            other => panic!("not a tensor error: {other:?}"),
        }
    }

    #[test]
    fn automatic_placement_is_aligned_and_packs_around_explicit_tensors() {
        let specs = [
            spec("a", Space::Hbm, Dtype::F32, &[10]),
            at(spec("fixed", Space::Hbm, Dtype::U8, &[64]), 64),
            spec("b", Space::Hbm, Dtype::F32, &[3, 2]),
            spec("idx", Space::Sbuf, Dtype::U32, &[1, 100]),
            spec("data", Space::Sbuf, Dtype::F32, &[16, 10]),
            spec("acc", Space::Psum, Dtype::F32, &[2, 4]),
        ];
        let placed = place(&map(), &specs).unwrap();
        let got: Vec<(u64, u32)> = placed.iter().map(|t| (t.offset, t.partition)).collect();
        // a: 40 bytes at 0; fixed holds 64..128; b goes after it; data shares
        // partition 0 with idx (400 bytes), so it starts at the next 64-byte boundary.
        assert_eq!(got, [(0, 0), (64, 0), (128, 0), (0, 0), (448, 0), (0, 0)]);
        assert_eq!(placed[4].view, [16, 10]);
        let runs = placed[4].runs(&map()).unwrap();
        assert_eq!(runs.len(), 16);
        assert_eq!(
            runs[1].0 .0,
            dma::addr::SBUF_BASE + dma::addr::SBUF_STRIDE + 448
        );
        assert_eq!(runs[1].1, 40);
        assert!(placed
            .iter()
            .enumerate()
            .all(|(i, t)| placed[..i].iter().all(|o| !t.overlaps(o))));
    }

    #[test]
    fn one_partition_tensors_have_a_row_view() {
        let specs = [
            spec("d", Space::Sbuf, Dtype::F32, &[1, 5, 3]),
            spec("i", Space::Sbuf, Dtype::U32, &[1, 7]),
            spec("h", Space::Hbm, Dtype::F32, &[1, 5, 3]),
        ];
        let p = place(&map(), &specs).unwrap();
        assert_eq!((p[0].view, p[0].row_view()), ([1, 15], [5, 3]));
        assert_eq!(p[1].row_view(), [1, 7]);
        assert_eq!(p[2].row_view(), [1, 15]);
    }

    #[test]
    fn every_rule_is_rejected_naming_the_tensor() {
        let t = |n: &str| spec(n, Space::Hbm, Dtype::F32, &[4]);
        let cases: Vec<(Vec<TensorSpec>, usize, &str)> = vec![
            (vec![t("x"), t("x")], 1, "already taken by tensor 0"),
            (vec![t("a/b")], 0, "A-Z a-z 0-9 _ -"),
            (vec![t("")], 0, "A-Z a-z 0-9 _ -"),
            (vec![t(&"n".repeat(201))], 0, "1 to 200 of A-Z a-z 0-9 _ -"),
            (
                vec![spec("z", Space::Hbm, Dtype::F32, &[2, 0])],
                0,
                "shape[1] = 0",
            ),
            (
                vec![spec("e", Space::Hbm, Dtype::F32, &[])],
                0,
                "at least one dimension",
            ),
            (
                vec![spec("big", Space::Hbm, Dtype::F32, &[1 << 20, 1 << 9])],
                0,
                "more than 1073741824 bytes",
            ),
            (
                vec![spec("p", Space::Sbuf, Dtype::F32, &[129, 1])],
                0,
                "partitions 0..=128 do not fit sbuf (128 partitions",
            ),
            (
                vec![spec("w", Space::Psum, Dtype::F32, &[1, 4097])],
                0,
                "16388 bytes per partition do not fit a psum partition (16384 bytes)",
            ),
            (
                vec![at(t("m"), 2)],
                0,
                "addr = 0x2: must be a multiple of the 4-byte element",
            ),
            (
                vec![at(t("a"), 0), at(t("b"), 8)],
                1,
                "addr = 0x8: overlaps tensor 0 (a)",
            ),
            (vec![at(t("far"), 32 << 30)], 0, "do not fit hbm"),
            (
                vec![
                    at(spec("s", Space::Sbuf, Dtype::U8, &[1, 196600]), 0),
                    spec("t", Space::Sbuf, Dtype::U8, &[1, 100]),
                ],
                1,
                "no free range of 100 bytes left in sbuf",
            ),
        ];
        for (specs, index, rule) in cases {
            let (i, got) = rule_of(&specs);
            assert_eq!(i, index, "{got}");
            assert!(got.contains(rule), "{rule}: {got}");
        }
        let mut hbm_part = t("h");
        hbm_part.partition = Some(1);
        let (_, got) = rule_of(&[hbm_part]);
        assert_eq!(
            got,
            "partition = 1: only sbuf and psum tensors have partitions"
        );
    }

    #[test]
    fn npy_inits_must_agree_with_the_tensor() {
        let mut s = spec("t", Space::Hbm, Dtype::Bf16, &[2, 3]);
        s.init = Init::Npy("t.npy".into());
        let t = &place(&map(), std::slice::from_ref(&s)).unwrap()[0];
        let file = |descr: &str, shape: &[u64]| {
            let (descr, shape) = (descr.to_string(), shape.to_vec());
            move |_: &Path| {
                Ok(NpyArray {
                    descr: descr.clone(),
                    shape: shape.clone(),
                    data: vec![7; 12],
                })
            }
        };
        let ok = initial_bytes(0, &s, t, &file("<u2", &[2, 3])).unwrap();
        assert_eq!(ok, Some(vec![7; 12]));
        let e = initial_bytes(0, &s, t, &file("<f2", &[2, 3])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor 0 (t): init t.npy holds <f2 but dtype bf16 is stored as <u2"
        );
        let e = initial_bytes(0, &s, t, &file("<u2", &[3, 2])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor 0 (t): init t.npy has shape [3, 2] but the tensor's shape is [2, 3]"
        );
        // a word that is no keyword is a file name: the error names the keywords too
        s.init = Init::from("ones".to_string());
        let e = initial_bytes(0, &s, t, &|p: &Path| crate::npy::read(p)).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("tensor 0 (t): init = \"ones\" must be zeros, iota, uninit or a readable .npy file (ones: cannot be read: "),
            "{e}"
        );
    }

    #[test]
    fn iota_counts_in_the_dtype() {
        assert_eq!(iota(Dtype::U8, 3), [0, 1, 2]);
        assert_eq!(iota(Dtype::I16, 2), [0, 0, 1, 0]);
        assert_eq!(iota(Dtype::F32, 2), [0, 0, 0, 0, 0, 0, 0x80, 0x3f]);
        assert_eq!(iota(Dtype::Bf16, 2), [0, 0, 0x80, 0x3f]);
        assert_eq!(iota(Dtype::F16, 2), [0, 0, 0, 0x3c]);
        assert_eq!(iota(Dtype::U8, 257)[256], 0, "integers wrap");
    }
}
