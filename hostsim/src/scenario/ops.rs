//! Scenario ops checked and lowered to ISA instruction streams before anything runs:
//! operand names resolved, the scenario's own rules applied (DMA-side operands in one
//! region, `dma_copy` patterns inside their tensors), then the `crate::nki` lowering
//! (which applies the op's NKI rules and validates every instruction for the generation).
//! An `isa` op is decoded from its hex or its fields by name (`crate::isa::text`) and
//! validated the same way.

use dma::{AddressMap, Generation, Space};

use super::model::{DmaCopy, IsaOp, OpSpec, Pattern, RowDma};
use super::place::Placed;
use crate::error::Error;
use crate::isa::{self, BoundRegisters};
use crate::nki::{
    self, AccessPattern, BoundSetting, DmaOptions, Lowered, ShapeSetting, TensorAddr,
};
use crate::runtime::{self, Mechanism};

/// An op ready to run: its lowered instruction stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedOp {
    /// Its index in the scenario's `[[op]]` list.
    pub index: usize,
    /// Its kind (`dma_gather`, ...).
    pub kind: &'static str,
    /// ` field=tensor` pairs (each after a space), for messages.
    pub operands: String,
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
        .map(|(index, op)| prepare_one((&map, mechanism), index, op, tensors))
        .collect()
}

fn prepare_one(
    (map, mechanism): (&AddressMap, Mechanism),
    index: usize,
    op: &OpSpec,
    tensors: &[Placed],
) -> Result<PreparedOp, Error> {
    let kind = op.kind();
    let operands: String = op
        .operands()
        .iter()
        .map(|(f, t)| format!(" {f}={t}"))
        .collect();
    let cx = Cx {
        map,
        index,
        kind,
        tensors,
    };
    let routed = |lowered: Lowered| {
        let mut opcodes = lowered.instructions.iter().map(|i| i.opcode());
        opcodes.try_for_each(|o| runtime::check_route(map.generation(), mechanism, o))?;
        Ok(lowered)
    };
    let lowered = cx.lower(op).and_then(routed).map_err(|e| match e {
        e @ (Error::ScenarioOp { .. } | Error::ScenarioTensor { .. }) => e,
        e => Error::ScenarioOpInvalid {
            index,
            op: kind,
            operands: operands.clone(),
            source: Box::new(e),
        },
    })?;
    Ok(PreparedOp {
        index,
        kind,
        operands,
        lowered,
    })
}

/// What lowering one op needs.
struct Cx<'a> {
    map: &'a AddressMap,
    index: usize,
    kind: &'static str,
    tensors: &'a [Placed],
}

