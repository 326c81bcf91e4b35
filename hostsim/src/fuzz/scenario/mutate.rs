//! What `fuzz --scenario` changes in a user's scenario, and how a change is applied.
//!
//! A [`Mutation`] is a list of edits to the original: index values at positions of the
//! index tensors, the OOB policy and `unique_indices` of ops, the bounds of `isa` ops,
//! the generation, and which ops are kept. Everything not edited is the user's (an `isa`
//! op's bound and shape registers only ever shrink). Edits are
//! drawn edge-biased ([`Base::draw`]): bound-1, bound, bound+1 for every bound the op
//! meets (the rows and dims of the tensors it names, its bound registers), 2^31-1, 2^31,
//! u32::MAX, negative i32s, repeats of another position, and now and then a run of
//! positions made all equal, sorted or reversed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dma::{Dtype, Generation};

use super::super::Rng;
use crate::error::Error;
use crate::isa::text::operand_addresses;
use crate::npy::{storage_descr, NpyArray};
use crate::scenario::model::{Init, Oob, OpSpec, Scenario};
use crate::scenario::place::Placed;
use crate::scenario::sanitize::Owners;
use crate::scenario::{self, Loaded, Overrides, Prepared};

/// An index tensor of the scenario: the values it starts with and the edge values
/// worth trying in it.
#[derive(Clone, Debug)]
pub struct IndexTensor {
    /// Its scenario index.
    pub tensor: usize,
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// The user's values, as signed integers of the dtype.
    pub original: Vec<i64>,
    /// The edge values to draw from.
    pub edges: Vec<i64>,
    /// The positions the ops read, in the order an `.ap()` view reads them, where every
    /// op reads this tensor through views (`vector_offset = { tensor, ap, offset }`);
    /// `None` where some op reads it whole. Edits land only on positions read.
    pub read: Option<Vec<usize>>,
}

/// One edit of a [`Mutation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Index tensor `k` (of [`Base::indices`]) holds `value` at `position`.
    Value {
        k: usize,
        position: usize,
        value: i64,
    },
    /// Op `op`'s OOB policy.
    Oob { op: usize, skip: bool },
    /// Op `op`'s `unique_indices`.
    Unique { op: usize, unique: bool },
    /// The `bounds[k]` of `isa` op `op`.
    Bound { op: usize, k: usize, bound: u64 },
    /// Extent `d` (X, Y, Z, W) of the `shapes[k]` of `isa` op `op`.
    Shape {
        op: usize,
        k: usize,
        d: usize,
        extent: u32,
    },
}

/// A case: the generation, the edits, the ops kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    pub generation: Generation,
    pub edits: Vec<Edit>,
    /// `keep[i]`: op `i` runs.
    pub keep: Vec<bool>,
}

/// The user's scenario, its `.npy` arrays and its index tensors.
pub struct Base {
    pub loaded: Loaded,
    /// Every `.npy` init, by the path the scenario gives.
    arrays: BTreeMap<PathBuf, NpyArray>,
    pub indices: Vec<IndexTensor>,
    /// The generations cases draw from.
    pub generations: Vec<Generation>,
    /// The generations asked for on which the user's scenario is invalid, and why.
    pub skipped: Vec<(Generation, String)>,
}

impl Base {
    /// Reads the scenario's `.npy` files and finds its index tensors. The generations
    /// the user's own scenario is invalid on are left out, with why, in
    /// [`Base::skipped`]; if it is valid on none, the first one's error is returned.
    pub fn new(loaded: Loaded, generations: Vec<Generation>) -> Result<Base, Error> {
        let mut arrays = BTreeMap::new();
        for t in &loaded.scenario.tensors {
            if let Init::Npy(path) = &t.init {
                arrays.insert(path.clone(), crate::npy::read(&loaded.dir.join(path))?);
            }
        }
        let mut base = Base {
            loaded,
            arrays,
            indices: Vec::new(),
            generations: Vec::new(),
            skipped: Vec::new(),
        };
        let mut first: Option<Result<Prepared, Error>> = None;
        for g in generations {
            let p = base.prepare_on(&base.loaded.scenario.clone(), g, &base.arrays);
            match &p {
                Ok(_) => base.generations.push(g),
                Err(e) => base.skipped.push((g, e.to_string())),
            }
            if first.as_ref().is_none_or(|f| f.is_err() && p.is_ok()) {
                first = Some(p);
            }
        }
        let p = first.ok_or(Error::FuzzOption {
            option: "--generation",
            rule: "names no generation",
        })??;
        base.indices = index_tensors(&base.loaded.scenario, &p)?;
        Ok(base)
    }

