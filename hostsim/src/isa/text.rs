//! Instructions as text: every field of an operand struct by name and value, both ways
//! (`hostsim isa decode` / `isa encode`, the scenario `isa` op, the `isa` fuzz target).
//!
//! The fields, their offsets and sizes come from the one table
//! [`FIELD_LAYOUT`](super::layout::FIELD_LAYOUT); this module only adds how a field's
//! bytes read as text ([`Kind`], chosen by [`kind`] from the field's struct, name and
//! size). A field added to the table shows up here without another list to update.
//!
//! # The text form
//!
//! A flat list of dotted paths, the same ones the ISA's errors name
//! (`header.inst_flags.tile`, `src_mem_pattern.start_addr`, `src.i.p.index_addr`):
//!
//! | field kind                          | text value                                   |
//! |-------------------------------------|----------------------------------------------|
//! | counts, sizes                       | integer (a `"0x.."` or decimal string also)  |
//! | `eng_mask`, `immediate`, ADDR8      | `"0x..."` string (an integer also)           |
//! | ADDR4                               | `"sbuf:P:0xOFF"` / `"psum:P:0xOFF"` (raw integer also) |
//! | dtypes, compute ops, small enums    | name: `"f32"`, `"add"`, `"skip_write"`, ...  |
//! | booleans                            | `true` / `false`                             |
//! | `step_elem`, `num_elem` arrays      | array of integers                            |
//! | bitfield bytes (flags, bound regs)  | one path per sub-field (`flags.indirect_mode`) |
//!
//! Reserved bytes and bits are never written out and always encode as zero; the
//! `num_active_channels` header byte appears only on the POOL opcodes (it is reserved on
//! the DMA-level ones). The opcode is `opcode` (or `op`), by name (`"GATHER"`) or code.
//! The union members of INDIRECT_COPY's `src`/`dst` follow its `mode` (`src.i.p.*` for an
//! INDIRECT member, `src.t.*` for a TENSOR4D one).
//!
//! [`to_toml`] and [`to_json`] also write `struct` (the operand struct's name) and, when
//! asked, `verdict` (validity on a generation); the parsers accept both keys (`struct`
//! must name the opcode's struct; `verdict` is informational and ignored), so decode's
//! output is encode's input verbatim. Any other key that is not a field, a missing
//! field, or a value out of its field's range is an error naming the field.

use std::collections::BTreeMap;

use dma::{Addr4, AddressMap, CceOp, ComputeOp, Dtype, FabricAddr, Generation, Location, Space};
use serde_json::Value;
use zerocopy::FromBytes;

use super::fields::{
    BoundCheckReg, DmaIndirectFlags, IcMode, IndexMissBehavior, IndirectDim, InstFlags,
    ReshapeKind, ShapeReg,
};
use super::layout::{fields_of, FieldLayout};
use super::opcode::{Opcode, OPCODE_TABLE};
use super::{decode, operand_layout, Instruction, INSTRUCTION_BYTES};
use crate::error::Error;

