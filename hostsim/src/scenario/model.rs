//! The scenario file's schema as plain public data types (serde, unknown fields denied):
//! what a TOML or JSON scenario says, before any of it is checked against a fabric.
//!
//! Names that the `dma` and runtime crates already know (generation, mechanism, space,
//! dtype) travel as those types, parsed by their own `from_name`; the small option enums
//! of the ops (compute op, OOB mode, reduce op) are spelled here in lower case.

use std::path::PathBuf;

use dma::{CceOp, ComputeOp, Dtype, Generation, Space};
use serde::{Deserialize, Serialize};

use crate::nki::OobMode;
use crate::runtime::Mechanism;

/// A whole scenario: the target, its tensors and its ops, in file order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a scenario document")]
pub struct Scenario {
    /// The generation (default cayman).
    #[serde(default)]
    pub generation: GenerationName,
    /// The mechanism (default auto: the generation's route).
    #[serde(default)]
    pub mechanism: MechanismName,
    /// `[[tensor]]` tables.
    #[serde(
        default,
        deserialize_with = "tables",
        rename = "tensor",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tensors: Vec<TensorSpec>,
    /// `[[op]]` tables, executed in order.
    #[serde(
        default,
        deserialize_with = "tables",
        rename = "op",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ops: Vec<OpSpec>,
}

/// A `T` read only from a table of named fields: serde's derived forms also take a
/// positional array (`["a", "hbm", "f32", [8, 4]]`), which would fill fields by their
/// order in the source code, unnamed.
pub struct TableOnly<T>(pub T);

/// What a [`TableOnly`] table is called in the error for anything else, and whether it
/// sits inside an op (its missing field is then said to be the table's, so that the
/// error is placed at it, not taken for a field the op lacks).
pub trait Table {
    const EXPECTING: &'static str;
    const NESTED: bool = false;
}

/// The error of a table inside an op that lacks a field, before the field's name.
pub(crate) const INCOMPLETE: &str = "incomplete table: missing field ";

impl<'de, T: Deserialize<'de> + Table> Deserialize<'de> for TableOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TableOnly<T>, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Table> serde::de::Visitor<'de> for Visitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, m: M) -> Result<T, M::Error> {
                use serde::de::Error as _;
                let read = T::deserialize(serde::de::value::MapAccessDeserializer::new(m));
                read.map_err(|e| match e.to_string().split_once("missing field ") {
                    Some((_, field)) if T::NESTED => {
                        M::Error::custom(INCOMPLETE.to_string() + field)
                    }
                    _ => e,
                })
            }
        }
        d.deserialize_map(Visitor(std::marker::PhantomData))
            .map(TableOnly)
    }
}

/// A list of tables ([`TableOnly`]).
fn tables<'de, D: serde::Deserializer<'de>, T: Deserialize<'de> + Table>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    let tables = Vec::<TableOnly<T>>::deserialize(d)?;
    Ok(tables.into_iter().map(|t| t.0).collect())
}

impl Table for Scenario {
    const EXPECTING: &'static str = "a scenario document (a table of named fields)";
}

impl Table for TensorSpec {
    const EXPECTING: &'static str = "a [[tensor]] table";
}

impl Table for OpSpec {
    const EXPECTING: &'static str = "an [[op]] table";
}

impl Table for BoundSpec {
    const EXPECTING: &'static str = "a table { reg, bound }";
    const NESTED: bool = true;
}

impl Table for ShapeSpec {
    const EXPECTING: &'static str = "a table { reg, xyzw }";
    const NESTED: bool = true;
}

impl Scenario {
    /// The scenario as TOML text that parses back to an equal scenario.
    pub fn to_toml(&self) -> Result<String, crate::Error> {
        toml::to_string(self).map_err(|e| crate::Error::Scenario {
            what: "scenario".into(),
            rule: format!("cannot be written as TOML: {e}"),
        })
    }