impl Cx<'_> {
    fn error(&self, rule: impl Into<String>) -> Error {
        Error::ScenarioOp {
            index: self.index,
            op: self.kind,
            rule: rule.into(),
        }
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
        if let (false, Some(u)) = (scatter, o.unique_indices) {
            return Err(self.error(format!(
                "unique_indices = {u}: applies to dma_scatter only (a gather writes each destination row once)"
            )));
        }
        let (s, d) = (self.rows("src", &o.src)?, self.rows("dst", &o.dst)?);
        let i = self.nki(self.tensor("index", &o.index)?)?;
        let unique = o.unique_indices.unwrap_or(true);
        let opts = row_options(o.compute.into(), o.oob.into(), unique);
        let g = self.map.generation();
        match scatter {
            true => nki::dma_scatter(g, &s, &i, &d, opts),
            false => nki::dma_gather(g, &s, &i, &d, opts),
        }
    }

    fn lower(&self, op: &OpSpec) -> Result<Lowered, Error> {
        let g = self.map.generation();
        match op {
            OpSpec::DmaGather(o) => self.row_dma(o, false),
            OpSpec::DmaScatter(o) => self.row_dma(o, true),
            OpSpec::DmaGatherTranspose(o) => {
                // dst rows are partitions on core (the transpose's layout).
                let s = self.rows("src", &o.src)?;
                let d = self.nki(self.tensor("dst", &o.dst)?)?;
                let i = self.nki(self.tensor("index", &o.index)?)?;
                nki::dma_gather_transpose(g, &s, &i, &d)
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
                let table = self.rows("table", &o.table)?;
                let idx = self.nki(self.tensor("index", &o.index)?)?;
                let data = self.rows("data", &o.data)?;
                nki::embedding_update(g, &table, &idx, &data, o.reduce.into())
            }
            OpSpec::Isa(o) => self.isa(o),
        }
    }

    /// `dma_copy`: both patterns (the whole tensors by default) inside their tensors, of
    /// one dtype.
    fn dma_copy(&self, o: &DmaCopy) -> Result<Lowered, Error> {
        let src = self.dma_side("src", &o.src)?;
        let dst = self.dma_side("dst", &o.dst)?;
        if src.dtype != dst.dtype {
            return Err(self.error(format!(
                "dst dtype {} must equal src dtype {} (dma_copy does not cast)",
                dst.dtype, src.dtype
            )));
        }
        let (sp, dp) = match (&o.src_pattern, &o.dst_pattern) {
            (None, None) if src.bytes() != dst.bytes() => {
                return Err(self.error(format!(
                "without patterns the whole tensors are copied, but src has {} bytes and dst {}",
                src.bytes(),
                dst.bytes()
            )))
            }
            // Both contiguous and of one size: src's rows laid over dst.
            (None, None) => (whole_pattern(src), whole_pattern(src)),
            (s, d) => (
                s.clone().unwrap_or_else(|| whole_pattern(src)),
                d.clone().unwrap_or_else(|| whole_pattern(dst)),
            ),
        };
        let s = self.pattern("src_pattern", src, &sp)?;
        let d = self.pattern("dst_pattern", dst, &dp)?;
        let counts = |p: &AccessPattern| p.ap.map(|[_, num]| num);
        if counts(&s) != counts(&d) {
            let side = |name: &str, given: bool, p: &Pattern, c: [u32; 2]| match given {
                true => format!("{name}_pattern (ap {:?}) has counts {c:?}", p.ap),
                false => format!(
                    "{name} (no pattern: all of it, ap {:?}) has counts {c:?}",
                    p.ap
                ),
            };
            return Err(self.error(format!(
                "{} but {}: dma_copy moves one [outer, inner] shape, so the counts must be \
                 equal pair by pair (a pattern of one pair counts as [1, num])",
                side("dst", o.dst_pattern.is_some(), &dp, counts(&d)),
                side("src", o.src_pattern.is_some(), &sp, counts(&s)),
            )));
        }
        nki::dma_copy(self.map.generation(), &s, &d, src.dtype, o.compute.into())
    }

    /// A pattern of `t` as an NKI access pattern: one or two dimensions, every element it
    /// names inside `t`.
    fn pattern(&self, field: &str, t: &Placed, p: &Pattern) -> Result<AccessPattern, Error> {
        let dims: [[u64; 2]; 2] = match p.ap.as_slice() {
            [inner] => [[0, 1], *inner],
            [outer, inner] => [*outer, *inner],
            _ => {
                return Err(self.error(format!(
                    "{field}.ap has {} dimensions; dma_copy takes one or two [step, num] pairs",
                    p.ap.len()
                )))
            }
        };
        let elems = t.bytes() / t.dtype.size() as u64;
        let last = dims.iter().try_fold(p.offset, |acc, [step, num]| {
            num.checked_sub(1)
                .and_then(|n| n.checked_mul(*step))
                .and_then(|x| acc.checked_add(x))
        });
        match last {
            Some(l) if l < elems => {}
            _ => {
                return Err(self.error(format!(
                    "{field} (offset {}, ap {:?}) reaches past the {elems} elements of {} (or has a count of 0)",
                    p.offset, p.ap, t.name
                )))
            }
        }
        let to32 = |v: u64| {
            u32::try_from(v).map_err(|_| self.error(format!("{field}: {v} does not fit 32 bits")))
        };
        let ap = [
            [to32(dims[0][0])?, to32(dims[0][1])?],
            [to32(dims[1][0])?, to32(dims[1][1])?],
        ];
        // offset < elems was just checked, so the byte offset stays inside the tensor.
        let start = self.start(t)?.0 + p.offset * t.dtype.size() as u64;
        Ok(AccessPattern {
            addr: TensorAddr::Fabric(dma::FabricAddr(start)),
            ap,
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
        };
        // every setting is made on a scratch file now, so that a register it cannot be
        // set in is refused before anything runs
        lowered.apply_registers(&mut BoundRegisters::new())?;
        self.registers_set_once(o)?;
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

/// The pattern covering all of `t` (its two-dimensional view, row-major).
fn whole_pattern(t: &Placed) -> Pattern {
    let [rows, cols] = t.row_view().map(u64::from);
    Pattern {
        offset: 0,
        ap: vec![[cols, rows], [1, cols]],
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
        [[tensor]]\nname = \"ldst\"\nspace = \"sbuf\"\ndtype = \"u16\"\nshape = [16, 8]\n";

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
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"rows\"",
                "op 0 (dma_gather): dst = \"rows\": a DMA-side operand in sbuf must lie in one partition",
            ),
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx1\"\ndst = \"out\"",
                "op 0 (dma_gather src=tab index=idx1 dst=out): dma_gather: indices = ",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"out\"\ndst = \"ints\"",
                "op 0 (dma_copy): dst dtype i32 must equal src dtype f32 (dma_copy does not cast)",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"",
                "op 0 (dma_copy): without patterns the whole tensors are copied, but src has 128 bytes and dst 32",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"\nsrc_pattern = { offset = 30, ap = [[1, 8]] }\ndst_pattern = { ap = [[1, 8]] }",
                "op 0 (dma_copy): src_pattern (offset 30, ap [[1, 8]]) reaches past the 32 elements of tab",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"\nsrc_pattern = { ap = [[1, 8]] }",
                "op 0 (dma_copy): dst (no pattern: all of it, ap [[4, 2], [1, 4]]) has counts [2, 4] \
                 but src_pattern (ap [[1, 8]]) has counts [1, 8]: dma_copy moves one [outer, inner] \
                 shape, so the counts must be equal pair by pair",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"\nsrc_pattern = { ap = [[4, 2], [1, 4]] }\ndst_pattern = { ap = [[1, 8]] }",
                "op 0 (dma_copy): dst_pattern (ap [[1, 8]]) has counts [1, 8] but src_pattern \
                 (ap [[4, 2], [1, 4]]) has counts [2, 4]",
            ),
            (
                "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"\nsrc_pattern = { ap = [[1, 1], [1, 1], [1, 1]] }",
                "op 0 (dma_copy): src_pattern.ap has 3 dimensions",
            ),
            (
                "op = \"dma_gather_transpose\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"",
                "op 0 (dma_gather_transpose src=tab index=idx dst=out): dma_gather_transpose: dst.shape[0] = 2: must equal src.shape[1]",
            ),
            (
                "op = \"local_gather\"\nsrc = \"src\"\nindex = \"lidx\"\ndst = \"ldst\"\nnum_valid_indices = 4097",
                "op 0 (local_gather src=src index=lidx dst=ldst): local_gather: num_valid_indices = 4097: must be 1 ..= 16 * index.shape[1] (a core's index block) and at most 4096",
            ),
            (
                "op = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\nunique_indices = false",
                "op 0 (dma_gather): unique_indices = false: applies to dma_scatter only",
            ),
            ("op = \"isa\"", "op 0 (isa): give exactly one of hex or fields"),
            (
                "op = \"isa\"\nhex = \"b8\"",
                "op 0 (isa): instruction is 1 bytes",
            ),
            (
                &format!("op = \"isa\"\nhex = \"{GATHER_HEX}\"\nbounds = [{{ reg = 63, bound = 1 }}]"),
                "op 0 (isa): BOUND_REGISTERS.reg = 63",
            ),
        ];
        for (op, want) in cases {
            let got = rejection(op);
            assert!(got.starts_with(want), "want {want}\n got {got}");
        }
    }

    #[test]
    fn an_op_the_forced_mechanism_cannot_run_is_refused_before_anything_runs() {
        let copy = "op = \"dma_copy\"\nsrc = \"tab\"\ndst = \"out\"\n\
                    src_pattern = { ap = [[1, 8]] }\ndst_pattern = { ap = [[1, 8]] }";
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
                "op 0 (dma_copy src=tab dst=out): opcode 0xb8 DMA_MEMCPY has no POOL kernel"
            ),
            "{e}"
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