    /// The scenario an unedited case runs.
    pub fn original(&self, generation: Generation) -> Mutation {
        Mutation {
            generation,
            edits: Vec::new(),
            keep: vec![true; self.loaded.scenario.ops.len()],
        }
    }

    /// Draws a case from `rng`.
    pub fn draw(&self, rng: &mut Rng) -> Mutation {
        #[cfg(test)]
        plant::draw();
        let generation = rng
            .pick_from(&self.generations)
            .unwrap_or(Generation::Cayman);
        let mut m = self.original(generation);
        if !self.indices.is_empty() {
            match rng.chance(12) {
                true => self.draw_run(rng, &mut m),
                false => {
                    for _ in 0..1 + rng.below(3) {
                        self.draw_value(rng, &mut m);
                    }
                }
            }
        }
        let ops = self.loaded.scenario.ops.len() as u64;
        if ops > 0 && rng.chance(25) {
            let op = rng.below(ops) as usize;
            m.edits.extend(self.draw_option(rng, op));
        }
        m
    }

    /// One position of one index tensor set to an edge value, a repeat or a random one.
    fn draw_value(&self, rng: &mut Rng, m: &mut Mutation) {
        let k = rng.below(self.indices.len() as u64) as usize;
        let t = &self.indices[k];
        let n = t.original.len() as u64;
        let position = t.position(rng.below(t.read_count() as u64) as usize);
        let value = match rng.below(10) {
            0..=6 => rng.pick_from(&t.edges).unwrap_or(0),
            7 | 8 => t.original[rng.below(n) as usize],
            _ => rng.below(t.edges.iter().copied().max().unwrap_or(1).max(1) as u64) as i64,
        };
        m.edits.push(Edit::Value { k, position, value });
    }

    /// A run of up to 16 positions made all equal, sorted or reversed.
    fn draw_run(&self, rng: &mut Rng, m: &mut Mutation) {
        let k = rng.below(self.indices.len() as u64) as usize;
        let t = &self.indices[k];
        let n = t.read_count();
        let start = rng.below(n as u64) as usize;
        let end = (start + 2 + rng.below(15) as usize).min(n);
        let positions: Vec<usize> = (start..end).map(|i| t.position(i)).collect();
        let mut run: Vec<i64> = positions.iter().map(|&p| t.original[p]).collect();
        match rng.below(3) {
            0 => run.fill(rng.pick_from(&t.edges).unwrap_or(0)),
            1 => run.sort_unstable(),
            _ => run.reverse(),
        }
        for (position, value) in positions.into_iter().zip(run) {
            m.edits.push(Edit::Value { k, position, value });
        }
    }

    /// A change of op `op`'s options that its kind has (none for the kinds without any). An
    /// `isa` op's bound or shape
    /// extent only ever shrinks: a looser register than the user's would make an overrun
    /// of the fuzzer's own, not of the user's kernel.
    fn draw_option(&self, rng: &mut Rng, op: usize) -> Option<Edit> {
        let spec = &self.loaded.scenario.ops[op];
        if let OpSpec::Isa(o) = spec {
            if !o.shapes.is_empty() && (o.bounds.is_empty() || rng.chance(50)) {
                let k = rng.below(o.shapes.len() as u64) as usize;
                let d = rng.below(4) as usize;
                let was = u64::from(o.shapes[k].xyzw[d]).max(1);
                let extent = 1 + rng.below(was) as u32;
                return Some(Edit::Shape { op, k, d, extent });
            }
            if !o.bounds.is_empty() {
                let k = rng.below(o.bounds.len() as u64) as usize;
                let b = o.bounds[k].bound;
                let edges = self.indices.iter().flat_map(|t| t.edges.iter().copied());
                let mut choices: Vec<u64> = vec![b.saturating_sub(1), b / 2, 0, 1];
                choices.extend(
                    edges
                        .filter_map(|r| u64::try_from(r).ok())
                        .filter(|&r| r <= b),
                );
                let bound = rng.pick_from(&choices).unwrap_or(b);
                return Some(Edit::Bound { op, k, bound });
            }
        }
        let has_unique = matches!(spec, OpSpec::DmaScatter(_) | OpSpec::DmaCopy(_));
        let has_oob =
            has_unique || matches!(spec, OpSpec::DmaGather(_) | OpSpec::DmaGatherTranspose(_));
        match (has_oob, has_unique && rng.chance(50)) {
            (_, true) => Some(Edit::Unique {
                op,
                unique: rng.chance(50),
            }),
            (true, false) => Some(Edit::Oob {
                op,
                skip: rng.chance(50),
            }),
            (false, false) => None,
        }
    }