    /// The scenario as pretty JSON (the same schema).
    pub fn to_json(&self) -> Result<String, crate::Error> {
        serde_json::to_string_pretty(self).map_err(|e| crate::Error::Scenario {
            what: "scenario".into(),
            rule: format!("cannot be written as JSON: {e}"),
        })
    }
}

/// A newtype that travels as its inner type's name: `$parse` turns the text into the
/// inner value (or the message of why not), the inner `name()` turns it back.
macro_rules! by_name {
    ($(#[$doc:meta])* $name:ident($inner:ty), $parse:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(pub $inner);

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                let parse: fn(&str) -> Result<$inner, String> = $parse;
                parse(&s).map($name)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0.name().to_string()
            }
        }
    };
}

by_name!(
    /// A generation by name (`sunda`, `cayman`, `mariana`, `maverick` or `v2`..`v5`).
    GenerationName(Generation),
    |s| Generation::from_name(s).map_err(|e| e.to_string())
);

impl Default for GenerationName {
    fn default() -> Self {
        GenerationName(Generation::Cayman)
    }
}

by_name!(
    /// A mechanism by name (`auto`, `pool`, `dge`, `reference`).
    MechanismName(Mechanism),
    |s| {
        Mechanism::from_name(s)
            .ok_or_else(|| format!("unknown mechanism {s:?} (auto | pool | dge | reference)"))
    }
);

impl Default for MechanismName {
    fn default() -> Self {
        MechanismName(Mechanism::Auto)
    }
}

by_name!(
    /// A fabric space by name (`hbm`, `sbuf`, `psum`).
    SpaceName(Space),
    |s| Space::from_name(s).map_err(|e| e.to_string())
);

by_name!(
    /// An element dtype by name (`u8 i8 u16 i16 u32 i32 i64 f16 bf16 f32`).
    DtypeName(Dtype),
    |s| Dtype::from_name(s).map_err(|e| e.to_string())
);

/// A tensor's initial contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Init {
    /// All zero bytes (the default).
    #[default]
    Zeros,
    /// Element `i` (row-major) holds `i` in the tensor's dtype (integers wrap).
    Iota,
    /// Memory nothing has written yet: every byte 0xff (NaN in a float dtype, -1 or the
    /// maximum in an integer one). Under `run --sanitize` a read of a byte of it that no
    /// op has written is a finding.
    Uninit,
    /// A `.npy` file, relative to the scenario's folder.
    Npy(PathBuf),
}

impl From<String> for Init {
    fn from(s: String) -> Init {
        match s.as_str() {
            "zeros" => Init::Zeros,
            "iota" => Init::Iota,
            "uninit" => Init::Uninit,
            _ => Init::Npy(PathBuf::from(s)),
        }
    }
}

impl From<Init> for String {
    fn from(i: Init) -> String {
        match i {
            Init::Zeros => "zeros".into(),
            Init::Iota => "iota".into(),
            Init::Uninit => "uninit".into(),
            Init::Npy(p) => p.display().to_string(),
        }
    }
}

/// One `[[tensor]]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[tensor]] table")]
pub struct TensorSpec {
    /// The name ops refer to and the output file's stem (`[A-Za-z0-9_-]`).
    pub name: String,
    /// Where it lives.
    pub space: SpaceName,
    /// Its element dtype.
    pub dtype: DtypeName,
    /// Row-major shape; on sbuf/psum `shape[0]` is the partition count.
    pub shape: Vec<u64>,
    /// Its initial contents.
    #[serde(default)]
    pub init: Init,
    /// HBM byte address, or byte offset inside each partition (placed automatically when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    /// sbuf/psum: the first partition (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
}

/// `compute`: what a moved row does to its destination (DGE_COMPUTE_OP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compute {
    #[default]
    None,
    Add,
    Multiply,
    Max,
    Min,
}

impl From<Compute> for ComputeOp {
    fn from(c: Compute) -> ComputeOp {
        match c {
            Compute::None => ComputeOp::None,
            Compute::Add => ComputeOp::Add,
            Compute::Multiply => ComputeOp::Multiply,
            Compute::Max => ComputeOp::Max,
            Compute::Min => ComputeOp::Min,
        }
    }
}

