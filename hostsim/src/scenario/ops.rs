//! Scenario ops checked and lowered to ISA instruction streams before anything runs:
//! operand names resolved, the scenario's own rules applied (DMA-side operands in one
//! region, `dma_copy` patterns inside their tensors), then the `crate::nki` lowering
//! (which applies the op's NKI rules and validates every instruction for the generation).
//! An `isa` op is decoded from its hex or its fields by name (`crate::isa::text`) and
//! validated the same way.

use dma::{AddressMap, Dtype, Generation, Space};

use smallvec::SmallVec;

use super::model::{ApSpec, Compute, DmaCopy, IsaOp, Oob, OpSpec, RowDma};
use super::place::Placed;
use crate::error::Error;
use crate::isa::{self, BoundRegisters, Instruction};
use crate::nki::view;
use crate::nki::{
    self, ApDim, ApOptions, ApSide, ApTensor, BoundSetting, DgeMode, DmaOptions, IndexAp, Lowered,
    ShapeSetting,
};
use crate::runtime::{self, Mechanism};

/// An op ready to run: its lowered instruction stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedOp {
    /// Its index in the scenario's `[[op]]` list.
    pub index: usize,
    /// Its kind (`dma_gather`, ...).
    pub kind: &'static str,
    /// Its label (`name`), if any.
    pub name: Option<String>,
    /// ` field=tensor` pairs (each after a space), for messages.
    pub operands: String,
    /// The tensors its fields name (their scenario indices; none for an `isa` op).
    pub named: Vec<usize>,
    /// The instructions and the bound and shape registers they read.
    pub lowered: Lowered,
}

/// Checks and lowers every op of a scenario, in order, each instruction on a route that
/// `mechanism` can run it on.
pub fn prepare(
    (generation, mechanism): (Generation, Mechanism),
    ops: &[OpSpec],
    tensors: &[Placed],
) -> Result<Vec<PreparedOp>, Error> {
    let map = AddressMap::new(generation);
    ops.iter()
        .enumerate()
        .map(|(index, op)| prepare_op((&map, mechanism), index, op, tensors))
        .collect()
}

/// Checks and lowers `op`, number `index` of its scenario, over the placed `tensors`
/// Why `name` cannot label an op (it is shown in the run table, `explain` and errors),
/// if it cannot.
fn label_fault(name: &str) -> Option<String> {
    let chars = name.chars().count();
    let fits = (1..=200).contains(&chars) && !name.chars().any(char::is_control);
    (!fits).then(|| {
        format!("name = {name:?}: a label is 1 to 200 characters, none a control character")
    })
}

/// (what [`prepare`] does for each op; a session that adds ops one at a time calls it).
pub fn prepare_op(
    (map, mechanism): (&AddressMap, Mechanism),
    index: usize,
    op: &OpSpec,
    tensors: &[Placed],
) -> Result<PreparedOp, Error> {
    let kind = op.kind();
    if let Some(rule) = op.name().and_then(label_fault) {
        return Err(Error::ScenarioOp {
            index,
            op: kind,
            name: String::new(),
            rule,
        });
    }
    let name = op
        .name()
        .map_or_else(String::new, |n| format!(" name={n:?}"));
    let pairs = op.operands();
    let pairs = pairs.iter().map(|(f, t)| format!(" {f}={t}"));
    let operands: String = std::iter::once(name.clone()).chain(pairs).collect();
    let cx = Cx {
        map,
        index,
        kind,
        name,
        tensors,
    };
    let routed = |lowered: Lowered| {
        let mut opcodes = lowered.instructions.iter().map(|i| i.opcode());
        opcodes.try_for_each(|o| runtime::check_route(map.generation(), mechanism, o))?;
        if mechanism == Mechanism::Pool && !lowered.ap_dmas.is_empty() {
            return Err(crate::pool::kernel_missing_ap());
        }
        // an access-pattern copy is one DGE request on every route, made by a DGE the
        // generation has
        for c in &lowered.ap_dmas {
            crate::dge_route::check_ap_request(map, c, kind)?;
            c.dge.check_generation(kind, map.generation())?;
        }
        Ok(lowered)
    };
    let lowered = cx.lower(op).and_then(routed).map_err(|e| match e {
        e @ (Error::ScenarioOp { .. } | Error::ScenarioTensor { .. }) => e,
        e => Error::ScenarioOpInvalid {
            index,
            op: kind,
            operands: match &e {
                Error::NkiArgument { arg, .. } if arg.contains("shape") => {
                    cx.name.clone() + &cx.views(op)
                }
                _ => operands.clone() + &reshapes(op),
            },
            source: Box::new(e),
        },
    })?;
    let fields = op.operands();
    let named = tensors
        .iter()
        .filter(|t| fields.iter().any(|(_, n)| *n == t.name));
    Ok(PreparedOp {
        name: op.name().map(str::to_string),
        index,
        kind,
        operands,
        named: named.map(|t| t.index).collect(),
        lowered,
    })
}

/// How an op's sides see their tensors where not as declared (a side's `shape` or
/// `dtype`, a transpose's `src_shape`), for its errors: ` (src seen as [4, 128, 64])`.
fn reshapes(op: &OpSpec) -> String {
    let seen = |field: &str, spec: &ApSpec| match spec {
        ApSpec::Pattern(p) if p.shape.is_some() || p.dtype.is_some() => {
            let dtype = p.dtype.as_ref().map(|d| d.0.to_string());
            let shape = p.shape.as_ref().map(|s| format!("{s:?}"));
            let seen: Vec<String> = dtype.into_iter().chain(shape).collect();
            Some(format!("{field} seen as {}", seen.join(" ")))
        }
        _ => None,
    };
    let views: Vec<String> = match op {
        OpSpec::DmaCopy(o) => [seen("src", &o.src), seen("dst", &o.dst)]
            .into_iter()
            .flatten()
            .collect(),
        OpSpec::DmaGatherTranspose(o) => o
            .src_shape
            .iter()
            .map(|s| format!("src seen as {s:?}"))
            .collect(),
        _ => Vec::new(),
    };
    match views.is_empty() {
        true => String::new(),
        false => format!(" ({})", views.join(", ")),
    }
}