/// How one field's bytes read as text.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Reserved bytes: not written, encoded as zero.
    Reserved,
    /// The opcode byte (written as the top-level `opcode`).
    Opcode,
    /// `num_active_channels`: an integer on POOL opcodes, reserved on the others.
    Channels,
    /// A nested struct of the layout table.
    Sub(&'static str),
    /// INDIRECT_COPY's MEM_PATTERN4D union: INDIRECT20B or TENSOR4D as `mode` says.
    Union,
    /// An unsigned little-endian integer, written in decimal.
    UInt,
    /// An unsigned little-endian integer, written as `"0x..."` (masks, bits, ADDR8).
    Hex,
    /// A 0/1 byte.
    Bool,
    /// A 32-bit on-core address: `"space:partition:0xoffset"`.
    Addr4,
    /// Little-endian u16s, as an array.
    U16s,
    /// Little-endian i16s, as an array.
    I16s,
    /// A one-byte code with names (`None` for a code without one).
    Enum(fn(u8) -> Option<String>),
    /// A one-byte bitfield, one text value per sub-field.
    Bits(&'static [SubField]),
}

/// One sub-field of a bitfield byte: its name and how a byte reads in it (`None` where
/// the byte holds no valid value of it).
#[derive(Clone, Copy, Debug)]
pub struct SubField {
    pub name: &'static str,
    pub read: fn(u8) -> Option<Value>,
}

/// The text kind of `structure.field` (a row of [`FIELD_LAYOUT`] of `size` bytes).
///
/// [`FIELD_LAYOUT`]: super::layout::FIELD_LAYOUT
pub fn kind(structure: &str, field: &str, size: usize) -> Kind {
    use Kind::*;
    if field.starts_with("reserved") {
        return Reserved;
    }
    match (structure, field) {
        (_, "header") => Sub("INST_HEADER"),
        ("INST_HEADER", "opcode") => Opcode,
        ("INST_HEADER", "inst_flags") => Bits(INST_FLAGS),
        ("INST_HEADER", "num_active_channels") => Channels,
        (_, "src_mem_pattern" | "dst_mem_pattern") => Sub("TENSOR4D"),
        ("S4D4_IC", "src" | "dst") => Union,
        ("INDIRECT20B", "p") => Sub("INDIRECT"),
        ("TENSOR4D", "step_elem") => I16s,
        ("TENSOR4D", "num_elem") => U16s,
        ("DMA_DIRECT2D", "num_elem" | "src_step_elem" | "dst_step_elem") => U16s,
        ("DMA_INDIRECT1D", "flags") => Bits(DMA_INDIRECT_FLAGS),
        ("DMA_INDIRECT1D", "src_idx_bound_reg" | "dst_idx_bound_reg") => Bits(BOUND_CHECK_REG),
        ("DMA_INDIRECT1D", "shape_reg") => Bits(SHAPE_REG),
        ("S4D4_GT", "index_miss_behavior") => Enum(|c| snake(IndexMissBehavior::from_code(c))),
        ("S4D4_GT", "free_pool_buffer") => Bool,
        ("S4D4_IC", "mode") => Enum(|c| snake(IcMode::from_code(c))),
        ("DMA_INDIRECT1D", "reshape_kind") => Enum(|c| snake(ReshapeKind::from_code(c))),
        (_, "compute_op") => Enum(|c| ComputeOp::from_code(c).ok().map(|o| o.name().into())),
        (_, "cce_op") => Enum(|c| snake(CceOp::from_code(c).ok())),
        (_, f) if f.ends_with("dtype") => {
            Enum(|c| Dtype::from_code(c).ok().map(|d| d.name().into()))
        }
        (_, "eng_mask" | "immediate") => Hex,
        (_, f) if f.ends_with("_addr") && size == 4 => Addr4,
        (_, f) if f.ends_with("_addr") => Hex,
        _ => UInt,
    }
}

/// An enum's text name: its variant name in snake_case (`GatherScatter` -> `gather_scatter`).
fn snake<T: std::fmt::Debug>(v: Option<T>) -> Option<String> {
    let name = format!("{:?}", v?);
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    Some(out)
}

fn flags_of(b: u8) -> Option<DmaIndirectFlags> {
    DmaIndirectFlags::read_from_bytes(&[b]).ok()
}

fn bound_of(b: u8) -> Option<BoundCheckReg> {
    BoundCheckReg::read_from_bytes(&[b]).ok()
}

fn shape_of(b: u8) -> Option<ShapeReg> {
    ShapeReg::read_from_bytes(&[b]).ok()
}

fn dim(d: IndirectDim) -> Option<Value> {
    snake(Some(d)).map(Value::from)
}

/// `inst_flags` (bit layout in [`super::fields`]).
const INST_FLAGS: &[SubField] = &[SubField {
    name: "tile",
    read: |b| Some(InstFlags::from_bits(b).tile().into()),
}];

/// DMA_INDIRECT_FLAGS.
const DMA_INDIRECT_FLAGS: &[SubField] = &[
    SubField {
        name: "indirect_mode",
        read: |b| snake(flags_of(b)?.indirect_mode().ok()).map(Value::from),
    },
    SubField {
        name: "idx_bound_is_err",
        read: |b| Some(flags_of(b)?.idx_bound_is_err().into()),
    },
    SubField {
        name: "non_unique_dst_idx",
        read: |b| Some(flags_of(b)?.non_unique_dst_idx().into()),
    },
    SubField {
        name: "gather_dim",
        read: |b| dim(flags_of(b)?.gather_dim()),
    },
    SubField {
        name: "scatter_dim",
        read: |b| dim(flags_of(b)?.scatter_dim()),
    },
];

/// BOUND_CHECK_REG.
const BOUND_CHECK_REG: &[SubField] = &[
    SubField {
        name: "bc_enabled",
        read: |b| Some(bound_of(b)?.bc_enabled().into()),
    },
    SubField {
        name: "bc_reg",
        read: |b| Some(bound_of(b)?.bc_reg().into()),
    },
    SubField {
        name: "bc_disable_oob_error_notif",
        read: |b| Some(bound_of(b)?.bc_disable_oob_error_notif().into()),
    },
];

/// The shape register byte.
const SHAPE_REG: &[SubField] = &[
    SubField {
        name: "present",
        read: |b| Some(shape_of(b)?.present().into()),
    },
    SubField {
        name: "reg",
        read: |b| Some(shape_of(b)?.reg().into()),
    },
];

/// One field to read or write: its dotted path, place and kind.
#[derive(Clone, Debug)]
struct Leaf {
    path: String,
    offset: usize,
    size: usize,
    kind: Kind,
    in_union: bool,
}

/// Walks a struct's rows of the layout table down to the leaves.
struct Walk<'a> {
    bytes: &'a [u8; INSTRUCTION_BYTES],
    opcode: Opcode,
    in_union: bool,
    out: Vec<Leaf>,
}

impl Walk<'_> {
    fn walk(&mut self, structure: &'static str, base: usize, prefix: &str) {
        for row in fields_of(structure) {
            let path = join(prefix, row.field);
            let offset = base + row.offset;
            match kind(structure, row.field, row.size) {
                Kind::Reserved => {}
                Kind::Channels if !self.opcode.uses_active_channels() => {}
                Kind::Sub(inner) => self.walk(inner, offset, &path),
                Kind::Union => self.union(row, offset, &path),
                kind => self.out.push(Leaf {
                    path,
                    offset,
                    size: row.size,
                    kind,
                    in_union: self.in_union,
                }),
            }
        }
    }

    /// INDIRECT_COPY's `src`/`dst`: the INDIRECT member where `mode` makes it one.
    fn union(&mut self, row: &FieldLayout, offset: usize, path: &str) {
        let mode = fields_of(row.structure)
            .find(|r| r.field == "mode")
            .and_then(|r| self.bytes.get(r.offset))
            .and_then(|&code| IcMode::from_code(code))
            .unwrap_or_default();
        let indirect = if row.field == "src" {
            mode.src_indirect()
        } else {
            mode.dst_indirect()
        };
        let outer = std::mem::replace(&mut self.in_union, true);
        if indirect {
            self.walk("INDIRECT20B", offset, &join(path, "i"));
        } else {
            self.walk("TENSOR4D", offset, &join(path, "t"));
        }
        self.in_union = outer;
    }
}

fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

/// The leaves of the struct `opcode` binds, reading the union members' choice from
/// `bytes`.
fn leaves(opcode: Opcode, bytes: &[u8; INSTRUCTION_BYTES]) -> Result<Vec<Leaf>, Error> {
    let (structure, _) = operand_layout(opcode).ok_or(Error::NoOperandStruct {
        opcode: opcode.code(),
        name: opcode.name(),
    })?;
    let mut w = Walk {
        bytes,
        opcode,
        in_union: false,
        out: Vec::new(),
    };
    w.walk(structure, 0, "");
    Ok(w.out)
}

fn le(bytes: &[u8; INSTRUCTION_BYTES], offset: usize, size: usize) -> u64 {
    let part = bytes.get(offset..offset + size).unwrap_or_default();
    part.iter()
        .rev()
        .fold(0u64, |acc, &b| acc << 8 | u64::from(b))
}