/// `oob`: what an index at or past the indexed tensor's rows does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Oob {
    /// The op fails and writes nothing.
    #[default]
    Error,
    /// The index moves nothing and is counted.
    Skip,
}

impl Oob {
    /// `error` or `skip`.
    pub fn name(self) -> &'static str {
        match self {
            Oob::Error => "error",
            Oob::Skip => "skip",
        }
    }
}

impl From<Oob> for OobMode {
    fn from(o: Oob) -> OobMode {
        match o {
            Oob::Error => OobMode::Error,
            Oob::Skip => OobMode::Skip,
        }
    }
}

/// `reduce` of `embedding_update` (CCE_OP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reduce {
    Add,
    Max,
    Min,
}

impl From<Reduce> for CceOp {
    fn from(r: Reduce) -> CceOp {
        match r {
            Reduce::Add => CceOp::Add,
            Reduce::Max => CceOp::Max,
            Reduce::Min => CceOp::Min,
        }
    }
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// One `[[op]]`, tagged by its `op` field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", expecting = "an [[op]] table")]
pub enum OpSpec {
    DmaGather(RowDma),
    DmaScatter(RowDma),
    DmaGatherTranspose(DmaGatherTranspose),
    DmaTranspose(DmaTranspose),
    DmaCopy(DmaCopy),
    NcNGather(NcNGather),
    LocalGather(LocalGather),
    EmbeddingUpdate(EmbeddingUpdate),
    Isa(IsaOp),
}

impl OpSpec {
    /// The op's kind as the `op` field spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            OpSpec::DmaGather(_) => "dma_gather",
            OpSpec::DmaScatter(_) => "dma_scatter",
            OpSpec::DmaGatherTranspose(_) => "dma_gather_transpose",
            OpSpec::DmaTranspose(_) => "dma_transpose",
            OpSpec::DmaCopy(_) => "dma_copy",
            OpSpec::NcNGather(_) => "nc_n_gather",
            OpSpec::LocalGather(_) => "local_gather",
            OpSpec::EmbeddingUpdate(_) => "embedding_update",
            OpSpec::Isa(_) => "isa",
        }
    }

    /// The op's label (`name`), if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            OpSpec::DmaGather(o) | OpSpec::DmaScatter(o) => o.name.as_deref(),
            OpSpec::DmaGatherTranspose(o) => o.name.as_deref(),
            OpSpec::DmaTranspose(o) => o.name.as_deref(),
            OpSpec::DmaCopy(o) => o.name.as_deref(),
            OpSpec::NcNGather(o) => o.name.as_deref(),
            OpSpec::LocalGather(o) => o.name.as_deref(),
            OpSpec::EmbeddingUpdate(o) => o.name.as_deref(),
            OpSpec::Isa(o) => o.name.as_deref(),
        }
    }

    /// The tensors the op names, as `(field, tensor)` pairs in field order.
    pub fn operands(&self) -> Vec<(&'static str, &str)> {
        match self {
            OpSpec::DmaGather(o) | OpSpec::DmaScatter(o) => {
                vec![("src", &o.src), ("index", &o.index), ("dst", &o.dst)]
            }
            OpSpec::DmaGatherTranspose(o) => {
                vec![("src", &o.src), ("index", &o.index), ("dst", &o.dst)]
            }
            OpSpec::DmaTranspose(o) => vec![("src", o.src.tensor()), ("dst", o.dst.tensor())],
            OpSpec::DmaCopy(o) => {
                let mut v = vec![("src", o.src.tensor()), ("dst", o.dst.tensor())];
                let offsets = [
                    ("src.vector_offset", o.src.vector_offset()),
                    ("src.scalar_offset", o.src.scalar_offset()),
                    ("dst.vector_offset", o.dst.vector_offset()),
                    ("dst.scalar_offset", o.dst.scalar_offset()),
                ];
                v.extend(offsets.into_iter().filter_map(|(f, t)| Some((f, t?))));
                v
            }
            OpSpec::NcNGather(o) => {
                vec![("data", &o.data), ("index", &o.index), ("dst", &o.dst)]
            }
            OpSpec::LocalGather(o) => vec![("src", &o.src), ("index", &o.index), ("dst", &o.dst)],
            OpSpec::EmbeddingUpdate(o) => {
                vec![("table", &o.table), ("index", &o.index), ("data", &o.data)]
            }
            OpSpec::Isa(_) => Vec::new(),
        }
    }
}