    /// The scenario `m` makes, with its `.npy` arrays by the paths it names (every
    /// `.npy` init renamed `<tensor>.npy`, the edited index tensors among them).
    pub fn apply(&self, m: &Mutation) -> (Scenario, BTreeMap<PathBuf, NpyArray>) {
        let mut s = self.loaded.scenario.clone();
        s.generation.0 = m.generation;
        let mut arrays = BTreeMap::new();
        for t in &mut s.tensors {
            if let Init::Npy(path) = &t.init {
                let file = PathBuf::from(format!("{}.npy", t.name));
                if let Some(a) = self.arrays.get(path) {
                    arrays.insert(file.clone(), a.clone());
                }
                t.init = Init::Npy(file);
            }
        }
        let mut values: Vec<Vec<i64>> = self.indices.iter().map(|t| t.original.clone()).collect();
        for e in &m.edits {
            match *e {
                Edit::Value { k, position, value } => values[k][position] = value,
                Edit::Oob { op, skip } => set_oob(&mut s.ops[op], skip),
                Edit::Unique { op, unique } => set_unique(&mut s.ops[op], unique),
                Edit::Bound { op, k, bound } => {
                    if let OpSpec::Isa(o) = &mut s.ops[op] {
                        o.bounds[k].bound = bound;
                    }
                }
                Edit::Shape { op, k, d, extent } => {
                    if let OpSpec::Isa(o) = &mut s.ops[op] {
                        o.shapes[k].xyzw[d] = extent;
                    }
                }
            }
        }
        for (t, v) in self.indices.iter().zip(&values) {
            if *v != t.original {
                let file = PathBuf::from(format!("{}.npy", t.name));
                arrays.insert(file.clone(), t.array(v));
                s.tensors[t.tensor].init = Init::Npy(file);
            }
        }
        let kept = s.ops.into_iter().zip(&m.keep).filter(|(_, k)| **k);
        s.ops = kept.map(|(o, _)| o).collect();
        (s, arrays)
    }

    /// The scenario `m` makes, prepared (`None` when the edits make a scenario the CLI
    /// would refuse).
    pub fn prepare(&self, m: &Mutation) -> Option<(Scenario, Prepared)> {
        #[cfg(test)]
        plant::prepare(m);
        let (s, arrays) = self.apply(m);
        let p = self.prepare_on(&s, m.generation, &arrays).ok()?;
        Some((s, p))
    }

    fn prepare_on(
        &self,
        s: &Scenario,
        generation: Generation,
        arrays: &BTreeMap<PathBuf, NpyArray>,
    ) -> Result<Prepared, Error> {
        let loaded = Loaded {
            scenario: s.clone(),
            dir: self.loaded.dir.clone(),
            file: self.loaded.file.clone(),
        };
        let over = Overrides {
            generation: Some(generation),
            ..Overrides::default()
        };
        let read = |path: &Path| {
            arrays.get(path).cloned().ok_or_else(|| Error::Scenario {
                what: path.display().to_string(),
                rule: "no such .npy array".into(),
            })
        };
        scenario::prepare_with(&loaded, over, &read)
    }