fn put_le(bytes: &mut [u8; INSTRUCTION_BYTES], offset: usize, size: usize, value: u64) {
    if let Some(part) = bytes.get_mut(offset..offset + size) {
        for (i, b) in part.iter_mut().enumerate() {
            *b = (value >> (8 * i)) as u8;
        }
    }
}

/// An ADDR4 as `space:partition:0xoffset` (raw hex if its space code is reserved).
pub fn addr4_text(a: Addr4) -> String {
    match a.decode() {
        Ok((space, p, off)) => format!("{}:{p}:{off:#x}", space.name()),
        Err(_) => format!("{:#010x}", a.0),
    }
}

/// The fields of `inst`, in layout order, as `(dotted path, value)`; the first is
/// `opcode`. Bitfield bytes give one entry per sub-field.
pub fn fields(inst: &Instruction) -> Vec<(String, Value)> {
    let bytes = inst.encode();
    let opcode = inst.opcode();
    let mut out = vec![("opcode".to_string(), Value::from(opcode.name()))];
    // Every decoded instruction has an operand struct.
    for leaf in leaves(opcode, &bytes).unwrap_or_default() {
        read_leaf(&leaf, &bytes, &mut out);
    }
    out
}

/// The fabric addresses of `inst`'s address fields (every field named `*_addr`: ADDR8
/// fabric addresses and ADDR4 on-core ones), as `(dotted path, address)`; an ADDR4 whose
/// space, partition or offset the map rejects is left out.
pub fn operand_addresses(inst: &Instruction, map: &AddressMap) -> Vec<(String, FabricAddr)> {
    let bytes = inst.encode();
    let leaves = leaves(inst.opcode(), &bytes).unwrap_or_default();
    let addressed = leaves.into_iter().filter(|l| l.path.ends_with("_addr"));
    addressed
        .filter_map(|leaf| {
            let raw = le(&bytes, leaf.offset, leaf.size);
            let addr = match leaf.kind {
                Kind::Addr4 => {
                    let (space, partition, offset) = Addr4(raw as u32).decode().ok()?;
                    let loc = Location {
                        space,
                        partition,
                        offset: u64::from(offset),
                    };
                    map.fabric_addr(loc).ok()?
                }
                Kind::Hex => FabricAddr(raw),
                _ => return None,
            };
            Some((leaf.path, addr))
        })
        .collect()
}

fn read_leaf(leaf: &Leaf, bytes: &[u8; INSTRUCTION_BYTES], out: &mut Vec<(String, Value)>) {
    let raw = le(bytes, leaf.offset, leaf.size);
    let value = match leaf.kind {
        Kind::Bits(subs) => {
            for s in subs {
                let v = (s.read)(raw as u8).unwrap_or(Value::from(raw));
                out.push((join(&leaf.path, s.name), v));
            }
            return;
        }
        Kind::Opcode => return,
        Kind::UInt | Kind::Channels => Value::from(raw),
        Kind::Hex => Value::from(format!("{raw:#0w$x}", w = 2 + 2 * leaf.size)),
        Kind::Bool => Value::from(raw != 0),
        Kind::Addr4 => Value::from(addr4_text(Addr4(raw as u32))),
        Kind::U16s | Kind::I16s => halves(bytes, leaf),
        Kind::Enum(name) => name(raw as u8).map_or(Value::from(raw), Value::from),
        Kind::Reserved | Kind::Sub(_) | Kind::Union => Value::Null,
    };
    out.push((leaf.path.clone(), value));
}

fn halves(bytes: &[u8; INSTRUCTION_BYTES], leaf: &Leaf) -> Value {
    let n = leaf.size / 2;
    let items = (0..n).map(|i| {
        let v = le(bytes, leaf.offset + 2 * i, 2) as u16;
        match leaf.kind {
            Kind::I16s => Value::from(v as i16),
            _ => Value::from(v),
        }
    });
    Value::Array(items.collect())
}

/// `"valid on cayman"`, or `"invalid on maverick: <the rule it breaks>"`; a valid
/// instruction that the generation's default route, the DGE, refuses by design says so.
pub fn verdict(inst: &Instruction, generation: Generation) -> String {
    let g = generation.name();
    if let Err(e) = inst.validate(generation) {
        return format!("invalid on {g}: {e}");
    }
    let on_dge = super::kernels::route_with_confidence(generation, inst.opcode()).0
        == super::kernels::Route::Dge;
    match crate::dge_route::refuses(inst).filter(|_| on_dge) {
        Some(e) => format!("valid on {g}, but the DGE route (auto's on {g}) refuses it: {e}; --mechanism pool or reference runs it"),
        None => format!("valid on {g}"),
    }
}

fn struct_name(inst: &Instruction) -> &'static str {
    operand_layout(inst.opcode()).map_or("?", |l| l.0)
}

/// `inst` as TOML: a comment, `opcode`, `struct`, every field as `path = value`, and the
/// verdict on `generation` if given.
pub fn to_toml(inst: &Instruction, generation: Option<Generation>) -> String {
    let op = inst.opcode();
    let mut out = format!(
        "# {} ({} {:#04x}), {INSTRUCTION_BYTES} bytes\n",
        struct_name(inst),
        op.name(),
        op.code()
    );
    for (path, value) in entries(inst, generation) {
        out.push_str(&format!("{path} = {}\n", toml_value(&value)));
    }
    out
}

/// `inst` as one JSON object with the same flat keys as [`to_toml`], in layout order.
pub fn to_json(inst: &Instruction, generation: Option<Generation>) -> String {
    let lines: Vec<String> = entries(inst, generation)
        .into_iter()
        .map(|(path, value)| format!("  {}: {value}", Value::from(path)))
        .collect();
    format!("{{\n{}\n}}\n", lines.join(",\n"))
}

fn entries(inst: &Instruction, generation: Option<Generation>) -> Vec<(String, Value)> {
    let mut all = fields(inst);
    all.insert(1, ("struct".into(), Value::from(struct_name(inst))));
    if let Some(g) = generation {
        all.push(("verdict".into(), Value::from(verdict(inst, g))));
    }
    all
}