/// `dma_gather` (`dst[i, :] (compute)= src[index[i], :]`) and `dma_scatter`
/// (`dst[index[i], :] (compute)= src[i, :]`): one set of fields, `unique_indices` the
/// scatter's alone (a gather given one is rejected when it is lowered).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowDma {
    pub src: String,
    pub index: String,
    pub dst: String,
    #[serde(default)]
    pub compute: Compute,
    #[serde(default)]
    pub oob: Oob,
    /// `dma_scatter`: indices promised unique (duplicates are an error; the default);
    /// `false` lets them accumulate in index order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_indices: Option<bool>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `dma_gather_transpose`: `dst = src[index].T`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaGatherTranspose {
    pub src: String,
    /// `src` as NKI's `src.reshape(shape)` sees it (the same elements, the same count;
    /// on SBUF/PSUM the same partition count): the shape whose rows are gathered and
    /// whose dims `axes` permutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_shape: Option<Vec<u64>>,
    pub index: String,
    pub dst: String,
    #[serde(default)]
    pub oob: Oob,
    /// NKI `dma_transpose`'s permutation: `[1, 0]` (the default: the gathered
    /// `[rows, cols]` swapped, DMA_INDIRECT GATHER_TRANSPOSE), `[2, 1, 0]` for a 3-D `src`
    /// or `[3, 1, 2, 0]` for a 4-D one (`crate::nki::transpose` has the semantics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<Vec<u32>>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `dma_transpose` (NKI's direct one): `dst = src.transpose(axes)` (`crate::nki::transpose`
/// has the semantics); each side a tensor's name (one pair per dim) or an `.ap()` table
/// with no `vector_offset` or `scalar_offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaTranspose {
    pub src: ApSpec,
    pub dst: ApSpec,
    /// `[1, 0]`, `[2, 1, 0]` or `[3, 1, 2, 0]`; by default the one of `src`'s rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<Vec<u32>>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One side of a `dma_copy`: a tensor's name (all of it, row by row) or an NKI `.ap()`
/// over a tensor (`crate::nki::ap` has the semantics).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ApSpec {
    /// The whole tensor.
    Whole(String),
    /// `{ tensor = "t", ap = [[step, num], ...], offset = 0, vector_offset = "idx",
    /// indirect_dim = 0, scalar_offset = "s" }`.
    Pattern(ApPattern),
}

impl ApSpec {
    /// The tensor walked.
    pub fn tensor(&self) -> &str {
        match self {
            ApSpec::Whole(t) => t,
            ApSpec::Pattern(p) => &p.tensor,
        }
    }

    /// The index tile, if any.
    pub fn vector_offset(&self) -> Option<&str> {
        match self {
            ApSpec::Whole(_) => None,
            ApSpec::Pattern(p) => p.vector_offset.as_deref().map(ApSpec::tensor),
        }
    }

    /// The run-time scalar, if any.
    pub fn scalar_offset(&self) -> Option<&str> {
        match self {
            ApSpec::Whole(_) => None,
            ApSpec::Pattern(p) => p.scalar_offset.as_deref(),
        }
    }
}