    /// The edits of `m` in words, one per line (`idx[3]: 500 -> 1500`).
    pub fn describe(&self, m: &Mutation) -> Vec<String> {
        m.edits
            .iter()
            .map(|e| match *e {
                Edit::Value { k, position, value } => {
                    let t = &self.indices[k];
                    let was = t.original[position];
                    format!("{}[{}]: {was} -> {value}", t.name, t.at(position))
                }
                Edit::Oob { op, skip } => {
                    format!("op {op}: oob = {}", if skip { "skip" } else { "error" })
                }
                Edit::Unique { op, unique } => format!("op {op}: unique_indices = {unique}"),
                Edit::Bound { op, k, bound } => format!("op {op}: bounds[{k}].bound = {bound}"),
                Edit::Shape { op, k, d, extent } => {
                    format!("op {op}: shapes[{k}].xyzw[{d}] = {extent}")
                }
            })
            .collect()
    }
}

impl IndexTensor {
    /// How many positions the ops read.
    fn read_count(&self) -> usize {
        self.read.as_ref().map_or(self.original.len(), Vec::len)
    }

    /// The tensor position of the `i`-th position read.
    fn position(&self, i: usize) -> usize {
        self.read.as_ref().map_or(i, |r| r[i])
    }

    /// Position `p` as NKI indexes the tensor (`[p0, p1]`).
    fn at(&self, p: usize) -> String {
        let mut rest = p as u64;
        let mut idx = vec![0; self.shape.len()];
        for (d, &n) in self.shape.iter().enumerate().rev() {
            idx[d] = rest % n.max(1);
            rest /= n.max(1);
        }
        let idx: Vec<String> = idx.iter().map(u64::to_string).collect();
        idx.join(", ")
    }

    /// `values` as this tensor's `.npy` array (each truncated to the dtype).
    fn array(&self, values: &[i64]) -> NpyArray {
        let size = self.dtype.size();
        let data = values
            .iter()
            .flat_map(|v| v.to_le_bytes().into_iter().take(size))
            .collect();
        NpyArray {
            descr: storage_descr(self.dtype).to_string(),
            shape: self.shape.clone(),
            data,
        }
    }
}

fn set_oob(op: &mut OpSpec, skip: bool) {
    let oob = if skip { Oob::Skip } else { Oob::Error };
    match op {
        OpSpec::DmaGather(o) | OpSpec::DmaScatter(o) => o.oob = oob,
        OpSpec::DmaGatherTranspose(o) => o.oob = oob,
        OpSpec::DmaCopy(o) => o.oob = Some(oob),
        _ => {}
    }
}

fn set_unique(op: &mut OpSpec, unique: bool) {
    match op {
        OpSpec::DmaScatter(o) => o.unique_indices = Some(unique),
        OpSpec::DmaCopy(o) => o.unique_indices = Some(unique),
        _ => {}
    }
}

/// The tensors some op reads indices from (the `index`, `vector_offset` and
/// `scalar_offset` fields; an `isa` op's `*idx*` / `*index*` address fields), with the
/// edge values of the ops that read them.
fn index_tensors(s: &Scenario, p: &Prepared) -> Result<Vec<IndexTensor>, Error> {
    let map = dma::AddressMap::new(p.generation);
    let fabric = p.initial_fabric()?;
    let owners = Owners::new(p)?;
    let mut bounds: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (spec, op) in s.ops.iter().zip(&p.ops) {
        let named: Vec<usize> = op.named.clone();
        let mut index: Vec<usize> = spec
            .operands()
            .iter()
            .filter(|(f, _)| f.contains("index") || f.contains("offset"))
            .filter_map(|(_, n)| p.tensors.iter().position(|t| t.name == *n))
            .collect();
        let mut meets: Vec<u64> = named
            .iter()
            .filter(|t| !index.contains(t))
            .flat_map(|&t| p.tensors[t].shape.iter().copied())
            .collect();
        if let OpSpec::Isa(o) = spec {
            meets.extend(o.bounds.iter().map(|b| b.bound));
            for inst in &op.lowered.instructions {
                let addrs = operand_addresses(inst, &map);
                let idx = addrs
                    .iter()
                    .filter(|(f, _)| f.contains("idx") || f.contains("index"));
                index.extend(idx.filter_map(|(_, a)| owners.owner(a.0)));
                let data = addrs.iter().filter_map(|(_, a)| owners.owner(a.0));
                let shapes: Vec<u64> = data
                    .filter(|t| !index.contains(t))
                    .flat_map(|t| p.tensors[t].shape.clone())
                    .collect();
                meets.extend(shapes);
            }
        }
        for t in index {
            bounds.entry(t).or_default().extend(meets.iter().copied());
        }
    }
    bounds
        .into_iter()
        .filter(|(t, _)| !p.tensors[*t].dtype.is_float())
        .map(|(t, meets)| index_tensor(p, &fabric, t, &meets))
        .collect()
}