/// A JSON scalar or array of scalars written as TOML (JSON strings are valid TOML basic
/// strings).
fn toml_value(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(toml_value).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// The instruction a TOML text describes (see the module docs).
pub fn from_toml(text: &str) -> Result<Instruction, Error> {
    let table: toml::Table = toml::from_str(text).map_err(|e| Error::InstructionText {
        format: "TOML",
        message: e.to_string().trim_end().to_string(),
    })?;
    let value = serde_json::to_value(table).map_err(|e| Error::InstructionText {
        format: "TOML",
        message: e.to_string(),
    })?;
    from_value(&value)
}

/// The instruction a JSON text describes (see the module docs).
pub fn from_json(text: &str) -> Result<Instruction, Error> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::InstructionText {
        format: "JSON",
        message: e.to_string(),
    })?;
    from_value(&value)
}

/// The instruction a JSON value describes: an object of fields by dotted path, nested
/// objects standing for dots.
pub fn from_value(value: &Value) -> Result<Instruction, Error> {
    let mut flat = BTreeMap::new();
    match value {
        Value::Object(_) => flatten(value, "", &mut flat),
        other => {
            return Err(Error::InstructionText {
                format: "fields",
                message: format!("expected an object of fields by name, found {other}"),
            })
        }
    }
    let opcode = take_opcode(&mut flat)?;
    let mut bytes = [0u8; INSTRUCTION_BYTES];
    bytes[0] = opcode.code();
    let structure = operand_layout(opcode).map_or("?", |l| l.0);
    check_struct_key(&mut flat, structure)?;
    flat.remove("verdict");
    let enc = Encoder { structure };
    match write_leaves(&enc, opcode, &mut flat, &mut bytes) {
        // A misspelt field is both missing and unknown: the unknown name is the likelier
        // cause, so it is the one named.
        Err(missing @ Error::TextMissingField { .. }) => {
            return Err(unknown_field(&flat, opcode, &bytes, structure)?.unwrap_or(missing))
        }
        written => written?,
    }
    if let Some(e) = unknown_field(&flat, opcode, &bytes, structure)? {
        return Err(e);
    }
    decode(&bytes)
}

/// Writes every leaf of `opcode` from `flat` into `bytes`, taking what it uses out of
/// `flat`. Plain fields first: they include INDIRECT_COPY's `mode`, which picks the union
/// members.
fn write_leaves(
    enc: &Encoder,
    opcode: Opcode,
    flat: &mut BTreeMap<String, Value>,
    bytes: &mut [u8; INSTRUCTION_BYTES],
) -> Result<(), Error> {
    for in_union in [false, true] {
        for leaf in leaves(opcode, bytes)? {
            if leaf.in_union == in_union {
                enc.write(&leaf, flat, bytes)?;
            }
        }
    }
    Ok(())
}

/// The error for the first key of `flat` that names no field of the struct.
fn unknown_field(
    flat: &BTreeMap<String, Value>,
    opcode: Opcode,
    bytes: &[u8; INSTRUCTION_BYTES],
    structure: &'static str,
) -> Result<Option<Error>, Error> {
    let known: Vec<String> = leaf_paths(opcode, bytes)?;
    Ok(flat
        .keys()
        .find(|k| !known.contains(k))
        .map(|extra| Error::TextUnknownField {
            structure,
            field: extra.clone(),
            known: known.join(", "),
        }))
}

fn flatten(v: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(map) => {
            for (k, inner) in map {
                flatten(inner, &join(prefix, k), out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.clone());
        }
    }
}

/// The paths a text of `opcode` may give (bitfields by sub-field).
fn leaf_paths(opcode: Opcode, bytes: &[u8; INSTRUCTION_BYTES]) -> Result<Vec<String>, Error> {
    let mut out = vec!["opcode".to_string()];
    for leaf in leaves(opcode, bytes)? {
        match leaf.kind {
            Kind::Bits(subs) => out.extend(subs.iter().map(|s| join(&leaf.path, s.name))),
            Kind::Opcode => {}
            _ => out.push(leaf.path),
        }
    }
    Ok(out)
}

fn take_opcode(flat: &mut BTreeMap<String, Value>) -> Result<Opcode, Error> {
    let (key, v) = match (flat.remove("opcode"), flat.remove("op")) {
        (Some(v), None) => ("opcode", v),
        (None, Some(v)) => ("op", v),
        (None, None) => {
            return Err(Error::TextMissingField {
                structure: "instruction",
                field: "opcode".into(),
            })
        }
        (Some(v), Some(_)) => {
            return Err(bad("instruction", "op", &v, "give opcode or op, not both"))
        }
    };
    let names: Vec<&str> = OPCODE_TABLE.iter().map(|r| r.name).collect();
    let rule = format!("an opcode name ({}) or code", names.join(", "));
    let code = match &v {
        Value::String(s) => match OPCODE_TABLE.iter().find(|r| r.name.eq_ignore_ascii_case(s)) {
            Some(row) => Some(row.code),
            None => parse_uint(s).and_then(|n| u8::try_from(n).ok()),
        },
        Value::Number(n) => n.as_u64().and_then(|n| u8::try_from(n).ok()),
        _ => None,
    };
    let code = code.ok_or_else(|| bad("instruction", key, &v, &rule))?;
    let opcode = Opcode::from_code(code)?;
    if operand_layout(opcode).is_none() {
        return Err(Error::NoOperandStruct {
            opcode: code,
            name: opcode.name(),
        });
    }
    Ok(opcode)
}

fn check_struct_key(
    flat: &mut BTreeMap<String, Value>,
    structure: &'static str,
) -> Result<(), Error> {
    match flat.remove("struct") {
        Some(Value::String(s)) if s == structure => Ok(()),
        Some(v) => Err(bad(
            structure,
            "struct",
            &v,
            &format!("{structure}, the opcode's operand struct"),
        )),
        None => Ok(()),
    }
}

fn bad(structure: &'static str, field: &str, value: &Value, rule: &str) -> Error {
    Error::TextFieldValue {
        structure,
        field: field.to_string(),
        value: value.to_string(),
        rule: rule.to_string(),
    }
}

/// A decimal or `0x` hexadecimal unsigned integer.
fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn value_uint(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_uint(s),
        _ => None,
    }
}