/// A string is a whole tensor, a table an `.ap()`; the table's own errors (an unknown
/// key, a wrong type) reach the user with its field named.
impl<'de> Deserialize<'de> for ApSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ApSpec, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ApSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a tensor name or an .ap() table { tensor, dtype, shape, ap, offset, vector_offset, indirect_dim, scalar_offset }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ApSpec, E> {
                Ok(ApSpec::Whole(v.to_string()))
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, m: M) -> Result<ApSpec, M::Error> {
                read_pattern(m).map(ApSpec::Pattern)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Reads an `.ap()` table key by key, so that a bad value's error names its key (serde's
/// derived form, behind an untagged side, reports only the side).
fn read_pattern<'de, M: serde::de::MapAccess<'de>>(mut m: M) -> Result<ApPattern, M::Error> {
    use serde::de::Error as _;
    const FIELDS: &[&str] = &[
        "tensor",
        "dtype",
        "shape",
        "ap",
        "offset",
        "vector_offset",
        "indirect_dim",
        "scalar_offset",
    ];
    let mut p = ApPattern {
        tensor: String::new(),
        dtype: None,
        shape: None,
        ap: None,
        offset: 0,
        vector_offset: None,
        indirect_dim: None,
        scalar_offset: None,
    };
    let mut seen = Vec::new();
    while let Some(key) = m.next_key::<String>()? {
        let Some(&field) = FIELDS.iter().find(|f| **f == key) else {
            return Err(M::Error::unknown_field(&key, FIELDS));
        };
        if seen.contains(&field) {
            return Err(M::Error::duplicate_field(field));
        }
        seen.push(field);
        let named = |e: M::Error| M::Error::custom(format!("{field}: {e}"));
        match field {
            "tensor" => p.tensor = m.next_value().map_err(named)?,
            "dtype" => p.dtype = Some(m.next_value().map_err(named)?),
            "shape" => p.shape = Some(m.next_value().map_err(named)?),
            // (a bad pair's error names `ap` and the pair itself)
            "ap" => p.ap = Some(m.next_value::<ApPairs>()?.0),
            "offset" => p.offset = m.next_value().map_err(named)?,
            "vector_offset" => p.vector_offset = Some(m.next_value().map_err(named)?),
            "indirect_dim" => p.indirect_dim = Some(m.next_value().map_err(named)?),
            _ => p.scalar_offset = Some(m.next_value().map_err(named)?),
        }
    }
    match seen.contains(&"tensor") {
        true => Ok(p),
        // not serde's own message: it would be taken for the op's (a field it lacks),
        // so the error would not be placed at this table
        false => Err(M::Error::custom(INCOMPLETE.to_string() + "`tensor`")),
    }
}

/// An `.ap()` table's `ap`, read pair by pair, so that a bad pair's error names its
/// position (`ap[1] (a [step, num] pair): ...`).
struct ApPairs(Vec<[i64; 2]>);

impl<'de> Deserialize<'de> for ApPairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ApPairs, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ApPairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`ap` as a list of [step, num] pairs")
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut s: S,
            ) -> Result<ApPairs, S::Error> {
                use serde::de::Error as _;
                let mut pairs = Vec::new();
                loop {
                    match s.next_element::<[i64; 2]>() {
                        Ok(Some(pair)) => pairs.push(pair),
                        Ok(None) => return Ok(ApPairs(pairs)),
                        Err(e) => {
                            let k = pairs.len();
                            return Err(S::Error::custom(format!(
                                "ap[{k}] (a [step, num] pair): {e}"
                            )));
                        }
                    }
                }
            }
        }
        d.deserialize_seq(Visitor)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An NKI access pattern over a tensor, in its elements (`crate::nki::ap`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApPattern {
    /// The tensor's name.
    pub tensor: String,
    /// The tensor's bytes as elements of this dtype (NKI's `.ap(dtype=)`, a
    /// `reinterpret_cast`): its last dim scaled by the size ratio; `shape`, the pattern
    /// and the offset count these elements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DtypeName>,
    /// The tensor as NKI's `t.reshape(shape)` sees it (the same elements in the same
    /// row-major order, `shape` of the same count; on SBUF/PSUM `shape[0]` the partition
    /// count): the shape `indirect_dim`, its stride and its bound are of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// 1 to 5 `[step, num]` pairs, outermost first (default: the whole tensor, row by
    /// row; required with `vector_offset` or `scalar_offset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap: Option<Vec<[i64; 2]>>,
    /// Element offset of position 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// An index tile (u32 or i32, in SBUF): its name for the whole `[1, N]` or `(N, 1)`
    /// tile, or an `.ap()` table of it picking `N` elements (`{ tensor = "i", ap =
    /// [[NT, 128], [1, 1]], offset = t }`: column `t` of a `[128, NT]` tile), with no
    /// offsets of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_offset: Option<Box<ApSpec>>,
    /// The dim the index tile or scalar applies to (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indirect_dim: Option<u32>,
    /// A 1x1 i32 tensor in SBUF whose value times `stride_d` is added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar_offset: Option<String>,
}

/// `dma_copy` (NKI `dma_copy` / `dma_compute`): element `k` of `src`'s walk (compute)=
/// into element `k` of `dst`'s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaCopy {
    pub src: ApSpec,
    pub dst: ApSpec,
    #[serde(default)]
    pub compute: Compute,
    /// What an out-of-bounds index does (only with a `vector_offset`; default error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oob: Option<Oob>,
    /// Destination indices promised unique (only with a `vector_offset` on `dst`;
    /// default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_indices: Option<bool>,
    /// Who makes the descriptors (NKI's `dge_mode`; default hostsim's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dge: Option<Dge>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `dge`: NKI's `dge_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dge {
    /// hostsim's choice (the hardware DGE for a direct copy from cayman on, else the
    /// software DGE).
    Unknown,
    /// The software DGE.
    Swdge,
    /// The hardware DGE: no gather or scatter, not on sunda.
    Hwdge,
    /// Descriptors the Neuron Runtime builds before the kernel runs: no run-time
    /// addresses, no DGE time.
    None,
}