/// What lowering one op needs.
struct Cx<'a> {
    map: &'a AddressMap,
    index: usize,
    kind: &'static str,
    /// ` name="label"`, or empty.
    name: String,
    tensors: &'a [Placed],
}

impl Cx<'_> {
    fn error(&self, rule: impl Into<String>) -> Error {
        Error::ScenarioOp {
            index: self.index,
            op: self.kind,
            name: self.name.clone(),
            rule: rule.into(),
        }
    }

    /// `op`'s operands for an error about their shapes: NKI-level ops see each as a
    /// two-dimensional `[rows, cols]` view (DMA-side ones [`Placed::row_view`]), so a
    /// tensor whose view differs from its shape is shown with both (` src=t [1, 6, 4] as
    /// [6, 4]`).
    fn views(&self, op: &OpSpec) -> String {
        let dma_side = matches!(
            op,
            OpSpec::DmaGather(_) | OpSpec::DmaScatter(_) | OpSpec::EmbeddingUpdate(_)
        );
        let operand = |(field, name): &(&str, &str)| {
            let Some(t) = self.tensors.iter().find(|t| t.name == *name) else {
                return format!(" {field}={name}");
            };
            let view = if dma_side { t.row_view() } else { t.view };
            match t.shape == view.map(u64::from) {
                true => format!(" {field}={name}"),
                false => format!(" {field}={name} {:?} as {view:?}", t.shape),
            }
        };
        op.operands().iter().map(operand).collect()
    }

    /// The tensor named `name` by field `field`.
    fn tensor(&self, field: &str, name: &str) -> Result<&Placed, Error> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| self.error(format!("{field} = {name:?}: no tensor has that name")))
    }

    /// A DMA-side operand: row-major in one region, so on core one partition.
    fn dma_side(&self, field: &str, name: &str) -> Result<&Placed, Error> {
        let t = self.tensor(field, name)?;
        if t.space != Space::Hbm && t.view[0] != 1 {
            return Err(self.error(format!(
                "{field} = {name:?}: a DMA-side operand in {} must lie in one partition (shape[0] = 1; its rows are row-major inside the partition), not {}",
                t.space.name(),
                t.view[0]
            )));
        }
        Ok(t)
    }

    /// A DMA-side operand as its row view.
    fn rows(&self, field: &str, name: &str) -> Result<nki::Tensor, Error> {
        self.dma_side(field, name)?.nki_rows(self.map)
    }

    fn nki(&self, t: &Placed) -> Result<nki::Tensor, Error> {
        t.nki(self.map)
    }

    /// `dma_gather` (`scatter` false) or `dma_scatter`.
    fn row_dma(&self, o: &RowDma, scatter: bool) -> Result<Lowered, Error> {
        // NKI's default (true) may be spelt out on a gather, as on any copy
        if let (false, Some(false)) = (scatter, o.unique_indices) {
            return Err(self.error(
                "unique_indices = false: applies to dma_scatter only (a gather writes each destination row once)",
            ));
        }
        let unique = o.unique_indices.unwrap_or(true);
        // A plain scatter under unique_indices lands last-index-wins with a warning, which
        // the access-pattern DMA gives (DMA_INDIRECT without non_unique_dst_idx refuses
        // duplicates).
        let plain_unique = scatter && unique && o.compute == Compute::None;
        if plain_unique || !self.isa_rows(&[("src", &o.src), ("dst", &o.dst)], &o.index)? {
            let opts = ApOptions {
                op: o.compute.into(),
                oob: o.oob.into(),
                unique_indices: unique,
                dge: DgeMode::Chosen,
            };
            return self.rows_ap([&o.src, &o.index, &o.dst], scatter, opts);
        }
        let (s, d) = (self.rows("src", &o.src)?, self.rows("dst", &o.dst)?);
        let i = self.nki(self.tensor("index", &o.index)?)?;
        let opts = row_options(o.compute.into(), o.oob.into(), unique);
        let g = self.map.generation();
        match scatter {
            true => nki::dma_scatter(g, &s, &i, &d, opts),
            false => nki::dma_gather(g, &s, &i, &d, opts),
        }
    }

    /// Whether a row op fits its ISA instruction: a `[1, N]` u32 index vector in SBUF
    /// partition 0 and DMA-side operands in HBM or one partition. Otherwise the op is an
    /// access-pattern DMA on the software DGE ([`Cx::rows_ap`]).
    fn isa_rows(&self, operands: &[(&str, &str)], index: &str) -> Result<bool, Error> {
        let mut fits = self.index_vector(index)?;
        for (field, name) in operands {
            let t = self.tensor(field, name)?;
            fits &= t.space == Space::Hbm || t.view[0] == 1;
        }
        Ok(fits)
    }

    /// Whether `index` is what DMA_INDIRECT reads: a `[1, N]` u32 vector in SBUF
    /// partition 0.
    fn index_vector(&self, index: &str) -> Result<bool, Error> {
        let i = self.tensor("index", index)?;
        let vector = i.dtype == Dtype::U32 && i.space == Space::Sbuf && i.partition == 0;
        Ok(vector && i.view[0] == 1)
    }

    /// A row gather (`scatter` false: `dst[k] (op)= src[index[k]]`) or scatter
    /// (`dst[index[k]] (op)= src[k]`) of `[src, index, dst]` as an access-pattern DMA:
    /// whole rows (`shape[0]` partitions on core) picked by a `[1, N]` or `(N, 1)` index
    /// tile, N rows on the direct side, rows of equal width.
    fn rows_ap(
        &self,
        [src, index, dst]: [&str; 3],
        scatter: bool,
        opts: ApOptions,
    ) -> Result<Lowered, Error> {
        // named as the shorthand names it, not as the side's vector_offset it becomes
        let t = self.tensor("index", index)?;
        if let Some(fault) = crate::nki::ap::index_tile_fault(index, t.dtype, t.space) {
            return Err(self.error(format!("index: {fault}")));
        }
        let idx = self.ap_tensor("index", index)?;
        let vector = idx.clone();
        let n = u32::try_from(idx.elements()).unwrap_or(u32::MAX);
        let (s, d) = (self.ap_tensor("src", src)?, self.ap_tensor("dst", dst)?);
        let (s, d) = match scatter {
            false => (rows_side(s, Some((idx, n))), rows_side(d, None)),
            true => (rows_side(s, None), rows_side(d, Some((idx, n)))),
        };
        let (indexed, direct) = if scatter { ("dst", &s) } else { ("src", &d) };
        // rows_side's row dim is the next to last (after a one-partition tensor's
        // partition dim)
        let direct_rows = direct.dims[direct.dims.len() - 2].num;
        if direct_rows != n {
            return Err(self.error(format!(
                "{} has {direct_rows} rows but index {} has {n} indices (one row per index)",
                direct.tensor.name, index
            )));
        }
        if s.tensor.dtype != d.tensor.dtype {
            // as on the ISA route (DMA_INDIRECT has one dtype): only dma_copy casts
            return Err(self.error(format!(
                "{} has dtype {} but {} has {}: {} moves rows without a cast (dma_copy casts through float32)",
                d.tensor.name, d.tensor.dtype, s.tensor.name, s.tensor.dtype, self.kind
            )));
        }
        let width = |a: &ApSide| a.dims.last().map_or(0, |d| d.num);
        if width(&s) != width(&d) {
            return Err(self.error(format!(
                "rows of {} have {} elements but rows of {} have {} (whole rows move; the {indexed} side's rows are picked by index)",
                d.tensor.name, width(&d), s.tensor.name, width(&s)
            )));
        }
        if n <= dge::indirection::MAX_INDICES {
            return nki::dma_copy_ap(self.kind, s, d, opts);
        }
        self.split_rows([s, d], vector, scatter, opts)
    }

    /// [`Cx::rows_ap`] of more than 4096 indices, its index tile `idx` (a `[1, N]`
    /// vector: an `(N, 1)` tile has at most 128; the direct side `N` rows in HBM or one
    /// partition): one access-pattern DMA per 4096, their destination indices promised
    /// unique across them all under `unique_indices`.
    fn split_rows(
        &self,
        [s, d]: [ApSide; 2],
        idx: ApTensor,
        scatter: bool,
        opts: ApOptions,
    ) -> Result<Lowered, Error> {
        let (indexed, direct) = if scatter { (d, s) } else { (s, d) };
        let n = indexed.dims[indexed.indirect_dim].num;
        let row_dim = direct.dims.len() - 2;
        let per = dge::indirection::MAX_INDICES;
        let unique = (scatter && opts.unique_indices).then_some(nki::UniqueDestinations {
            at: idx.start,
            count: n,
            bound: indexed.index_bound(),
            refuse: opts.op != dma::ComputeOp::None,
            oob_errors: opts.oob == nki::OobMode::Error,
        });
        let mut ap_dmas = Vec::new();
        for first in (0..n).step_by(per as usize) {
            let count = (n - first).min(per);
            let chunk_idx = rows_of(&idx, 1, first, count);
            let chunk_direct = rows_of(&direct.tensor, row_dim, first, count);
            let indexed = ApSide {
                vector_offset: Some(IndexAp::whole(chunk_idx)),
                dims: indexed
                    .dims
                    .iter()
                    .enumerate()
                    .map(|(k, dim)| match k == indexed.indirect_dim {
                        true => nki::ApDim {
                            step: dim.step,
                            num: count,
                        },
                        false => *dim,
                    })
                    .collect(),
                ..indexed.clone()
            };
            let direct = rows_side(chunk_direct, None);
            let (s, d) = if scatter {
                (direct, indexed)
            } else {
                (indexed, direct)
            };
            ap_dmas.extend(nki::dma_copy_ap(self.kind, s, d, opts)?.ap_dmas);
        }
        Ok(Lowered {
            ap_dmas,
            split: Some(nki::IndexSplit { per, unique }),
            ..Lowered::default()
        })
    }

    fn lower(&self, op: &OpSpec) -> Result<Lowered, Error> {
        let g = self.map.generation();
        match op {
            OpSpec::DmaGather(o) => self.row_dma(o, false),
            OpSpec::DmaScatter(o) => self.row_dma(o, true),
            OpSpec::DmaGatherTranspose(o) => {
                // DMA_INDIRECT's GATHER_TRANSPOSE says a 2-D one of src as declared by a
                // [1, N] u32 index vector in partition 0; every other is access-pattern DMAs
                let axes = o.axes.as_deref().unwrap_or(&[1, 0]);
                if axes != [1, 0] || o.src_shape.is_some() || !self.index_vector(&o.index)? {
                    let mut src = self.ap_tensor("src", &o.src)?;
                    if let Some(shape) = &o.src_shape {
                        src.shape = self.reshaped("src", &src, shape)?;
                    }
                    let t = nki::Transpose {
                        axes,
                        src: &src,
                        index: &self.ap_tensor("index", &o.index)?,
                        dst: &self.ap_tensor("dst", &o.dst)?,
                    };
                    return nki::dma_gather_transpose_nd(g, t, o.oob.into());
                }
                // dst rows are partitions on core (the transpose's layout).
                let s = self.rows("src", &o.src)?;
                let d = self.nki(self.tensor("dst", &o.dst)?)?;
                let i = self.nki(self.tensor("index", &o.index)?)?;
                nki::dma_gather_transpose(g, &s, &i, &d, o.oob.into())
            }
            OpSpec::DmaTranspose(o) => {
                let src = self.dim_side("src", &o.src)?;
                let dst = self.dim_side("dst", &o.dst)?;
                nki::dma_transpose(src, dst, o.axes.as_deref())
            }
            OpSpec::DmaCopy(o) => self.dma_copy(o),
            OpSpec::NcNGather(o) => {
                let data = self.nki(self.tensor("data", &o.data)?)?;
                let idx = self.nki(self.tensor("index", &o.index)?)?;
                let dst = self.nki(self.tensor("dst", &o.dst)?)?;
                nki::nc_n_gather(g, &data, &idx, &dst)
            }
            OpSpec::LocalGather(o) => {
                let src = self.nki(self.tensor("src", &o.src)?)?;
                let idx = self.nki(self.tensor("index", &o.index)?)?;
                let dst = self.nki(self.tensor("dst", &o.dst)?)?;
                let (per, valid) = (o.num_elem_per_idx, o.num_valid_indices);
                nki::local_gather(g, &src, &idx, per, valid, &dst)
            }
            OpSpec::EmbeddingUpdate(o) => {
                let operands = [("table", o.table.as_str()), ("data", o.data.as_str())];
                // 0xca stages its data rows on core
                let hbm_data = self.tensor("data", &o.data)?.space == Space::Hbm;
                if hbm_data || !self.isa_rows(&operands, &o.index)? {
                    let opts = ApOptions {
                        op: dma::CceOp::from(o.reduce).compute_op(),
                        oob: nki::OobMode::Skip,
                        unique_indices: false,
                        dge: nki::DgeMode::Chosen,
                    };
                    return self.rows_ap([&o.data, &o.index, &o.table], true, opts);
                }
                let table = self.rows("table", &o.table)?;
                let idx = self.nki(self.tensor("index", &o.index)?)?;
                let data = self.rows("data", &o.data)?;
                nki::embedding_update(g, &table, &idx, &data, o.reduce.into())
            }
            OpSpec::Isa(o) => self.isa(o),
        }
    }

    /// `dma_copy`: both sides as NKI access patterns, lowered to one access-pattern DMA.
    fn dma_copy(&self, o: &DmaCopy) -> Result<Lowered, Error> {
        let src = self.ap_side("src", &o.src)?;
        let dst = self.ap_side("dst", &o.dst)?;
        // NKI's defaults (oob "error", unique_indices true) hold for any copy; the other
        // values need indices to act on
        if let (Some(Oob::Skip), false) = (o.oob, src.dynamic() || dst.dynamic()) {
            return Err(self.error(
                "oob = skip: applies to a side with a vector_offset or a scalar_offset (a run-time address), and neither side has one",
            ));
        }
        if let (Some(false), None) = (o.unique_indices, &dst.vector_offset) {
            return Err(self.error(
                "unique_indices = false: applies to an indexed destination, and dst has no vector_offset (NKI: a gather read-modify-write needs unique_indices = true)",
            ));
        }
        let opts = ApOptions {
            op: o.compute.into(),
            oob: o.oob.unwrap_or_default().into(),
            unique_indices: o.unique_indices.unwrap_or(true),
            dge: o.dge.map_or(DgeMode::Chosen, DgeMode::from),
        };
        nki::dma_copy_ap("dma_copy", src, dst, opts)
    }

    /// One `dma_copy` side: a whole tensor (row by row) or an `.ap()`.
    fn ap_side(&self, field: &str, spec: &ApSpec) -> Result<ApSide, Error> {
        let p = match spec {
            ApSpec::Whole(name) => {
                let t = self.ap_tensor(field, name)?;
                return Ok(rows_side(t, None));
            }
            ApSpec::Pattern(p) => p,
        };
        let mut tensor = self.ap_tensor(&format!("{field}.tensor"), &p.tensor)?;
        if let Some(dtype) = &p.dtype {
            tensor = self.reinterpreted(field, tensor, dtype.0)?;
        }
        if let Some(shape) = &p.shape {
            tensor.shape = self.reshaped(field, &tensor, shape)?;
        }
        let vector_offset = match &p.vector_offset {
            Some(spec) => Some(self.index_ap(&format!("{field}.vector_offset"), spec)?),
            None => None,
        };
        let scalar_offset = match &p.scalar_offset {
            Some(n) => Some(self.ap_tensor(&format!("{field}.scalar_offset"), n)?),
            None => None,
        };
        let dims = match &p.ap {
            Some(ap) => ap
                .iter()
                .enumerate()
                .map(|(k, &[step, num])| {
                    let num = u32::try_from(num).map_err(|_| {
                        self.error(format!("{field}.ap[{k}]: num {num} must be 1 ..= 2^32 - 1"))
                    })?;
                    Ok(ApDim { step, num })
                })
                .collect::<Result<_, Error>>()?,
            None if vector_offset.is_some() || scalar_offset.is_some() => {
                return Err(self.error(format!(
                    "{field}: a vector_offset or scalar_offset needs an explicit ap (its indirect dim's count is the index count)"
                )))
            }
            None if p.offset != 0 => {
                return Err(self.error(format!(
                    "{field}: offset {} needs an explicit ap (without one the side walks its whole tensor, which an offset pushes past its end)",
                    p.offset
                )))
            }
            None => rows_side(tensor.clone(), None).dims,
        };
        if let (Some(d), None, None) = (p.indirect_dim, &vector_offset, &scalar_offset) {
            return Err(self.error(format!(
                "{field}: indirect_dim {d} is given without vector_offset or scalar_offset (it names the dim they apply to)"
            )));
        }
        Ok(ApSide {
            tensor,
            offset: p.offset,
            dims,
            indirect_dim: p.indirect_dim.unwrap_or(0) as usize,
            vector_offset,
            scalar_offset,
        })
    }

    /// `t`'s bytes as elements of `dtype` for `field.dtype`: its last dim scaled by the
    /// size ratio (a whole number of them; on SBUF/PSUM never the partition dim).
    fn reinterpreted(&self, field: &str, t: ApTensor, dtype: Dtype) -> Result<ApTensor, Error> {
        let last = t.shape.last().copied().unwrap_or(1);
        let (from, to) = (t.dtype.size() as u64, dtype.size() as u64);
        let rule = match view::reinterpreted_shape(&t.shape, from, to) {
            None => format!(
                "its last dim of {last} {} is {} bytes, no whole number of {dtype} elements",
                t.dtype,
                last.saturating_mul(from)
            ),
            Some(_) if t.space != Space::Hbm && t.shape.len() < 2 && from != to => {
                "its only dim is the partition dim, which a reinterpretation cannot scale".into()
            }
            Some(shape) => return Ok(ApTensor { dtype, shape, ..t }),
        };
        Err(self.error(format!(
            "{field}.dtype {dtype}: {} is {:?} {}; {rule}",
            t.name, t.shape, t.dtype
        )))
    }

    /// `shape` for `field.shape`, a reshape of `t`: the same element count, each size at
    /// least 1, and on SBUF/PSUM the same partition count.
    fn reshaped(&self, field: &str, t: &ApTensor, shape: &[u64]) -> Result<Vec<u64>, Error> {
        let count = shape.iter().try_fold(1u64, |p, &s| p.checked_mul(s));
        let rule = if shape.is_empty() || shape.contains(&0) {
            "a shape has one size or more, each at least 1"
        } else if count != Some(t.elements()) {
            "a reshape keeps the tensor's element count"
        } else if t.space != Space::Hbm && shape[0] != t.shape[0] {
            "on SBUF/PSUM a reshape keeps shape[0], the partition count"
        } else {
            return Ok(shape.to_vec());
        };
        Err(self.error(format!(
            "{field}.shape {shape:?}: {} is {:?} ({} elements); {rule}",
            t.name,
            t.shape,
            t.elements()
        )))
    }

    /// A side walked dim by dim: a whole tensor one pair per dim
    /// ([`ApSide::by_dims`]), or an `.ap()` as given.
    fn dim_side(&self, field: &str, spec: &ApSpec) -> Result<ApSide, Error> {
        match spec {
            ApSpec::Whole(name) => Ok(ApSide::by_dims(self.ap_tensor(field, name)?)),
            ApSpec::Pattern(_) => self.ap_side(field, spec),
        }
    }

    /// A `vector_offset`: a whole index tile, or an `.ap()` of one (a plain walk: the
    /// indices have no offsets of their own).
    fn index_ap(&self, field: &str, spec: &ApSpec) -> Result<IndexAp, Error> {
        let explicit = match spec {
            ApSpec::Whole(_) => false,
            ApSpec::Pattern(p) => {
                if p.vector_offset.is_some()
                    || p.scalar_offset.is_some()
                    || p.indirect_dim.is_some()
                {
                    return Err(self.error(format!(
                        "{field}: an index tile's .ap() takes no vector_offset, indirect_dim or scalar_offset of its own (its elements are the indices)"
                    )));
                }
                p.ap.is_some()
            }
        };
        let side = self.ap_side(field, spec)?;
        Ok(IndexAp {
            tensor: side.tensor,
            offset: side.offset,
            ap: explicit.then_some(side.dims),
        })
    }

    /// The tensor `name` (named by `field`) as an access pattern sees it.
    fn ap_tensor(&self, field: &str, name: &str) -> Result<ApTensor, Error> {
        let t = self.tensor(field, name)?;
        Ok(ApTensor {
            name: t.name.clone(),
            start: self.start(t)?,
            space: t.space,
            shape: t.shape.clone(),
            dtype: t.dtype,
        })
    }

    fn start(&self, t: &Placed) -> Result<dma::FabricAddr, Error> {
        t.start(self.map)
    }

    /// An `isa` op: its 64 bytes (hex, or the fields by name through
    /// [`isa::text`]) decoded and validated, its bounds and shapes to set.
    fn isa(&self, o: &IsaOp) -> Result<Lowered, Error> {
        let inst = match (&o.hex, &o.fields) {
            (Some(hex), None) => isa::decode(&isa::text::parse_hex(hex)?)?,
            (None, Some(fields)) => {
                let value =
                    serde_json::to_value(fields).map_err(|e| self.error(format!("fields: {e}")))?;
                isa::text::from_value(&value)?
            }
            _ => return Err(self.error("give exactly one of hex or fields")),
        };
        inst.validate(self.map.generation())?;
        let lowered = Lowered {
            instructions: vec![inst],
            bounds: o
                .bounds
                .iter()
                .map(|b| BoundSetting {
                    reg: b.reg,
                    bound: b.bound,
                })
                .collect(),
            shapes: o
                .shapes
                .iter()
                .map(|s| ShapeSetting {
                    reg: s.reg,
                    xyzw: s.xyzw,
                })
                .collect(),
            ..Lowered::default()
        };
        // every setting is made on a scratch file now, so that a register it cannot be
        // set in is refused, naming the setting, before anything runs
        let mut regs = BoundRegisters::new();
        lowered
            .apply_registers_named(&mut regs)
            .map_err(|named| self.error(format!("{}: {}", named.0, named.1)))?;
        self.registers_set_once(o)?;
        // a shape this op sets for its own DMA_INDIRECT is known now: its walk is checked
        // before anything runs (a shape set by an earlier op is checked as the op runs)
        if let Instruction::DmaIndirect(d) = inst {
            let reg = d.shape_reg();
            if reg.present() && o.shapes.iter().any(|s| s.reg == reg.reg()) {
                isa::validate::dma_indirect_walk(self.map, &regs, &d)?;
            }
        }
        Ok(lowered)
    }

    /// No register is set twice by one `isa` op (a later setting would silently replace
    /// an earlier one).
    fn registers_set_once(&self, o: &IsaOp) -> Result<(), Error> {
        let bounds = o.bounds.iter().enumerate();
        let bounds = bounds.map(|(k, b)| (format!("bounds[{k}]"), b.reg, 2u8));
        let shapes = o.shapes.iter().enumerate();
        let shapes = shapes.map(|(k, s)| (format!("shapes[{k}]"), s.reg, 4u8));
        let settings: Vec<(String, u8, u8)> = bounds.chain(shapes).collect();
        for (later, (name, reg, len)) in settings.iter().enumerate() {
            let earlier = settings.get(..later).unwrap_or(&[]);
            let clash = earlier.iter().find(|e| e.1 < reg + len && *reg < e.1 + e.2);
            if let Some((first, at, n)) = clash {
                return Err(self.error(format!(
                    "{name} (registers {reg}..={}) sets a register {first} (registers {at}..={}) already sets",
                    reg + len - 1,
                    at + n - 1
                )));
            }
        }
        Ok(())
    }
}