/// Writes text values into an instruction's bytes, naming `structure` in errors.
struct Encoder {
    structure: &'static str,
}

impl Encoder {
    fn take(&self, flat: &mut BTreeMap<String, Value>, path: &str) -> Result<Value, Error> {
        flat.remove(path).ok_or_else(|| Error::TextMissingField {
            structure: self.structure,
            field: path.to_string(),
        })
    }

    fn write(
        &self,
        leaf: &Leaf,
        flat: &mut BTreeMap<String, Value>,
        bytes: &mut [u8; INSTRUCTION_BYTES],
    ) -> Result<(), Error> {
        let raw = match leaf.kind {
            Kind::Opcode => return Ok(()),
            Kind::Bits(subs) => self.bits(leaf, subs, flat)?,
            Kind::U16s | Kind::I16s => return self.halves(leaf, flat, bytes),
            _ => {
                let v = self.take(flat, &leaf.path)?;
                self.scalar(leaf, &v)?
            }
        };
        put_le(bytes, leaf.offset, leaf.size, raw);
        Ok(())
    }

    fn scalar(&self, leaf: &Leaf, v: &Value) -> Result<u64, Error> {
        let max = u64::MAX >> (64 - 8 * leaf.size.clamp(1, 8));
        let (raw, rule) = match leaf.kind {
            Kind::Bool => (v.as_bool().map(u64::from), "true or false".to_string()),
            Kind::Addr4 => (
                addr4_value(v),
                "an ADDR4 \"sbuf:P:OFF\" / \"psum:P:OFF\" (partition < 128, offset < 2^23) or a raw 32-bit integer".into(),
            ),
            Kind::Enum(name) => enum_value(name, v),
            _ => (value_uint(v), format!("an unsigned integer 0..={max}")),
        };
        raw.filter(|&r| r <= max)
            .ok_or_else(|| bad(self.structure, &leaf.path, v, &rule))
    }

    fn halves(
        &self,
        leaf: &Leaf,
        flat: &mut BTreeMap<String, Value>,
        bytes: &mut [u8; INSTRUCTION_BYTES],
    ) -> Result<(), Error> {
        let v = self.take(flat, &leaf.path)?;
        let n = leaf.size / 2;
        let signed = matches!(leaf.kind, Kind::I16s);
        let rule = if signed {
            format!("an array of {n} integers -32768..=32767")
        } else {
            format!("an array of {n} integers 0..=65535")
        };
        let items = v.as_array().filter(|a| a.len() == n);
        let items = items.ok_or_else(|| bad(self.structure, &leaf.path, &v, &rule))?;
        for (i, item) in items.iter().enumerate() {
            let half = match (signed, item.as_i64()) {
                (true, Some(x)) => i16::try_from(x).ok().map(|x| u64::from(x as u16)),
                (false, Some(x)) => u16::try_from(x).ok().map(u64::from),
                _ => None,
            };
            let half = half.ok_or_else(|| bad(self.structure, &leaf.path, &v, &rule))?;
            put_le(bytes, leaf.offset + 2 * i, 2, half);
        }
        Ok(())
    }

    /// The one byte whose sub-fields read as given: each sub-field's value is checked on
    /// its own first, then the smallest byte matching all (reserved bits zero) is taken.
    fn bits(
        &self,
        leaf: &Leaf,
        subs: &[SubField],
        flat: &mut BTreeMap<String, Value>,
    ) -> Result<u64, Error> {
        let mut wanted = Vec::with_capacity(subs.len());
        for s in subs {
            let path = join(&leaf.path, s.name);
            let v = self.take(flat, &path)?;
            if !(0..=255u8).any(|b| (s.read)(b).as_ref() == Some(&v)) {
                let choices: Vec<String> =
                    distinct((0..=255u8).filter_map(s.read).map(|c| c.to_string()));
                return Err(bad(self.structure, &path, &v, &one_of(&choices)));
            }
            wanted.push(v);
        }
        let matches = |b: u8| {
            subs.iter()
                .zip(&wanted)
                .all(|(s, w)| (s.read)(b).as_ref() == Some(w))
        };
        (0..=255u8)
            .find(|&b| matches(b))
            .map(u64::from)
            .ok_or_else(|| {
                let shown = Value::Array(wanted.clone());
                bad(
                    self.structure,
                    &leaf.path,
                    &shown,
                    "no byte holds these sub-field values together",
                )
            })
    }
}

/// The items in first-seen order, each once.
fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// "one of a, b, c", or "one of 0..=63" for a long run of integers.
fn one_of(choices: &[String]) -> String {
    let numbers: Option<Vec<u64>> = choices.iter().map(|c| c.parse().ok()).collect();
    match numbers.as_deref() {
        Some([first, .., last]) if choices.len() > 8 => format!("one of {first}..={last}"),
        _ => format!("one of {}", choices.join(", ")),
    }
}

fn enum_value(name: fn(u8) -> Option<String>, v: &Value) -> (Option<u64>, String) {
    let names = distinct((0..=255u8).filter_map(name));
    let code = v
        .as_str()
        .and_then(|s| (0..=255u8).find(|&c| name(c).as_deref() == Some(s)));
    (code.map(u64::from), one_of(&names))
}

/// `"space:partition:offset"` or a raw integer.
fn addr4_value(v: &Value) -> Option<u64> {
    if let Value::Number(n) = v {
        return n.as_u64().filter(|&n| n <= u64::from(u32::MAX));
    }
    let s = v.as_str()?;
    let mut parts = s.split(':');
    let (space, p, off) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let space = Space::from_name(space.trim()).ok()?;
    let p = u32::try_from(parse_uint(p)?).ok()?;
    let off = u32::try_from(parse_uint(off)?).ok()?;
    Addr4::encode(space, p, off).ok().map(|a| u64::from(a.0))
}