impl From<Dge> for crate::nki::DgeMode {
    fn from(d: Dge) -> Self {
        use crate::nki::DgeMode;
        match d {
            Dge::Unknown => DgeMode::Chosen,
            Dge::Swdge => DgeMode::Software,
            Dge::Hwdge => DgeMode::Hardware,
            Dge::None => DgeMode::Prebuilt,
        }
    }
}

/// `nc_n_gather`: `dst[p, m] = data[p, index[p, m]]` (0 past the row).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcNGather {
    pub data: String,
    pub index: String,
    pub dst: String,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `local_gather`: per core of 16 partitions, runs of `num_elem_per_idx` elements at
/// element offsets `index` (u16).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalGather {
    pub src: String,
    pub index: String,
    pub dst: String,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub num_elem_per_idx: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_valid_indices: Option<u32>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `embedding_update`: `table[index[i], :] = reduce(table[index[i], :], data[i, :])`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingUpdate {
    pub table: String,
    pub index: String,
    pub data: String,
    pub reduce: Reduce,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One bound register setting an `isa` op needs (BOUND_CHECK_REG `reg`, `reg + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { reg, bound }")]
pub struct BoundSpec {
    pub reg: u8,
    pub bound: u64,
}

/// One shape register setting an `isa` op needs (DMA_INDIRECT's shape register `reg`:
/// registers `reg..=reg + 3` hold X, Y, Z, W).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { reg, xyzw }")]
pub struct ShapeSpec {
    pub reg: u8,
    pub xyzw: [u32; 4],
}

/// `isa`: one raw 64-byte instruction, as `hex` or as the struct's `fields` by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IsaOp {
    /// The 64 bytes as 128 hex digits (spaces and `0x` allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
    /// The struct's fields by name (`opcode` plus the fields `hostsim isa decode` prints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<toml::Table>,
    /// Bound registers to set before the instruction runs.
    #[serde(
        default,
        deserialize_with = "tables",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub bounds: Vec<BoundSpec>,
    /// Shape registers to set before the instruction runs (after the bounds).
    #[serde(
        default,
        deserialize_with = "tables",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub shapes: Vec<ShapeSpec>,
    /// A label for the op (NKI's `name=`): the report and `explain` show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}