/// The options of a row gather/scatter: bound register 0, notification on.
fn row_options(compute_op: dma::ComputeOp, oob: nki::OobMode, unique: bool) -> DmaOptions {
    DmaOptions {
        oob,
        unique_indices: unique,
        compute_op,
        ..DmaOptions::default()
    }
}

/// Rows `first .. first + count` along `dim` of `t` (elements `first * stride(dim)` on),
/// as a tensor of their own.
fn rows_of(t: &ApTensor, dim: usize, first: u32, count: u32) -> ApTensor {
    let skip = u64::from(first) * t.stride(dim) * t.dtype.size() as u64;
    let mut shape = t.shape.clone();
    shape[dim] = u64::from(count);
    ApTensor {
        start: dma::FabricAddr(t.start.0 + skip),
        shape,
        ..t.clone()
    }
}

/// A side walking `t` row by row (rows are `shape[0]`, on SBUF/PSUM partitions; a one-
/// partition `[1, R, ...]` on-core tensor has `R` rows inside its partition), the rows
/// picked by `index` when given (its indirect dim is the row dim).
pub(super) fn rows_side(t: ApTensor, index: Option<(ApTensor, u32)>) -> ApSide {
    let one_partition = t.space != Space::Hbm && t.shape.len() >= 3 && t.shape[0] == 1;
    let row_dim = usize::from(one_partition);
    let rows = index
        .as_ref()
        .map_or(t.shape.get(row_dim).copied().unwrap_or(1), |&(_, n)| {
            u64::from(n)
        });
    let row = t.stride(row_dim).max(1) as i64;
    let mut dims: SmallVec<[ApDim; 5]> = SmallVec::new();
    if one_partition {
        dims.push(ApDim {
            step: t.row_elements() as i64,
            num: 1,
        });
    }
    // Tensors are at most 2^30 bytes, so the row count fits 32 bits.
    dims.push(ApDim {
        step: row,
        num: rows as u32,
    });
    dims.push(ApDim {
        step: 1,
        num: row as u32,
    });
    ApSide {
        tensor: t,
        offset: 0,
        dims,
        // (the row dim only when rows are picked: an indirect dim goes with an index)
        indirect_dim: if index.is_some() { row_dim } else { 0 },
        vector_offset: index.map(|(i, _)| IndexAp::whole(i)),
        scalar_offset: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::exec::tests::{prepared, u32_array};
    use crate::scenario::Overrides;

    const TENSORS: &str = "[[tensor]]\nname = \"tab\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [8, 4]\n\
        [[tensor]]\nname = \"idx\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 2]\n\
        [[tensor]]\nname = \"idx1\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 2]\npartition = 1\n\
        [[tensor]]\nname = \"rows\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [2, 4]\npartition = 2\n\
        [[tensor]]\nname = \"out\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [2, 4]\n\
        [[tensor]]\nname = \"ints\"\nspace = \"hbm\"\ndtype = \"i32\"\nshape = [2, 4]\n\
        [[tensor]]\nname = \"src\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 8]\n\
        [[tensor]]\nname = \"lidx\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 512]\n\
        [[tensor]]\nname = \"ldst\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 8]\n\
        [[tensor]]\nname = \"one\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [1, 5, 4]\npartition = 3\n";

    /// A GATHER (0x68): the README's example instruction.
    const GATHER_HEX: &str = "68000400000100000100000000000000080001000100010000028000010000000000\
        00000800010001000100090a01000000803f000000000000000000000000";

    fn rejection(op: &str) -> String {
        let text = format!("{TENSORS}[[op]]\n{op}\n");
        prepared(&text, &[], Overrides::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn op_rules_are_rejected_naming_the_op_and_the_rule() {
        let cases = [
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"nope\"\ndst = \"out\"",
                "op 0 (dma_gather): index = \"nope\": no tensor has that name",
            ),
            // the row ops move one dtype on either route (only dma_copy casts)
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx1\"\ndst = \"ints\"",
                "op 0 (dma_gather): ints has dtype i32 but tab has f32: dma_gather moves rows without a cast (dma_copy casts through float32)",
            ),
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"ints\"",
                "op 0 (dma_gather src=tab index=idx dst=ints): dma_gather: dst.dtype = i32: must equal src.dtype (rows move without a cast)",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out): dma_copy: dst: visits 8 elements but src visits 32 (the two walks pair element k with element k)",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", offset = 30, ap = [[1, 8]] }\ndst = { tensor = \"out\", ap = [[1, 8]] }",
                "op 0 (dma_copy src=tab dst=out): dma_copy: src: ap[0] = [1, 8] takes position [7] to element 37, outside the 32 elements of tab (shape [8, 4])",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", shape = [4, 4], ap = [[1, 8]] }\ndst = { tensor = \"out\", ap = [[1, 8]] }",
                "op 0 (dma_copy): src.shape [4, 4]: tab is [8, 4] (32 elements); a reshape keeps the tensor's element count",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"src\", shape = [8, 16], ap = [[1, 8]] }\ndst = { tensor = \"out\", ap = [[1, 8]] }",
                "op 0 (dma_copy): src.shape [8, 16]: src is [16, 8] (128 elements); on SBUF/PSUM a reshape keeps shape[0], the partition count",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 2], [1, 4]], vector_offset = \"idx\" }\ndst = \"out\"\ndge = \"hwdge\"",
                "op 0 (dma_copy src=tab dst=out src.vector_offset=idx): dma_copy: dge_mode: hwdge: a gather or scatter (a vector_offset) needs the software DGE",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", shape = [32, 0], ap = [[1, 8]] }\ndst = { tensor = \"out\", ap = [[1, 8]] }",
                "op 0 (dma_copy): src.shape [32, 0]: tab is [8, 4] (32 elements); a shape has one size or more, each at least 1",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]] }\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out): dma_copy: src: ap has 6 [step, num] pairs; it takes 1 to 5",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 2], [1, 4]], vector_offset = \"idx\", indirect_dim = 2 }\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out src.vector_offset=idx): dma_copy: src: indirect_dim 2 is out of range",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 3], [1, 4]], vector_offset = \"idx\" }\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out src.vector_offset=idx): dma_copy: src: vector_offset idx has shape [1, 2]; it must be [1, 3] or [3, 1]",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 2], [1, 4]], vector_offset = \"out\" }\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out src.vector_offset=out): dma_copy: src: vector_offset out has dtype f32; index tiles are u32 or i32",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 2], [1, 4]], scalar_offset = \"idx\" }\ndst = \"out\"",
                "op 0 (dma_copy src=tab dst=out src.scalar_offset=idx): dma_copy: src: scalar_offset idx is a [1, 2] u32 tensor in sbuf; it must be a 1x1 i32 or i64 tensor in SBUF or HBM",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"out\"\ndst = \"out\"\noob = \"skip\"",
                "op 0 (dma_copy): oob = skip: applies to a side with a vector_offset or a scalar_offset (a run-time address), and neither side has one",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 2], [1, 4]], vector_offset = \"idx\" }\ndst = \"out\"\nunique_indices = false",
                "op 0 (dma_copy): unique_indices = false: applies to an indexed destination, and dst has no vector_offset",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", vector_offset = \"idx\" }\ndst = \"out\"",
                "op 0 (dma_copy): src: a vector_offset or scalar_offset needs an explicit ap",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[0, 3000], [0, 3000]] }\ndst = { tensor = \"out\", ap = [[0, 3000], [0, 3000]] }",
                "op 0 (dma_copy src=tab dst=out): dma_copy: src: the walk is 9000000 contiguous pieces; the copy is one DGE request, which walks at most 4194304 a side (split the copy)",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, 8], [1, 4]], indirect_dim = 0 }\ndst = \"tab\"",
                "op 0 (dma_copy): src: indirect_dim 0 is given without vector_offset or scalar_offset (it names the dim they apply to)",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[4, -8], [1, 4]] }\ndst = \"tab\"",
                "op 0 (dma_copy): src.ap[0]: num -8 must be 1 ..= 2^32 - 1",
            ),
            (
                "op = \"dma_copy\"\nsrc = { tensor = \"out\", offset = 5 }\ndst = \"out\"",
                "op 0 (dma_copy): src: offset 5 needs an explicit ap (without one the side walks its whole tensor, which an offset pushes past its end)",
            ),
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx1\"\ndst = \"ldst\"",
                "op 0 (dma_gather): ldst has 16 rows but index idx1 has 2 indices (one row per index)",
            ),
            // a shape rule of an NKI-level op names its 2-D view's dims: the op shows both
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"one\"",
                "op 0 (dma_gather src=tab index=idx dst=one [1, 5, 4] as [5, 4]): dma_gather: direct side shape[0] = 5: must equal the index count",
            ),
            (
                "op = \"dma_gather_transpose\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"",
                "op 0 (dma_gather_transpose src=tab index=idx dst=out): dma_gather_transpose: src.dtype = f32: NKI: an indirect dma_transpose moves 2-byte elements (bf16, f16, u16, i16)",
            ),
            (
                "op = \"local_gather\"\nsrc = \"src\"\nindex = \"lidx\"\ndst = \"ldst\"\nnum_valid_indices = 4097",
                "op 0 (local_gather src=src index=lidx dst=ldst): local_gather: num_valid_indices = 4097: must be 1 ..= 16 * index.shape[1] (a core's index block) and at most 4096",
            ),
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\nunique_indices = false",
                "op 0 (dma_gather): unique_indices = false: applies to dma_scatter only",
            ),
            // a shorthand's index tile is named as the shorthand names it (found by an
            // audit: `src: vector_offset ...`, the .ap() side it lowers to)
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"out\"\ndst = \"rows\"",
                "op 0 (dma_gather): index: out has dtype f32; index tiles are u32 or i32",
            ),
            (
                "op = \"dma_scatter\"\nsrc = \"rows\"\nindex = \"ints\"\ndst = \"tab\"",
                "op 0 (dma_scatter): index: ints is in hbm; index tiles are in SBUF",
            ),
            (
                "op = \"embedding_update\"\ntable = \"tab\"\nindex = \"lidx\"\ndata = \"rows\"\nreduce = \"add\"",
                "op 0 (embedding_update): index: lidx has dtype u16; index tiles are u32 or i32",
            ),
            ("op = \"isa\"", "op 0 (isa): give exactly one of hex or fields"),
            // found by an audit: an empty label was accepted
            (
                "op = \"dma_copy\"\nsrc = \"out\"\ndst = \"out\"\nname = \"\"",
                "op 0 (dma_copy): name = \"\": a label is 1 to 200 characters, none a control character",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"out\"\ndst = \"out\"\nname = \"a\\nb\"",
                "op 0 (dma_copy): name = \"a\\nb\": a label is 1 to 200",
            ),
            (
                "op = \"isa\"\nhex = \"b8\"",
                "op 0 (isa): instruction is 1 bytes",
            ),
            (
                &format!("op = \"isa\"\nhex = \"{GATHER_HEX}\"\nbounds = [{{ reg = 63, bound = 1 }}]"),
                "op 0 (isa): bounds[0]: BOUND_REGISTERS.reg = 63",
            ),
        ];
        for (op, want) in cases {
            let got = rejection(op);
            assert!(got.starts_with(want), "want {want}\n got {got}");
        }
    }

    /// NKI's default `unique_indices = true` may be spelt out on a gather, as on any
    /// copy (found by an audit: it was refused while `false` alone has no meaning there).
    #[test]
    fn nki_defaults_may_be_spelt_out_on_a_gather() {
        let op = "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\nunique_indices = true";
        let text = format!("{TENSORS}[[op]]\n{op}\n");
        assert!(prepared(&text, &[], Overrides::default()).is_ok());
    }

    #[test]
    fn an_op_the_forced_mechanism_cannot_run_is_refused_before_anything_runs() {
        let copy = "op = \"dma_copy\"\nsrc = { tensor = \"tab\", ap = [[1, 8]] }\n\
                    dst = { tensor = \"out\", ap = [[1, 8]] }";
        let text = format!("{TENSORS}[[op]]\n{copy}\n");
        assert!(prepared(&text, &[], Overrides::default()).is_ok());
        let pool = Overrides {
            mechanism: Some(crate::runtime::Mechanism::Pool),
            ..Overrides::default()
        };
        let e = prepared(&text, &[], pool).unwrap_err();
        assert!(
            matches!(e, crate::Error::ScenarioOpInvalid { index: 0, .. }),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(
                "op 0 (dma_copy src=tab dst=out): the pool mechanism is not available: an access-pattern DMA"
            ),
            "{e}"
        );
    }

    /// Found by an audit: an error about a reshaped side named the tensor with the
    /// reshape's shape as if declared so; the op's operands now say how it is seen.
    #[test]
    fn an_error_on_a_reshaped_side_says_how_the_side_sees_its_tensor() {
        let got = rejection("op = \"dma_copy\"\nsrc = { tensor = \"tab\", shape = [8, 4, 4], dtype = \"u8\", ap = [[1, 8]], scalar_offset = \"idx\", indirect_dim = 3 }\ndst = { tensor = \"out\", ap = [[1, 8]] }");
        assert!(
            got.starts_with("op 0 (dma_copy src=tab dst=out src.scalar_offset=idx (src seen as u8 [8, 4, 4])): "),
            "{got}"
        );
    }

    /// A side's `dtype` counts the tensor's bytes in whole elements of it.
    #[test]
    fn a_reinterpreted_side_needs_whole_elements() {
        let text = "[[tensor]]\nname = \"odd\"\nspace = \"hbm\"\ndtype = \"u8\"\nshape = [2, 3]\n\
                    [[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"odd\", dtype = \"u16\", ap = [[1, 1]] }\ndst = { tensor = \"odd\", ap = [[1, 1]], offset = 4 }\n";
        let e = prepared(text, &[], Overrides::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op 0 (dma_copy): src.dtype u16: odd is [2, 3] u8; its last dim of 3 u8 is 3 bytes, no whole number of u16 elements"
        );
        // a whole number: [2, 4] u8 is [2, 2] u16
        let text = text.replace("shape = [2, 3]", "shape = [2, 4]");
        assert!(prepared(&text, &[], Overrides::default()).is_ok());
    }

    /// A copy an op lowers to is one DGE request: one too long for it is refused in the
    /// op's own terms (here a transpose's, not the dma_copy it lowers to).
    #[test]
    fn a_copy_past_the_dge_request_size_is_named_by_its_op() {
        let big = |name: &str| {
            format!("[[tensor]]\nname = \"{name}\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [3000, 3000]\n")
        };
        let text =
            big("a") + &big("b") + "[[op]]\nop = \"dma_transpose\"\nsrc = \"a\"\ndst = \"b\"\n";
        let e = prepared(&text, &[], Overrides::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op 0 (dma_transpose src=a dst=b): dma_transpose: src: the walk is 9000000 contiguous pieces; the copy is one DGE request, which walks at most 4194304 a side (split the copy)"
        );
    }

    #[test]
    fn a_rejected_op_later_in_the_list_is_named_by_its_index() {
        let ok = "[[op]]\nop = \"dma_copy\"\nsrc = \"out\"\ndst = \"out\"\n";
        let text = format!("{TENSORS}{ok}{ok}[[op]]\nop = \"nc_n_gather\"\ndata = \"x\"\nindex = \"idx\"\ndst = \"out\"\n");
        let e = prepared(
            &text,
            &[("i.npy", u32_array(&[1], &[0]))],
            Overrides::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "op 2 (nc_n_gather): data = \"x\": no tensor has that name"
        );
        assert_eq!(crate::scenario::exit_code(&e), 2);
    }
}