/// The 64 bytes of an instruction written in hex: whitespace, commas and `0x` prefixes
/// are allowed, `#` starts a comment to the end of the line (so `isa encode`'s output
/// reads back); either 128 digits in all, or 64 tokens of one or two digits (one byte
/// each).
pub fn parse_hex(text: &str) -> Result<[u8; INSTRUCTION_BYTES], Error> {
    let tokens: Vec<&str> = text
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .flat_map(|line| line.split(|c: char| c.is_whitespace() || c == ','))
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(t)
        })
        .collect();
    if let Some(c) = tokens
        .iter()
        .flat_map(|t| t.chars())
        .find(|c| !c.is_ascii_hexdigit())
    {
        return Err(Error::InstructionHex {
            rule: format!("{c:?} is not a hex digit"),
        });
    }
    let per_byte = tokens.len() > 1 && tokens.iter().all(|t| t.len() <= 2);
    let bytes: Vec<u8> = if per_byte {
        tokens
            .iter()
            .filter_map(|t| u8::from_str_radix(t, 16).ok())
            .collect()
    } else {
        let digits: String = tokens.concat();
        if !digits.len().is_multiple_of(2) {
            return Err(Error::InstructionHex {
                rule: format!("{} hex digits is not a whole number of bytes", digits.len()),
            });
        }
        (0..digits.len() / 2)
            .filter_map(|i| digits.get(2 * i..2 * i + 2))
            .filter_map(|pair| u8::from_str_radix(pair, 16).ok())
            .collect()
    };
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| Error::InstructionLength { len: bytes.len() })
}