/// The positions of tensor `t` the ops read when every op that reads it as indices does
/// so through `.ap()` views, in the order the views read them (each once).
fn viewed(p: &Prepared, t: usize) -> Option<Vec<usize>> {
    let name = &p.tensors[t].name;
    let mut read = Vec::new();
    for op in p.ops.iter().filter(|op| op.named.contains(&t)) {
        let sides = op.lowered.ap_dmas.iter().flat_map(|d| [&d.src, &d.dst]);
        let mut views = sides
            .filter_map(|s| s.vector_offset.as_ref())
            .filter(|v| v.tensor.name == *name)
            .peekable();
        // read whole, or otherwise (a data operand, a scalar, an ISA index field)
        views.peek()?;
        for v in views {
            v.ap.as_ref()?;
            let n = v.dims().iter().map(|d| d.num as usize).product::<usize>();
            read.extend((0..n as u32).map(|k| v.element(k) as usize));
        }
    }
    let mut seen = std::collections::HashSet::new();
    read.retain(|e| seen.insert(*e));
    (!read.is_empty()).then_some(read)
}

fn index_tensor(
    p: &Prepared,
    fabric: &dma::Fabric,
    t: usize,
    meets: &[u64],
) -> Result<IndexTensor, Error> {
    let placed = &p.tensors[t];
    let original = values(placed, fabric)?;
    let mut edges: Vec<i64> = vec![
        0,
        1,
        (1 << 31) - 1,
        1 << 31,
        u32::MAX.into(),
        -1,
        -(1 << 31),
    ];
    for &b in meets {
        let b = b as i64;
        edges.extend([b - 1, b, b + 1]);
    }
    if placed.dtype == Dtype::I64 {
        // an int64 scalar_offset: past 32 bits, where an i32 read would wrap back
        edges.extend([i64::MIN, i64::MAX, 1 << 32, (1 << 32) + 1]);
    }
    edges.sort_unstable();
    edges.dedup();
    Ok(IndexTensor {
        tensor: t,
        name: placed.name.clone(),
        dtype: placed.dtype,
        shape: placed.shape.clone(),
        original,
        edges,
        read: viewed(p, t),
    })
}

/// The values of integer tensor `t` on `fabric` (row-major), sign-extended by its dtype.
pub fn values(t: &Placed, fabric: &dma::Fabric) -> Result<Vec<i64>, Error> {
    let bytes = t.read(fabric)?;
    let size = t.dtype.size();
    Ok(bytes
        .chunks_exact(size)
        .map(|c| signed(t.dtype, c))
        .collect())
}

/// The little-endian element `c` of `dtype` as a signed integer (unsigned dtypes
/// zero-extended).
fn signed(dtype: Dtype, c: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b[..c.len()].copy_from_slice(c);
    let v = u64::from_le_bytes(b);
    let bits = 8 * c.len() as u32;
    match matches!(dtype, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64) {
        true => ((v << (64 - bits)) as i64) >> (64 - bits),
        false => v as i64,
    }
}

/// Planted bugs for the tests, per thread (run the fuzzer on one job): a draw that
/// panics, and a preparation that panics on any edited scenario.
#[cfg(test)]
pub(crate) mod plant {
    use std::cell::Cell;

    thread_local! {
        pub static DRAW_PANICS: Cell<bool> = const { Cell::new(false) };
        pub static EDITED_PANICS: Cell<bool> = const { Cell::new(false) };
    }

    pub fn draw() {
        assert!(!DRAW_PANICS.with(Cell::get), "planted: the draw fails");
    }

    pub fn prepare(m: &super::Mutation) {
        let planted = EDITED_PANICS.with(Cell::get) && !m.edits.is_empty();
        assert!(!planted, "planted: an edited scenario's preparation fails");
    }
}