/// The 64 bytes as hex, in 16-byte groups separated by spaces.
pub fn to_hex(bytes: &[u8]) -> String {
    let groups: Vec<String> = bytes
        .chunks(16)
        .map(|c| c.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    groups.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::fields::{Indirect, Tensor4d};
    use crate::isa::layout::FIELD_LAYOUT;
    use crate::isa::structs::{S4d4Gt, S4d4Ic};
    use proptest::prelude::*;

    fn sbuf(p: u32, off: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, p, off).unwrap()
    }

    fn gather() -> Instruction {
        let src = Tensor4d::contiguous(sbuf(0, 0x100), 8);
        let dst = Tensor4d::new(sbuf(1, 0x200), [1, 0, 0, 0], [8, 1, 1, 1]);
        S4d4Gt::new(src, dst, Dtype::U32, Dtype::F32, 4)
            .with_index_miss_behavior(IndexMissBehavior::SkipWrite)
            .with_immediate(0x3f80_0000)
            .into()
    }

    #[test]
    fn a_verdict_names_the_dge_routes_refusal_where_auto_takes_it() {
        use crate::isa::structs::PoolBufferLoad;
        // a window of two runs 300 elements apart: not affine in the element index
        let skewed = Tensor4d::new(sbuf(0, 0), [1, 300, 0, 0], [256, 2, 1, 1]);
        let load: Instruction = PoolBufferLoad::new(skewed, Dtype::F32, 4).into();
        assert_eq!(verdict(&load, Generation::Sunda), "valid on sunda");
        let v = verdict(&load, Generation::Cayman);
        assert!(
            v.starts_with("valid on cayman, but the DGE route (auto's on cayman) refuses it: "),
            "{v}"
        );
        assert!(v.ends_with("--mechanism pool or reference runs it"), "{v}");
        let straight = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(0, 0), 512), Dtype::F32, 4);
        assert_eq!(
            verdict(&straight.into(), Generation::Cayman),
            "valid on cayman"
        );
    }

    /// Canonical bytes of `opcode`'s struct from `seed`: each field takes the seed's
    /// bytes at its offset, forced into the field's valid codes; reserved bytes stay zero.
    fn from_seed(opcode: Opcode, seed: &[u8; INSTRUCTION_BYTES]) -> [u8; INSTRUCTION_BYTES] {
        let mut bytes = [0u8; INSTRUCTION_BYTES];
        bytes[0] = opcode.code();
        for in_union in [false, true] {
            for leaf in leaves(opcode, &bytes).unwrap() {
                if leaf.in_union == in_union && !matches!(leaf.kind, Kind::Opcode) {
                    let raw = le(seed, leaf.offset, leaf.size);
                    put_le(&mut bytes, leaf.offset, leaf.size, fix(&leaf, raw));
                }
            }
        }
        bytes
    }

    fn fix(leaf: &Leaf, raw: u64) -> u64 {
        let pick = |codes: Vec<u8>| u64::from(codes[raw as usize % codes.len()]);
        match leaf.kind {
            Kind::Bool => raw & 1,
            Kind::Addr4 => raw & 0x7fff_ffff,
            Kind::Enum(name) => pick((0..=255).filter(|&c| name(c).is_some()).collect()),
            Kind::Bits(subs) => {
                let reads = |b: u8| subs.iter().map(|s| (s.read)(b)).collect::<Vec<_>>();
                let canonical = (0..=255u8)
                    .filter(|&b| reads(b).iter().all(Option::is_some))
                    .filter(|&b| (0..b).all(|a| reads(a) != reads(b)))
                    .collect();
                pick(canonical)
            }
            _ => raw,
        }
    }

    fn struct_opcodes() -> Vec<Opcode> {
        Opcode::ALL
            .into_iter()
            .filter(|&o| operand_layout(o).is_some())
            .collect()
    }

    fn round_trips(inst: &Instruction) -> Result<(), TestCaseError> {
        let toml = to_toml(inst, Some(Generation::Cayman));
        prop_assert_eq!(
            from_toml(&toml).map_err(|e| e.to_string()),
            Ok(*inst),
            "{}",
            toml
        );
        let json = to_json(inst, None);
        prop_assert_eq!(
            from_json(&json).map_err(|e| e.to_string()),
            Ok(*inst),
            "{}",
            json
        );
        let hex = to_hex(&inst.encode());
        prop_assert_eq!(parse_hex(&hex).unwrap(), inst.encode());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn every_decodable_struct_round_trips(op in 0usize..6, seed in any::<[u8; 64]>()) {
            let opcode = struct_opcodes()[op];
            let bytes = from_seed(opcode, &seed);
            // Only inst_flags TILE on a DMA-level opcode is left for decode to reject.
            match decode(&bytes) {
                Ok(inst) => round_trips(&inst)?,
                Err(e) => {
                    let at = e.field().map(|f| f.field);
                    prop_assert!(!opcode.uses_active_channels(), "{}", e);
                    prop_assert_eq!(at, Some("header.inst_flags"), "{}", e);
                }
            }
        }

        #[test]
        fn text_parsers_never_panic(text in "\\PC{0,200}") {
            let _ = from_toml(&text);
            let _ = from_json(&text);
            let _ = parse_hex(&text);
        }
    }

    #[test]
    fn every_struct_round_trips_with_all_fields_set() {
        for opcode in struct_opcodes() {
            let bytes = from_seed(opcode, &[0x5a; 64]);
            let inst = decode(&bytes).unwrap_or_else(|e| panic!("{opcode:?}: {e}"));
            round_trips(&inst).unwrap();
            assert_eq!(inst.encode(), bytes);
        }
    }

    #[test]
    fn gather_prints_every_field_by_name() {
        let expected = "\
# S4D4_GT (GATHER 0x68), 64 bytes
opcode = \"GATHER\"
struct = \"S4D4_GT\"
header.inst_flags.tile = false
header.num_active_channels = 4
src_mem_pattern.start_addr = \"sbuf:0:0x100\"
src_mem_pattern.step_elem = [1, 0, 0, 0]
src_mem_pattern.num_elem = [8, 1, 1, 1]
dst_mem_pattern.start_addr = \"sbuf:1:0x200\"
dst_mem_pattern.step_elem = [1, 0, 0, 0]
dst_mem_pattern.num_elem = [8, 1, 1, 1]
in_dtype = \"u32\"
out_dtype = \"f32\"
index_miss_behavior = \"skip_write\"
free_pool_buffer = false
immediate = \"0x3f800000\"
verdict = \"valid on cayman\"
";
        assert_eq!(to_toml(&gather(), Some(Generation::Cayman)), expected);
    }

    #[test]
    fn indirect_copy_union_follows_mode() {
        let ic = S4d4Ic::gather(
            Indirect::new(sbuf(0, 0), sbuf(0, 0x1000), 64),
            Tensor4d::contiguous(sbuf(0, 0x2000), 64),
            Dtype::F16,
            4,
            1024,
            16,
        );
        let paths: Vec<String> = fields(&ic.into()).into_iter().map(|f| f.0).collect();
        assert!(
            paths.contains(&"src.i.p.index_addr".to_string()),
            "{paths:?}"
        );
        assert!(paths.contains(&"dst.t.step_elem".to_string()), "{paths:?}");
        let scatter: Instruction = ic.with_raw_mode(IcMode::Scatter, 0, 0).into();
        let paths: Vec<String> = fields(&scatter).into_iter().map(|f| f.0).collect();
        assert!(paths.contains(&"src.t.start_addr".to_string()), "{paths:?}");
        assert!(paths.contains(&"dst.i.p.num_elem".to_string()), "{paths:?}");
    }

    #[test]
    fn dma_opcodes_have_no_channel_field() {
        let bytes = from_seed(Opcode::DmaIndirect, &[0x12; 64]);
        let inst = decode(&bytes).unwrap();
        let paths: Vec<String> = fields(&inst).into_iter().map(|f| f.0).collect();
        assert!(!paths.iter().any(|p| p.contains("num_active_channels")));
        assert!(paths.contains(&"flags.indirect_mode".to_string()));
        assert!(paths.contains(&"src_idx_bound_reg.bc_reg".to_string()));
    }

    #[test]
    fn layout_rows_have_kinds_that_fit_their_size() {
        // MEM_PATTERN4D is read through its members (Kind::Union), never as bytes.
        for row in FIELD_LAYOUT
            .iter()
            .filter(|r| r.structure != "MEM_PATTERN4D")
        {
            let size = row.size;
            let ok = match kind(row.structure, row.field, size) {
                Kind::Bool | Kind::Enum(_) | Kind::Bits(_) | Kind::Channels | Kind::Opcode => {
                    size == 1
                }
                Kind::Addr4 => size == 4,
                Kind::U16s | Kind::I16s => size % 2 == 0,
                Kind::UInt | Kind::Hex => (1..=8).contains(&size),
                Kind::Sub(inner) => fields_of(inner).map(|r| r.size).sum::<usize>() == size,
                Kind::Union => size == 20,
                Kind::Reserved => true,
            };
            assert!(ok, "{}.{} ({size} bytes)", row.structure, row.field);
        }
    }

    fn toml_error(text: &str) -> String {
        from_toml(text).unwrap_err().to_string()
    }

    fn gather_toml_with(from: &str, to: &str) -> String {
        let text = to_toml(&gather(), None);
        assert!(text.contains(from), "{from}");
        text.replace(from, to)
    }

    #[test]
    fn bad_fields_are_named() {
        // a misspelt field: named as the unknown one, not as the missing one
        let unknown = gather_toml_with("in_dtype = ", "in_dtyp = ");
        let e = toml_error(&unknown);
        assert!(
            e.starts_with("S4D4_GT has no field in_dtyp (its fields: opcode,"),
            "{e}"
        );
        let missing = gather_toml_with("in_dtype = ", "# in_dtype = ");
        let e = toml_error(&missing);
        assert!(e.starts_with("S4D4_GT.in_dtype is missing"), "{e}");
        let extra = format!("{}bogus = 1\n", to_toml(&gather(), None));
        let e = toml_error(&extra);
        assert!(
            e.starts_with(
                "S4D4_GT has no field bogus (its fields: opcode, header.inst_flags.tile,"
            ),
            "{e}"
        );
        let wide = gather_toml_with("num_active_channels = 4", "num_active_channels = 256");
        assert_eq!(
            toml_error(&wide),
            "S4D4_GT.header.num_active_channels = 256: must be an unsigned integer 0..=255"
        );
        let name = gather_toml_with("\"skip_write\"", "\"skip\"");
        assert_eq!(
            toml_error(&name),
            "S4D4_GT.index_miss_behavior = \"skip\": must be one of immediate_write, skip_write"
        );
        let addr = gather_toml_with("\"sbuf:1:0x200\"", "\"hbm:0:0\"");
        assert!(toml_error(&addr)
            .starts_with("S4D4_GT.dst_mem_pattern.start_addr = \"hbm:0:0\": must be an ADDR4"));
        let steps = gather_toml_with(
            "src_mem_pattern.step_elem = [1, 0, 0, 0]",
            "src_mem_pattern.step_elem = [1, 0, 40000, 0]",
        );
        assert_eq!(
            toml_error(&steps),
            "S4D4_GT.src_mem_pattern.step_elem = [1,0,40000,0]: must be an array of 4 integers -32768..=32767"
        );
        let short = gather_toml_with(
            "dst_mem_pattern.num_elem = [8, 1, 1, 1]",
            "dst_mem_pattern.num_elem = [8]",
        );
        assert_eq!(
            toml_error(&short),
            "S4D4_GT.dst_mem_pattern.num_elem = [8]: must be an array of 4 integers 0..=65535"
        );
        let wrong = gather_toml_with("struct = \"S4D4_GT\"", "struct = \"S4D4_IC\"");
        assert_eq!(
            toml_error(&wrong),
            "S4D4_GT.struct = \"S4D4_IC\": must be S4D4_GT, the opcode's operand struct"
        );
    }

    #[test]
    fn opcode_by_name_code_or_alias() {
        let text = to_toml(&gather(), None);
        for op in [
            "opcode = \"gather\"",
            "opcode = 104",
            "op = \"0x68\"",
            "op = \"GATHER\"",
        ] {
            let t = text.replace("opcode = \"GATHER\"", op);
            assert_eq!(from_toml(&t).unwrap(), gather(), "{op}");
        }
        let none = text.replace("opcode = \"GATHER\"\n", "");
        assert_eq!(
            toml_error(&none),
            "instruction.opcode is missing: every field but the reserved ones must be given"
        );
        let raw = text.replace("opcode = \"GATHER\"", "opcode = \"EMBEDDING_UPDATE\"");
        assert!(matches!(
            from_toml(&raw),
            Err(Error::NoOperandStruct { opcode: 0x79, .. })
        ));
        let unknown = text.replace("opcode = \"GATHER\"", "opcode = 66");
        assert!(matches!(
            from_toml(&unknown),
            Err(Error::UnknownOpcode { opcode: 0x42 })
        ));
    }

    #[test]
    fn bitfield_sub_fields_are_checked_one_by_one() {
        let inst = decode(&from_seed(Opcode::DmaIndirect, &[0; 64])).unwrap();
        let text = to_toml(&inst, None);
        let bad = text.replace(
            "flags.indirect_mode = \"src\"",
            "flags.indirect_mode = \"both\"",
        );
        assert_eq!(
            toml_error(&bad),
            "DMA_INDIRECT1D.flags.indirect_mode = \"both\": must be one of \"src\", \"dst\", \"src_dst\""
        );
        let reg = text.replace(
            "src_idx_bound_reg.bc_reg = 0",
            "src_idx_bound_reg.bc_reg = 64",
        );
        assert_eq!(
            toml_error(&reg),
            "DMA_INDIRECT1D.src_idx_bound_reg.bc_reg = 64: must be one of 0..=63"
        );
    }

    #[test]
    fn nested_json_and_dotted_keys_are_the_same() {
        let flat = to_json(&gather(), None);
        let nested: Value = {
            let mut v = serde_json::from_str::<Value>(&flat).unwrap();
            let map = v.as_object_mut().unwrap();
            let tile = map.remove("header.inst_flags.tile").unwrap();
            let ch = map.remove("header.num_active_channels").unwrap();
            map.insert(
                "header".into(),
                serde_json::json!({"inst_flags": {"tile": tile}, "num_active_channels": ch}),
            );
            v
        };
        assert_eq!(from_value(&nested).unwrap(), gather());
        assert!(matches!(
            from_json("[1]"),
            Err(Error::InstructionText {
                format: "fields",
                ..
            })
        ));
        let e = from_json("{").unwrap_err().to_string();
        assert!(
            e.starts_with("instruction JSON: EOF while parsing an object at line 1 column 1"),
            "{e}"
        );
        let e = toml_error("opcode = ");
        assert!(
            e.starts_with("instruction TOML: TOML parse error at line 1, column 10"),
            "{e}"
        );
    }

    #[test]
    fn hex_accepts_spaces_prefixes_and_byte_tokens() {
        let bytes = gather().encode();
        let dense: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse_hex(&dense).unwrap(), bytes);
        assert_eq!(parse_hex(&format!("0x{dense}\n")).unwrap(), bytes);
        let tokens: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
        assert_eq!(parse_hex(&tokens.join(", ")).unwrap(), bytes);
        assert_eq!(parse_hex(&to_hex(&bytes)).unwrap(), bytes);
        let encoded = format!("# a comment\n{}\n# valid on cayman\n", to_hex(&bytes));
        assert_eq!(parse_hex(&encoded).unwrap(), bytes);
        assert_eq!(to_hex(&bytes).len(), 128 + 3);
        assert!(matches!(
            parse_hex(&dense[..126]),
            Err(Error::InstructionLength { len: 63 })
        ));
        assert_eq!(
            parse_hex(&dense[..127]).unwrap_err().to_string(),
            "instruction hex: 127 hex digits is not a whole number of bytes"
        );
        assert_eq!(
            parse_hex("68 zz").unwrap_err().to_string(),
            "instruction hex: 'z' is not a hex digit"
        );
    }

    #[test]
    fn verdict_names_the_rule() {
        let psum = Tensor4d::contiguous(Addr4::encode(Space::Psum, 0, 0).unwrap(), 8);
        let g: Instruction = S4d4Gt::new(
            Tensor4d::contiguous(sbuf(0, 0), 8),
            psum,
            Dtype::U16,
            Dtype::F32,
            1,
        )
        .into();
        assert_eq!(verdict(&g, Generation::Mariana), "valid on mariana");
        let v = verdict(&g, Generation::Maverick);
        assert!(
            v.starts_with("invalid on maverick: S4D4_GT.dst_mem_pattern"),
            "{v}"
        );
        assert!(
            v.ends_with("maverick (v5) GATHER may not use PSUM (SBUF only)"),
            "{v}"
        );
    }
}
