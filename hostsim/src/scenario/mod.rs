//! # Scenarios: tensors and ops described in TOML (or JSON), with `.npy` data
//!
//! A scenario names a generation and a mechanism, declares tensors (name, space, dtype,
//! shape, initial contents, optional placement) and lists NKI-level ops over them
//! (`dma_gather`, `dma_scatter`, `dma_gather_transpose`, `dma_copy`, `nc_n_gather`,
//! `local_gather`, `embedding_update`, or a raw `isa` instruction). The schema is
//! [`model::Scenario`], a plain data type with [`model::Scenario::to_toml`].
//!
//! The life of a scenario:
//!
//! 1. [`load`] / [`parse`]: the text, with unknown fields denied; a syntax or schema
//!    error names the file, line and column ([`Error::ScenarioSyntax`]), and one inside
//!    an op names the op and its field too.
//! 2. [`prepare`]: the whole scenario is checked before anything runs: tensors placed
//!    and their `.npy` files read and checked ([`place`]), every op lowered to ISA
//!    instructions for the generation through `crate::nki` ([`ops`]). Errors name the
//!    tensor or op by index and name and the rule.
//! 3. [`Prepared::execute`] ([`exec`]): the ops run in order on one
//!    [`crate::runtime::Runtime`]; the first fault stops the run
//!    ([`Error::ScenarioOpFault`]).
//! 4. [`exec::write_outputs`]: only after success, `DIR/<tensor>.npy` and
//!    `DIR/report.json`, each written atomically.
//!
//! [`queues`] records the DGE's descriptor queues of a run into one queue file
//! (`hostsim gen`) and replays such a file over the scenario's tensors (`hostsim
//! replay`). [`session`] builds and runs a scenario op by op (the Python package's
//! `Core`). [`exit_code`] is the CLI's status for an error: 1 for a fault while
//! running, 2 for invalid input.

pub mod commands;
pub mod examples;
pub mod exec;
#[cfg(test)]
mod idioms;
pub mod model;
pub mod ops;
pub mod place;
pub mod queues;
pub mod sanitize;
pub mod session;
mod toml_text;

use std::path::{Path, PathBuf};

use dma::{AddressMap, Generation};

pub use exec::{Execution, OpReport, Report, TotalReport};
use model::TableOnly;
pub use model::{OpSpec, Scenario, TensorSpec};
pub use ops::PreparedOp;
pub use place::Placed;

use crate::error::{Error, ErrorKind};
use crate::runtime::Mechanism;
use toml_text::{string_at, Entry, Step};

/// DMA queues used when neither the command line nor anything else says.
pub const DEFAULT_QUEUES: usize = 16;

/// The text format of a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// JSON for a `.json` extension, TOML otherwise.
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }
}

/// A scenario read from a file, with the folder its `.npy` paths are relative to.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub scenario: Scenario,
    /// The folder `.npy` inits are read from.
    pub dir: PathBuf,
    /// The file's name, for messages.
    pub file: String,
}

/// Reads and parses the scenario at `path` (format by extension).
pub fn load(path: &Path) -> Result<Loaded, Error> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Scenario {
        what: file.clone(),
        rule: format!("the scenario cannot be read: {e}"),
    })?;
    let scenario = parse(&file, &text, Format::of_path(path))?;
    // an empty or wrong file would otherwise run nothing and succeed
    if scenario.ops.is_empty() {
        return Err(Error::Scenario {
            what: file,
            rule: "the scenario has no [[op]]: a scenario runs at least one op".into(),
        });
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(Loaded {
        scenario,
        dir,
        file,
    })
}

/// A `--generation` value, checked as the command line is read so that the error names
/// the flag: a generation's name, kept as written.
pub fn generation_arg(name: &str) -> Result<String, String> {
    dma::Generation::from_name(name)
        .map(|_| name.to_string())
        .map_err(|e| e.to_string())
}

/// Parses scenario text; `file` names it in errors.
pub fn parse(file: &str, text: &str, format: Format) -> Result<Scenario, Error> {
    match format {
        Format::Toml => toml::from_str(text).map(|t: TableOnly<Scenario>| t.0).map_err(|e| {
            let e = toml_error(file, text, &e);
            // JSON read as TOML fails at its first brace: say why
            match (e, text.trim_start().starts_with('{')) {
                (Error::ScenarioSyntax { file, line, column, message }, true) => Error::ScenarioSyntax {
                    file,
                    line,
                    column,
                    message: format!("{message} (the file reads as TOML; a JSON scenario needs the .json extension)"),
                },
                (e, _) => e,
            }
        }),
        Format::Json => serde_json::from_str(text).map(|t: TableOnly<Scenario>| t.0).map_err(|e| {
            let message = strip_position(&e.to_string());
            let doc = serde_json::from_str::<serde_json::Value>(text).ok();
            let table = |key| doc.as_ref().and_then(|d| d.get(key));
            let op = table("op").and_then(|ops| TableFault::find(ops, &message));
            // serde_json stops past the op (it reads a tagged op whole first): the op's
            // own closing brace is named instead
            let end = op.as_ref().and_then(|f| json_op_end(text, f.index));
            let fault = op.or_else(|| TableFault::find_tensor(table("tensor")?, &message));
            let message = fault.map_or(message.clone(), |f| f.describe(&message));
            let (line, column) = end.map_or((e.line(), e.column()), |at| line_column(text, at));
            // serde_json gives column 0 for an error before the first character
            syntax(file, line, column.max(1), &message)
        }),
    }
}

/// One op from the value an `[[op]]` table holds, as op `index` of its scenario; a
/// schema error names the op and its field as [`parse`] does.
pub fn parse_op(index: usize, value: serde_json::Value) -> Result<OpSpec, Error> {
    serde_json::from_value::<TableOnly<OpSpec>>(value.clone())
        .map(|t| t.0)
        .map_err(|e| {
            let message = e.to_string();
            let ops = serde_json::Value::Array(vec![value]);
            let fault = TableFault::find(&ops, &message).map(|f| TableFault { index, ..f });
            let (what, rule) = fault.map_or((format!("op {index}"), message.clone()), |f| {
                f.parts(&message)
            });
            Error::Scenario { what, rule }
        })
}

/// A TOML error at the line and column of what it is about: the field of an op (found
/// again by [`TableFault`]), a misspelt key, or else where the parser stopped.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> Error {
    let span = e.span().unwrap_or(0..0);
    // (a custom error's message, such as an `.ap()` table's, ends in a newline)
    let message = e.message().trim_end();
    let ops = toml::from_str::<toml::Table>(text).ok();
    let ops = ops.and_then(|doc| serde_json::to_value(doc.get("op")?).ok());
    if let Some(fault) = ops.and_then(|ops| TableFault::find(&ops, message)) {
        let at = fault.toml_at(text, message).unwrap_or(span.start);
        let (line, column) = line_column(text, at);
        return syntax(file, line, column, &fault.describe(message));
    }
    let entries = toml_text::entries(text);
    let name = message_keys(e.message()).1;
    // the misspelt key's own line, inside the span of the table serde names
    let key = |k: &&Entry| span.contains(&k.at) && k.keys.last().map(String::as_str) == name;
    let at = name
        .and(entries.iter().find(key))
        .map_or(span.start, |k| k.at);
    let (line, column) = line_column(text, at);
    let context = TableContext::of(&entries, text, at);
    syntax(file, line, column, &context.describe(text, at, message))
}

/// Whether an error's `message` names `key` itself: `` `key` `` (an unknown field), or
/// `key[i] ...` (a bad element of it).
fn names_key(message: &str, key: &str) -> bool {
    message.contains(&format!("`{key}`")) || message.starts_with(&format!("{key}["))
}

/// Where in an `[[op]]` or `[[tensor]]` table of TOML `text` an error is that neither serde
/// nor [`TableFault`] places (a tensor's field, or a number TOML cannot hold, which fails
/// the document before any op is read): the table, and the keys its byte is written under
/// in it.
struct TableContext {
    /// `op N (kind)` or `tensor N (name)` (none outside them).
    table: Option<String>,
    /// The key path of the line (with the sub-table's, `[op.src]`, or a dotted key's)
    /// and, inside its inline table, the innermost key before the byte.
    keys: Vec<String>,
}

impl TableContext {
    /// The context of byte `at` of TOML `text`, whose [`toml_text::entries`] are `entries`.
    fn of(entries: &[Entry], text: &str, at: usize) -> TableContext {
        let Some(entry) = entries.iter().take_while(|e| e.at <= at).last() else {
            return TableContext {
                table: None,
                keys: Vec::new(),
            };
        };
        TableContext {
            table: entry
                .table
                .as_ref()
                .and_then(|t| table_label(entries, text, t)),
            keys: entry
                .value
                .map_or_else(|| entry.keys.clone(), |v| keys_at(entry, text, v, at)),
        }
    }

    /// `message` naming the table and the keys, with the number and TOML's range when the
    /// parser could not hold it.
    fn describe(&self, text: &str, at: usize, message: &str) -> String {
        let mut parts: Vec<String> = self.table.iter().cloned().collect();
        // the keys down to the one the message names (`foo.bar = 3`: unknown field `foo`)
        let named = self.keys.iter().position(|k| names_key(message, k));
        parts.extend_from_slice(&self.keys[..named.unwrap_or(self.keys.len())]);
        let rule = match message.starts_with("number too") {
            true => {
                let rest = text.get(at..).unwrap_or_default();
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || "_+-.".contains(c)));
                let number = &rest[..end.unwrap_or(rest.len())];
                format!("`{number}`: {message} (a TOML integer is -2^63 ..= 2^63 - 1)")
            }
            false => message.to_string(),
        };
        parts.push(rule);
        parts.join(": ")
    }
}

/// `op N (kind)` or `tensor N (name)`: element `index` of the `[[op]]` or `[[tensor]]`
/// tables, labelled by its kind or name (decoded); none for another table.
fn table_label(entries: &[Entry], text: &str, (table, index): &(String, usize)) -> Option<String> {
    let label_key = match table.as_str() {
        "op" => "op",
        "tensor" => "name",
        _ => return None,
    };
    let entry = key_in(entries, (table.as_str(), *index), &[label_key]);
    let value = entry.map(|e| e.value.unwrap_or(e.at));
    let label = value
        .and_then(|v| string_at(text, v))
        .map(|(label, _)| label);
    Some(format!(
        "{table} {index} ({})",
        label.as_deref().unwrap_or("?")
    ))
}

/// The keys byte `at` is written under, at or after key line `entry` (its value at byte
/// `value`): in the value, the line's keys and the inline keys around the byte; on a later
/// line (one TOML could not read as a key line), the keys that line starts with.
fn keys_at(entry: &Entry, text: &str, value: usize, at: usize) -> Vec<String> {
    let (inner, end) = toml_text::inner(text, value);
    if text.get(end..at).is_some_and(|after| after.contains('\n')) {
        let own = toml_text::line_keys(text, entry.at).len();
        let table = &entry.keys[..entry.keys.len().saturating_sub(own)];
        return [table.to_vec(), toml_text::line_keys(text, at)].concat();
    }
    let around =
        |r: &std::ops::Range<usize>| r.contains(&at) || (r.end == text.len() && at == r.end);
    let steps = inner
        .iter()
        .rev()
        .find(|i| around(&i.value))
        .map(|i| i.path.as_slice());
    with_steps(entry.keys.clone(), steps.unwrap_or_default(), false)
}

/// `keys` followed by `steps` as a message names them: an element as `[i]` after its
/// array's key (`bounds[0]`), elements after the last key left out unless `all` (the
/// element is then the table the message is about).
fn with_steps(mut keys: Vec<String>, steps: &[Step], all: bool) -> Vec<String> {
    let last_key = steps.iter().rposition(|s| matches!(s, Step::Key(_)));
    let shown = if all {
        steps.len()
    } else {
        last_key.map_or(0, |k| k + 1)
    };
    for step in &steps[..shown] {
        match (step, keys.last_mut()) {
            (Step::Key(k), _) => keys.push(k.clone()),
            (Step::Element(i), Some(key)) => key.push_str(&format!("[{i}]")),
            (Step::Element(i), None) => keys.push(format!("[{i}]")),
        }
    }
    keys
}

/// Where the key `path` (a field and the keys inside it) of element `index` of the
/// `[[table]]` tables is written: the entry of the field matching most of `path` wins
/// (`src.offset = ...` over `src.tensor = ...`, a key under `[op.src]` over the header),
/// the first of equals.
fn key_in<'e>(
    entries: &'e [Entry],
    (table, index): (&str, usize),
    path: &[&str],
) -> Option<&'e Entry> {
    let matched = |e: &Entry| e.keys.iter().zip(path).take_while(|(k, p)| k == *p).count();
    let e = entries
        .iter()
        .filter(|e| {
            e.table
                .as_ref()
                .is_some_and(|(t, i)| t.as_str() == table && *i == index)
        })
        .map(|e| (matched(e), e))
        .filter(|&(n, _)| n > 0)
        .max_by_key(|&(n, e)| (n, std::cmp::Reverse(e.at)))?;
    Some(e.1)
}

/// The keys inside field `field` that a schema `message` names: its leading `key: `
/// parts (`offset: invalid type ...`), then an unknown field's name.
fn message_path<'m>(field: &'m str, message: &'m str) -> Vec<&'m str> {
    let (keys, unknown) = message_keys(message);
    let unknown = unknown.filter(|k| *k != field);
    std::iter::once(field).chain(keys).chain(unknown).collect()
}

/// A schema `message`'s leading `key: ` parts, and the unknown field it names after them.
fn message_keys(message: &str) -> (Vec<&str>, Option<&str>) {
    let is_key =
        |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut parts = message.split(": ").peekable();
    let keys = std::iter::from_fn(|| parts.next_if(|k| is_key(k))).collect();
    let unknown = parts.next().and_then(|p| p.strip_prefix("unknown field `"));
    (keys, unknown.and_then(|rest| rest.split('`').next()))
}

fn syntax(file: &str, line: usize, column: usize, message: &str) -> Error {
    Error::ScenarioSyntax {
        file: file.to_string(),
        line,
        column,
        message: message.trim().to_string(),
    }
}

/// serde_json's message without its trailing " at line L column C".
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// The op (or tensor) a schema error is about, and its field: serde reads an op (a table
/// tagged by its `op` field) whole, so its error names neither, and the TOML parser places
/// it at the first `[[op]]`. Each op is read again alone, the first whose own error is the
/// document's is the one, and its field is the one without which that error goes away
/// (serde raises a value's error as it reads the value, before it looks for missing ones).
/// A JSON scenario's tensors are found the same way.
#[derive(Debug, PartialEq, Eq)]
struct TableFault {
    /// `op` or `tensor`.
    table: &'static str,
    index: usize,
    /// The op's kind, or the tensor's name.
    kind: String,
    field: Option<String>,
    /// Inside the field, the steps down to the element or key at fault.
    steps: Vec<Step>,
}

impl TableFault {
    /// The fault among `ops` (the document's `op` array) whose error is `message`.
    fn find(ops: &serde_json::Value, message: &str) -> Option<TableFault> {
        TableFault::find_in::<OpSpec>(ops, message, ("op", "op"))
    }

    /// The fault among `tensors` (the document's `tensor` array) whose error is `message`.
    fn find_tensor(tensors: &serde_json::Value, message: &str) -> Option<TableFault> {
        TableFault::find_in::<TensorSpec>(tensors, message, ("tensor", "name"))
    }

    /// The fault among `items`, each read as a `T`, whose error is `message`; `table` and
    /// the key whose value labels an item.
    fn find_in<T: serde::de::DeserializeOwned + model::Table>(
        items: &serde_json::Value,
        message: &str,
        (table, label): (&'static str, &str),
    ) -> Option<TableFault> {
        let fails = |item: &serde_json::Value| {
            let read = serde_json::from_value::<TableOnly<T>>(item.clone());
            read.is_err_and(|e| e.to_string() == message)
        };
        let (index, item) = items
            .as_array()?
            .iter()
            .enumerate()
            .find(|(_, item)| fails(item))?;
        // an item that is no table at all is at fault whole (it has no kind or fields)
        let Some(fields) = item.as_object() else {
            let (kind, field, steps) = (String::new(), None, Vec::new());
            return Some(TableFault {
                table,
                index,
                kind,
                field,
                steps,
            });
        };
        let kind = fields.get(label).and_then(|k| k.as_str()).unwrap_or("?");
        // a missing field is no field's fault (and removing another required one would
        // change which is reported missing)
        let missing = message.starts_with("missing field");
        let field = fields.keys().filter(|k| *k != "op" && !missing).find(|k| {
            let mut rest = fields.clone();
            rest.remove(*k);
            !fails(&serde_json::Value::Object(rest))
        });
        // inside the field too, unless the message names keys itself (an `.ap()` table's)
        let steps = field.filter(|_| message_keys(message).0.is_empty());
        // (an incomplete table is at fault itself, not one of the keys it has)
        let keys = !message.contains(model::INCOMPLETE);
        let steps = steps.map_or_else(Vec::new, |f| culprit(item, f, keys, &fails));
        Some(TableFault {
            table,
            index,
            kind: kind.to_string(),
            field: field.cloned(),
            steps,
        })
    }

    /// `message` naming the op, and the field unless the message names it already.
    fn describe(&self, message: &str) -> String {
        let (op, rule) = self.parts(message);
        format!("{op}: {rule}")
    }

    /// [`TableFault::describe`] in two: `op N (kind)`, and the rest.
    fn parts(&self, message: &str) -> (String, String) {
        let TableFault {
            table, index, kind, ..
        } = self;
        let incomplete = message.contains(model::INCOMPLETE);
        let keys = with_steps(
            self.field.iter().cloned().collect(),
            &self.steps,
            incomplete,
        );
        // the keys down to the one the message names (an unknown field)
        let named = keys.iter().position(|k| names_key(message, k));
        let mut parts = keys[..named.unwrap_or(keys.len())].to_vec();
        parts.push(message.to_string());
        let label = match kind.is_empty() {
            true => format!("{table} {index}"),
            false => format!("{table} {index} ({kind})"),
        };
        (label, parts.join(": "))
    }

    /// Where in TOML `text` the fault is: the misspelt key of an unknown field, else the
    /// value of the field (of `op` when no one field is at fault), inside the op's table;
    /// inside that value, the element or key at fault.
    fn toml_at(&self, text: &str, message: &str) -> Option<usize> {
        let field = self.field.as_deref().unwrap_or("op");
        let entries = toml_text::entries(text);
        // the steps inside the field: found by `culprit`, or the keys the message names
        let named = message_path(field, message).into_iter().skip(1);
        let named: Vec<_> = named.map(|k| Step::Key(k.to_string())).collect();
        let steps = if self.steps.is_empty() {
            &named
        } else {
            &self.steps
        };
        let keys = steps.iter().map_while(|s| match s {
            Step::Key(k) => Some(k.as_str()),
            Step::Element(_) => None,
        });
        let path: Vec<&str> = std::iter::once(field).chain(keys).collect();
        let entry = key_in(&entries, ("op", self.index), &path)?;
        // the steps below what the entry's line writes (`src.vector_offset = { ap = .. }`)
        let written = entry.keys.iter().skip(1).zip(steps);
        let written = written.take_while(|(k, s)| **s == Step::Key(k.to_string()));
        let below = &steps[written.count()..];
        let value = entry.value.unwrap_or(entry.at);
        let key = message_keys(message).1.is_some();
        let (inner, _) = toml_text::inner(text, value);
        Some(
            match inner.iter().find(|i| !below.is_empty() && i.path == below) {
                Some(i) if key => i.at,
                Some(i) => i.value.start,
                None if key => entry.at,
                None => value,
            },
        )
    }
}

/// The steps inside `field` of `item` down to what the error `fails` tells is about: while
/// the value there is an array or (with `keys`) a table, the element or key without which
/// the error goes away (an element replaced by its neighbour, so that a fixed length
/// still holds; a key removed). A value of more than [`CULPRIT_CHILDREN`] is not searched: each try
/// reads the whole item again.
fn culprit(
    item: &serde_json::Value,
    field: &str,
    keys: bool,
    fails: &impl Fn(&serde_json::Value) -> bool,
) -> Vec<Step> {
    let mut steps = Vec::new();
    loop {
        let pointer = json_pointer(field, &steps);
        let children: Vec<Step> = match item.pointer(&pointer) {
            Some(serde_json::Value::Array(a)) => (0..a.len()).map(Step::Element).collect(),
            Some(serde_json::Value::Object(o)) if keys => {
                o.keys().cloned().map(Step::Key).collect()
            }
            _ => return steps,
        };
        if children.len() > CULPRIT_CHILDREN {
            return steps;
        }
        let without = |step: &Step| {
            let mut rest = item.clone();
            match (rest.pointer_mut(&pointer), step) {
                (Some(serde_json::Value::Array(a)), Step::Element(i)) if a.len() > 1 => {
                    a[*i] = a[(i + 1) % a.len()].clone()
                }
                (Some(serde_json::Value::Array(a)), Step::Element(i)) => _ = a.remove(*i),
                (Some(serde_json::Value::Object(o)), Step::Key(k)) => _ = o.remove(k),
                _ => return false,
            }
            !fails(&rest)
        };
        match children.into_iter().find(without) {
            Some(step) => steps.push(step),
            None => return steps,
        }
    }
}

/// The most elements or keys of one value [`culprit`] searches.
const CULPRIT_CHILDREN: usize = 64;

/// The JSON pointer of `steps` inside `field` of an item.
fn json_pointer(field: &str, steps: &[Step]) -> String {
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    let steps = steps.iter().map(|s| match s {
        Step::Key(k) => format!("/{}", escape(k)),
        Step::Element(i) => format!("/{i}"),
    });
    std::iter::once(format!("/{}", escape(field)))
        .chain(steps)
        .collect()
}

/// The byte of the closing brace of the `index`-th element of the top-level `"op"` array
/// of JSON `text` (a document that parses), found by scanning: strings skipped, brackets
/// counted.
fn json_op_end(text: &str, index: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut key, mut in_ops, mut element) = (String::new(), false, 0usize);
    let mut string = String::new();
    for (at, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                (false, c) => string.push(c),
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                string.clear();
            }
            ':' if depth == 1 => key = std::mem::take(&mut string),
            '[' if depth == 1 && key == "op" => {
                in_ops = true;
                depth += 1;
            }
            '{' | '[' => depth += 1,
            '}' if in_ops && depth == 3 && element == index => return Some(at),
            ',' if in_ops && depth == 2 => element += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                in_ops &= depth >= 2;
            }
            _ => {}
        }
    }
    None
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |n| n + 1);
    (line, before[start..].chars().count() + 1)
}

/// Command-line overrides of a scenario's settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub generation: Option<Generation>,
    pub mechanism: Option<Mechanism>,
    pub queues: Option<usize>,
}

/// A scenario checked whole and ready to run: tensors placed with their initial bytes,
/// ops lowered for the generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub generation: Generation,
    pub mechanism: Mechanism,
    /// DMA queues (1..=16).
    pub queues: usize,
    /// Tensor `i` is the scenario's `[[tensor]]` `i`.
    pub tensors: Vec<Placed>,
    /// Their initial bytes (`None`: zeros).
    pub initial: Vec<Option<Vec<u8>>>,
    /// Op `i` is the scenario's `[[op]]` `i`.
    pub ops: Vec<PreparedOp>,
}

/// Checks the whole of `loaded` (settings, tensors, `.npy` files, ops) and prepares it.
pub fn prepare(loaded: &Loaded, over: Overrides) -> Result<Prepared, Error> {
    prepare_with(loaded, over, &|file: &Path| {
        crate::npy::read(&loaded.dir.join(file))
    })
}

/// [`prepare`], the `.npy` inits read by `read` (the embedded demo supplies its own).
pub fn prepare_with(
    loaded: &Loaded,
    over: Overrides,
    read: place::NpyReader<'_>,
) -> Result<Prepared, Error> {
    let s = &loaded.scenario;
    let generation = over.generation.unwrap_or(s.generation.0);
    let queues = over.queues.unwrap_or(DEFAULT_QUEUES);
    if !(1..=dma::queue_file::MAX_QUEUES).contains(&queues) {
        return Err(Error::Scenario {
            what: format!("queues = {queues}"),
            rule: "must be 1..=16 (the DMA rings)".into(),
        });
    }
    let map = AddressMap::new(generation);
    let tensors = place::place(&map, &s.tensors)?;
    // the ops' rules need the placement alone: checked before any initial bytes are
    // read or made (a tensor may be 1 GiB)
    let mechanism = over.mechanism.unwrap_or(s.mechanism.0);
    let ops = ops::prepare((generation, mechanism), &s.ops, &tensors)?;
    let initial = s
        .tensors
        .iter()
        .zip(&tensors)
        .map(|(spec, t)| place::initial_bytes(t.index, spec, t, read))
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Prepared {
        generation,
        mechanism,
        queues,
        tensors,
        initial,
        ops,
    })
}

/// The CLI's exit status for `e`: 1 for a fault while an op ran (a hard OOB index, an
/// index off the fabric, duplicate destinations, a fabric or descriptor fault), 2 for
/// everything else (invalid input or usage, caught before anything ran).
pub fn exit_code(e: &Error) -> u8 {
    let fault = matches!(
        e.kind(),
        ErrorKind::IndexOutOfBounds(_)
            | ErrorKind::IndexAddress(_)
            | ErrorKind::DuplicateDestination
            | ErrorKind::Sanitizer
            | ErrorKind::Fabric
            | ErrorKind::Descriptor
            | ErrorKind::KernelFault
    );
    match e {
        Error::ScenarioOpFault { .. } if fault => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::model::{Compute, GenerationName, Init, Oob, RowDma};
    use super::*;
    use proptest::prelude::*;

    const GOOD: &str = r#"
generation = "sunda"
[[tensor]]
name = "t"
space = "hbm"
dtype = "f32"
shape = [4, 2]
init = "iota"
[[op]]
op = "dma_gather"
src = "t"
index = "i"
dst = "t"
"#;

    fn syntax_error(text: &str, format: Format) -> (usize, usize, String) {
        match parse("s.toml", text, format) {
            Err(Error::ScenarioSyntax {
                file,
                line,
                column,
                message,
            }) => {
                assert_eq!(file, "s.toml");
                (line, column, message)
            }
            other => panic!("not a syntax error: {other:?}"),
        }
    }

    /// Asserts that TOML `text` fails at `at` (line, column) with a message starting `want`.
    fn placed(text: &str, at: (usize, usize), want: &str) {
        let (line, column, message) = syntax_error(text, Format::Toml);
        assert!(message.starts_with(want), "{message}");
        assert_eq!((line, column), at, "{message}");
    }

    #[test]
    fn parses_the_schema_with_its_defaults() {
        let s = parse("s.toml", GOOD, Format::Toml).unwrap();
        assert_eq!(s.generation, GenerationName(Generation::Sunda));
        assert_eq!(s.mechanism.0, Mechanism::Auto);
        assert_eq!(s.tensors[0].init, Init::Iota);
        assert_eq!(s.tensors[0].addr, None);
        let want = OpSpec::DmaGather(RowDma {
            src: "t".into(),
            index: "i".into(),
            dst: "t".into(),
            compute: Compute::None,
            oob: Oob::Error,
            unique_indices: None,
            name: None,
        });
        assert_eq!(s.ops, vec![want]);
        let json_as_toml = parse("j.toml", "{\"generation\": \"cayman\"}", Format::Toml);
        let e = json_as_toml.unwrap_err().to_string();
        assert!(e.starts_with("j.toml:1:1: "), "{e}");
        assert!(
            e.ends_with("a JSON scenario needs the .json extension)"),
            "{e}"
        );
        let empty = parse("e.toml", "", Format::Toml).unwrap();
        assert_eq!(empty.generation.0, Generation::Cayman);
    }

    /// An empty file (or one of tensors only) would run nothing and succeed (found by an
    /// audit): refused, naming the file.
    #[test]
    fn a_scenario_file_without_ops_is_refused() {
        let dir = std::env::temp_dir().join(format!("hostsim-no-ops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [
            ("empty.toml", ""),
            ("tensors.toml", GOOD.split("[[op]]").next().unwrap()),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let e = load(&path).unwrap_err().to_string();
            assert!(
                e.ends_with(&format!(
                    "{name}: the scenario has no [[op]]: a scenario runs at least one op"
                )),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// serde's derived forms take a positional array for a table, which would fill its
    /// fields by their order in the source, unnamed: refused wherever a table belongs.
    #[test]
    fn positional_arrays_are_refused_where_tables_belong() {
        let table = "invalid type: sequence, expected a";
        let cases = [
            ("tensor = [[\"t\", \"hbm\", \"f32\", [4, 2]]]\n", Format::Toml, (1, 11)),
            (
                "[[tensor]]\nname = \"t\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4]\n[[op]]\nop = \"isa\"\nhex = \"00\"\nbounds = [[0, 100]]\n",
                Format::Toml,
                (9, 11),
            ),
            ("[\"sunda\", \"reference\"]", Format::Json, (1, 1)),
        ];
        for (text, format, at) in cases {
            let (line, column, message) = syntax_error(text, format);
            assert!(message.contains(table), "{message}");
            assert_eq!((line, column), at, "{message}");
        }
        let op = serde_json::json!(["dma_copy", "a", "b", "add"]);
        let e = parse_op(0, op).unwrap_err().to_string();
        assert!(e.contains(table), "{e}");
        // in JSON an item that is no table is named by its place (found by a re-check)
        let ops = r#"{"op": [{"op": "dma_copy", "src": "a", "dst": "a"}, ["x"]]}"#;
        let (_, _, message) = syntax_error(ops, Format::Json);
        assert_eq!(
            message,
            "op 1: invalid type: sequence, expected an [[op]] table"
        );
        let tensors = r#"{"tensor": [["a", "hbm", "f32", [8, 4]]]}"#;
        let (_, _, message) = syntax_error(tensors, Format::Json);
        assert!(
            message.starts_with("tensor 0: invalid type: sequence"),
            "{message}"
        );
        // the named forms still read
        let json = r#"{"tensor": [{"name": "t", "space": "hbm", "dtype": "f32", "shape": [4]}]}"#;
        assert_eq!(
            parse("s.json", json, Format::Json).unwrap().tensors.len(),
            1
        );
        assert_eq!(parse("s.toml", GOOD, Format::Toml).unwrap().ops.len(), 1);
    }

    #[test]
    fn toml_errors_point_at_line_and_column() {
        let bad_value = GOOD.replace("dtype = \"f32\"", "dtype = \"f64\"");
        let (line, column, message) = syntax_error(&bad_value, Format::Toml);
        assert_eq!((line, column), (6, 9), "{message}");
        assert!(message.contains("f64"), "{message}");
        let unknown = GOOD.replace("init = \"iota\"", "colour = \"red\"");
        let (line, _, message) = syntax_error(&unknown, Format::Toml);
        assert_eq!(line, 8, "{message}");
        assert!(message.contains("unknown field `colour`"), "{message}");
        let (line, column, _) = syntax_error("generation = \n", Format::Toml);
        assert_eq!((line, column), (1, 14));
        let op = GOOD.replace("\"dma_gather\"", "\"dma_gatherr\"");
        let (line, _, message) = syntax_error(&op, Format::Toml);
        assert_eq!(line, 10, "{message}");
        assert!(message.contains("dma_gatherr"), "{message}");
        // a misspelt key of an op (a tagged table, reported as a whole): its own line
        let key = GOOD.replace("index = \"i\"", "  indx = \"i\"");
        let (line, column, message) = syntax_error(&key, Format::Toml);
        assert_eq!((line, column), (12, 3), "{message}");
        assert!(message.contains("unknown field `indx`"), "{message}");
    }

    #[test]
    fn tensor_faults_and_numbers_toml_cannot_hold_name_their_table_and_key() {
        let copy = format!("{GOOD}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"t\", ap = [[1, 4]], indirect_dim = 0 }}\ndst = \"t\"\n");
        let cases = [
            (
                GOOD.replace("[4, 2]", "[-4, 2]"),
                (7, 10),
                "tensor 0 (t): shape: invalid value: integer `-4`, expected u64",
            ),
            (
                GOOD.replace("init = \"iota\"", "addr = 18446744073709551615"),
                (8, 8),
                "tensor 0 (t): addr: `18446744073709551615`: number too large to fit in target type (a TOML integer is -2^63 ..= 2^63 - 1)",
            ),
            (
                GOOD.replace("init", "colour"),
                (8, 1),
                "tensor 0 (t): unknown field `colour`, expected one of",
            ),
            (
                copy.replace("[[1, 4]]", "[[1, 99999999999999999999]]"),
                (16, 33),
                "op 1 (dma_copy): src: ap: `99999999999999999999`: number too large",
            ),
            // a table inside an op that lacks a field is named, not the op (found by an
            // audit: `op 1 (dma_copy): missing field `tensor``)
            (
                copy.replace("tensor = \"t\", ap", "ap"),
                (16, 7),
                "op 1 (dma_copy): src: incomplete table: missing field `tensor`",
            ),
            (
                format!("{GOOD}[[op]]\nop = \"isa\"\nhex = \"00\"\nbounds = [{{ reg = 0, bound = 9 }}, {{ reg = 2 }}]\n"),
                (17, 35),
                "op 1 (isa): bounds[1]: incomplete table: missing field `bound`",
            ),
            (
                copy.replace("[[1, 4]]", "[[1, 4], [2]]"),
                (16, 29),
                "op 1 (dma_copy): src: ap[1] (a [step, num] pair): invalid length 1, expected an array of length 2",
            ),
            (
                copy.replace("[[1, 4]]", "[[1, 4], 7]"),
                (16, 29),
                "op 1 (dma_copy): src: ap[1] (a [step, num] pair): invalid type: integer `7`",
            ),
            (
                copy.replace("indirect_dim = 0", "indirect_dim = -99999999999999999999"),
                (16, 53),
                "op 1 (dma_copy): src: indirect_dim: `-99999999999999999999`: number too small",
            ),
        ];
        for (text, at, want) in cases {
            placed(&text, at, want);
        }
        // a multi-line array's element lines are no table headers, and its keys are the
        // ones its first line names; a number outside any table still gets its value and
        // TOML's range
        let lines = copy.replace("[[1, 4]]", "[\n  [1, 4],\n  [1, 99999999999999999999]\n]");
        let (_, _, message) = syntax_error(&lines, Format::Toml);
        assert!(
            message
                .starts_with("op 1 (dma_copy): src: ap: `99999999999999999999`: number too large"),
            "{message}"
        );
        let top = GOOD.replace(
            "generation = \"sunda\"",
            "generation = 99999999999999999999",
        );
        let (_, _, message) = syntax_error(&top, Format::Toml);
        assert!(
            message.starts_with("generation: `99999999999999999999`: number too large"),
            "{message}"
        );
        assert!(
            message.ends_with("(a TOML integer is -2^63 ..= 2^63 - 1)"),
            "{message}"
        );
        // a JSON scenario's tensor faults name the tensor and the field too
        for (text, want) in [
            (
                GOOD.replace("[4, 2]", "[-4, 2]"),
                "tensor 0 (t): shape: invalid value",
            ),
            (
                GOOD.replace("init", "colour"),
                "tensor 0 (t): unknown field `colour`",
            ),
            (
                GOOD.replace("space = \"hbm\"", ""),
                "tensor 0 (t): missing field `space`",
            ),
        ] {
            let doc: toml::Table = toml::from_str(&text).unwrap();
            let json = serde_json::to_string_pretty(&doc).unwrap();
            let (_, _, message) = syntax_error(&json, Format::Json);
            assert!(message.starts_with(want), "{message}");
        }
    }

    /// GOOD and a second op, a `dma_copy` whose `src` is `src` (the rest of a line).
    fn with_copy(header: &str, src: &str) -> String {
        format!("{GOOD}{header}\nop = \"dma_copy\"\ndst = \"t\"\nsrc{src}\n")
    }

    const TOO_LARGE: &str = "`99999999999999999999`: number too large to fit in target type (a TOML integer is -2^63 ..= 2^63 - 1)";

    #[test]
    fn quoted_headers_count_and_headers_inside_strings_do_not() {
        let ap = " = { tensor = \"t\", ap = [[1, 99999999999999999999]] }";
        let want = format!("op 1 (dma_copy): src: ap: {TOO_LARGE}");
        for header in ["[[\"op\"]]", "[[ 'op' ]]", "[[\"o\\u0070\"]] # [[op]]"] {
            let (_, _, message) = syntax_error(&with_copy(header, ap), Format::Toml);
            assert_eq!(message, want, "{header}");
        }
        // text of a multi-line string is no header
        for quotes in ["\"\"\"", "'''"] {
            let name = format!("name = {quotes}\n[[op]]\nop = \"dma_scatter\"\\\"\"\"\n{quotes}");
            let text = with_copy("[[op]]", ap).replacen(
                "dst = \"t\"\n",
                &format!("dst = \"t\"\n{name}\n"),
                1,
            );
            let (_, _, message) = syntax_error(&text, Format::Toml);
            assert_eq!(message, want, "{quotes}");
        }
        // a schema error in a quoted header's op is placed there
        let mul = with_copy("[['op']]", " = \"t\"\ncompute = \"mul\"");
        placed(
            &mul,
            (18, 11),
            "op 1 (dma_copy): compute: unknown variant `mul`",
        );
    }

    #[test]
    fn a_tables_label_is_its_name_decoded() {
        for (name, label) in [
            ("\"a\\\"b\"", "a\"b"),
            ("'c\"d'", "c\"d"),
            ("\"\\u00e9\"", "é"),
        ] {
            let text = GOOD
                .replace("name = \"t\"", &format!("name = {name}"))
                .replace("init = \"iota\"", "addr = 99999999999999999999");
            let (_, _, message) = syntax_error(&text, Format::Toml);
            assert_eq!(message, format!("tensor 0 ({label}): addr: {TOO_LARGE}"));
        }
    }

    #[test]
    fn a_dotted_unknown_key_and_a_plain_op_table_are_named_as_written() {
        // `foo.bar = 3` in a tensor: the unknown field is `foo`, placed at its line, and
        // `bar` (under it) is no key of the message
        let dotted = GOOD.replacen("name = \"t\"\n", "name = \"t\"\nfoo.bar = 3\n", 1);
        let (line, column, message) = syntax_error(&dotted, Format::Toml);
        assert_eq!((line, column), (5, 1), "{message}");
        assert!(
            message.starts_with("tensor 0 (t): unknown field `foo`"),
            "{message}"
        );
        // `[op]` after the ops is a table of the document root, not of the last op
        let (_, _, message) = syntax_error(&format!("{GOOD}[op]\n"), Format::Toml);
        assert!(message.starts_with("invalid table header"), "{message}");
    }

    /// Asserts that TOML `text` fails at its first `mark` with the message `want`.
    fn placed_at(text: &str, mark: &str, want: &str) {
        let at = line_column(text, text.find(mark).expect("the mark is in the text"));
        assert_eq!(
            syntax_error(text, Format::Toml),
            (at.0, at.1, want.to_string())
        );
    }

    #[test]
    fn errors_in_and_after_inline_values_name_the_keys_as_written() {
        // a line without its `=`: its own key, not the line's before
        let bare = with_copy("[[op]]", " = \"t\"\noob   \"skip\"");
        placed_at(&bare, "\"skip", "op 1 (dma_copy): oob: expected `.`, `=`");
        // text after an inline table: its field, not the table's last key
        let after = with_copy("[[op]]", " = { tensor = \"t\", ap = [[1, 4]] } junk");
        placed_at(
            &after,
            "junk",
            "op 1 (dma_copy): src: expected newline, `#`",
        );
        // a string that never closes: its field, not a key inside the string
        let open = with_copy("[[op]]", " = \"\"\"abc\nx = 1");
        let (_, _, message) = syntax_error(&open, Format::Toml);
        assert!(
            message.starts_with("op 1 (dma_copy): src: invalid multiline"),
            "{message}"
        );
        // an op whose kind is an unclosed multi-line string: no label read from it
        let kind =
            with_copy("[[op]]", " = \"t\"").replace("op = \"dma_copy\"", "op = \"\"\"dma_copy");
        let (_, _, message) = syntax_error(&kind, Format::Toml);
        assert!(
            message.starts_with("op 1 (?): op: invalid multiline"),
            "{message}"
        );
        // an unknown key in a nested inline table: at the key
        let foo = " = { tensor = \"t\", vector_offset = { tensor = \"t\", foo = 1 } }";
        let (line, column, message) = syntax_error(&with_copy("[[op]]", foo), Format::Toml);
        let want = "op 1 (dma_copy): src: vector_offset: unknown field `foo`";
        assert!(message.starts_with(want), "{message}");
        let text = with_copy("[[op]]", foo);
        assert_eq!(
            (line, column),
            line_column(&text, text.find("foo").unwrap())
        );
        // nested inline tables: every key down to the number
        let nested = " = { tensor = \"t\", vector_offset = { tensor = \"t\", ap = [[1, 99999999999999999999]] } }";
        placed_at(
            &with_copy("[[op]]", nested),
            "999",
            &format!("op 1 (dma_copy): src: vector_offset: ap: {TOO_LARGE}"),
        );
    }

    #[test]
    fn schema_errors_in_arrays_of_inline_tables_name_the_element_and_key() {
        let isa = |bounds: &str| format!("{GOOD}[[op]]\nop = \"isa\"\nbounds = {bounds}\n");
        placed_at(
            &isa("[{ reg = 0, bound = 1 }, { reg = 2, bound = \"x\" }]"),
            "\"x\"",
            "op 1 (isa): bounds[1]: bound: invalid type: string \"x\", expected u64",
        );
        let (line, column, message) =
            syntax_error(&isa("[{ reg = 0, bound = 1, foo = 2 }]"), Format::Toml);
        assert!(
            message.starts_with("op 1 (isa): bounds[0]: unknown field `foo`"),
            "{message}"
        );
        let text = isa("[{ reg = 0, bound = 1, foo = 2 }]");
        assert_eq!(
            (line, column),
            line_column(&text, text.find("foo").unwrap())
        );
        // an element of a fixed length: the wrong one, not the first
        let shapes = format!(
            "{GOOD}[[op]]\nop = \"isa\"\nshapes = [{{ reg = 8, xyzw = [16, 4, \"x\", 1] }}]\n"
        );
        placed_at(
            &shapes,
            "\"x\"",
            "op 1 (isa): shapes[0]: xyzw: invalid type: string \"x\", expected u32",
        );
        // an array too long to search: the field alone
        let many = vec!["{ reg = 0, bound = 1 }"; CULPRIT_CHILDREN].join(", ");
        let many = isa(&format!("[{many}, {{ reg = 2, bound = \"x\" }}]"));
        let (_, _, message) = syntax_error(&many, Format::Toml);
        assert_eq!(
            message,
            "op 1 (isa): bounds: invalid type: string \"x\", expected u64"
        );
        // a wrong length: the array, not its first element
        let short = shapes.replace("[16, 4, \"x\", 1]", "[16, 4, 2]");
        let (line, column, message) = syntax_error(&short, Format::Toml);
        assert!(
            message.starts_with("op 1 (isa): shapes[0]: xyzw: invalid length 3"),
            "{message}"
        );
        assert_eq!(
            (line, column),
            line_column(&short, short.find("[16").unwrap())
        );
        // a JSON scenario's message is the same
        let json = r#"{"generation": "sunda", "op": [{"op": "isa", "bounds": [{"reg": 0, "bound": "x"}]}]}"#;
        let (_, _, message) = syntax_error(json, Format::Json);
        assert_eq!(
            message,
            "op 0 (isa): bounds[0]: bound: invalid type: string \"x\", expected u64"
        );
    }

    #[test]
    fn sub_tables_and_dotted_keys_name_the_op_and_the_key_path() {
        let want = format!("op 1 (dma_copy): src: ap: {TOO_LARGE}");
        let sub = with_copy("[[op]]", "").replace(
            "\nsrc\n",
            "\n[op.src]\ntensor = \"t\"\nap = [[1, 99999999999999999999]]\n",
        );
        let dotted = with_copy(
            "[[op]]",
            ".tensor = \"t\"\nsrc.ap = [[1, 99999999999999999999]]",
        );
        for text in [sub, dotted] {
            let (_, _, message) = syntax_error(&text, Format::Toml);
            assert_eq!(message, want, "{text}");
        }
        // a schema error inside [op.src], or on a dotted key after another of its field:
        // named by TableFault, placed at its own value (an unknown key at the key)
        let want = "op 1 (dma_copy): src: indirect_dim: invalid value: integer `-1`, expected u32";
        let bad = with_copy("[[op]]", "")
            .replace("\nsrc\n", "\n[op.src]\ntensor = \"t\"\nindirect_dim = -1\n");
        assert_eq!(syntax_error(&bad, Format::Toml), (19, 16, want.to_string()));
        let dotted = with_copy("[[op]]", ".tensor = \"t\"\nsrc.indirect_dim = -1");
        assert_eq!(
            syntax_error(&dotted, Format::Toml),
            (18, 20, want.to_string())
        );
        let unknown = with_copy("[[op]]", ".tensor = \"t\"\nsrc.offsett = 3");
        let (line, column, message) = syntax_error(&unknown, Format::Toml);
        assert_eq!((line, column), (18, 1), "{message}");
        assert!(message.starts_with("op 1 (dma_copy): src: unknown field `offsett`"));
    }

    #[test]
    fn op_errors_name_the_op_and_the_field_at_its_line() {
        // two ops: the second's faults are placed in the second, not at the first [[op]]
        let two = format!("{GOOD}[[op]]\nop = \"dma_scatter\"\nsrc = \"t\"\nindex = \"i\"\ndst = \"t\"\ncompute = \"add\"\n# a comment\n  oob =  \"error\"\n");
        let cases = [
            (
                two.replace("compute = \"add\"", "compute = \"mul\""),
                (19, 11),
                "op 1 (dma_scatter): compute: unknown variant `mul`, expected one of",
            ),
            (
                two.replace("\"error\"", "true"),
                (21, 10),
                "op 1 (dma_scatter): oob: invalid type: boolean `true`",
            ),
            (
                two.replace("dst = \"t\"\ncompute", "compute"),
                (15, 6),
                "op 1 (dma_scatter): missing field `dst`",
            ),
            (
                two.replace("index = \"i\"\ndst = \"t\"\n", "index = \"i\"\n"),
                (10, 6),
                "op 0 (dma_gather): missing field `dst`",
            ),
            (
                two.replace("  oob", "  ob"),
                (21, 3),
                "op 1 (dma_scatter): unknown field `ob`, expected one of",
            ),
        ];
        for (text, at, want) in cases {
            placed(&text, at, want);
            // the same scenario in JSON: the same message
            let doc: toml::Table = toml::from_str(&text).unwrap();
            let json = serde_json::to_string_pretty(&doc).unwrap();
            let (_, _, message) = syntax_error(&json, Format::Json);
            assert!(message.starts_with(want), "{message}");
        }
        // a bad value inside a dma_copy side's .ap() table: its key named, at its value
        let copy = format!("{GOOD}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"t\", ap = [[1, 4]], indirect_dim = -1 }}\ndst = \"t\"\n");
        let (line, column, message) = syntax_error(&copy, Format::Toml);
        let want = "op 1 (dma_copy): src: indirect_dim: invalid value: integer `-1`, expected u32";
        let at = line_column(&copy, copy.find("-1").unwrap());
        assert_eq!((line, column, message.as_str()), (at.0, at.1, want));
        // a tensor's fault is not taken for an op's
        let tensor = two.replace("dtype = \"f32\"", "dtype = \"f64\"");
        let (line, _, message) = syntax_error(&tensor, Format::Toml);
        assert_eq!(line, 6, "{message}");
        assert!(!message.starts_with("op "), "{message}");
    }

    #[test]
    fn parse_op_names_the_op_by_its_index_and_the_field() {
        let op = serde_json::json!({"op": "dma_copy", "src": "a", "dst": "b", "compute": "mul"});
        let e = parse_op(3, op).unwrap_err().to_string();
        assert!(
            e.starts_with("op 3 (dma_copy): compute: unknown variant `mul`, expected one of"),
            "{e}"
        );
        let e = parse_op(0, serde_json::json!({"op": "dma_gather"})).unwrap_err();
        assert_eq!(e.to_string(), "op 0 (dma_gather): missing field `src`");
        let ok = serde_json::json!({"op": "nc_n_gather", "data": "d", "index": "i", "dst": "o"});
        assert_eq!(parse_op(1, ok).unwrap().kind(), "nc_n_gather");
    }

    #[test]
    fn an_ap_tables_bad_value_names_its_key() {
        let copy = |src: serde_json::Value| {
            let op = serde_json::json!({"op": "dma_copy", "src": src, "dst": "o"});
            parse_op(0, op).unwrap_err().to_string()
        };
        let ap = |key: &str, value: serde_json::Value| {
            let mut t = serde_json::json!({"tensor": "t", "ap": [[1, 4]]});
            t[key] = value;
            copy(t)
        };
        let e = ap("indirect_dim", serde_json::json!(-1));
        assert!(
            e.contains("indirect_dim: invalid value: integer `-1`"),
            "{e}"
        );
        let e = ap("offset", serde_json::json!(-2));
        assert!(e.contains("offset: invalid value: integer `-2`"), "{e}");
        let e = ap("vector_offset", serde_json::json!(3));
        assert!(
            e.contains("vector_offset: invalid type: integer `3`"),
            "{e}"
        );
        let e = ap("ap", serde_json::json!([[1, 2], [1]]));
        assert!(
            e.contains("src: ap[1] (a [step, num] pair): invalid length 1"),
            "{e}"
        );
        let e = ap("offst", serde_json::json!(1));
        assert!(e.contains("unknown field `offst`, expected one of"), "{e}");
        let e = copy(serde_json::json!({"ap": [[1, 4]]}));
        assert!(e.contains("missing field `tensor`"), "{e}");
        let src = serde_json::json!({"tensor": "t", "ap": [[1, 4]], "offset": 3});
        let op = parse_op(
            0,
            serde_json::json!({"op": "dma_copy", "src": src, "dst": "o"}),
        );
        let Ok(OpSpec::DmaCopy(c)) = op else {
            panic!("{op:?}")
        };
        let model::ApSpec::Pattern(p) = c.src else {
            panic!("{:?}", c.src)
        };
        assert_eq!(
            (p.tensor.as_str(), p.ap, p.offset),
            ("t", Some(vec![[1, 4]]), 3)
        );
    }

    #[test]
    fn json_is_the_same_schema() {
        let s = parse("s.toml", GOOD, Format::Toml).unwrap();
        let json = s.to_json().unwrap();
        assert_eq!(parse("s.json", &json, Format::Json).unwrap(), s);
        let (line, column, message) = syntax_error(
            "{\n  \"generation\": \"cayman\",\n  \"bogus\": 1\n}",
            Format::Json,
        );
        assert_eq!((line, column), (3, 9), "{message}");
        assert!(message.starts_with("unknown field `bogus`"), "{message}");
        assert_eq!(syntax_error("", Format::Json).0, 1);
        assert_eq!(syntax_error("", Format::Json).1, 1, "columns start at 1");
        // an op's error is placed at the op's closing brace (serde_json stops past it:
        // at the next op, or the array's end), strings with brackets and braces skipped
        let ops = "{\"tensor\": [], \"op\": [\n {\"op\": \"dma_copy\", \"src\": {\"tensor\": \"a]}\", \"vector_offst\": \"i\"},\n  \"dst\": \"b\"},\n {\"op\": \"dma_copy\", \"src\": \"b\", \"dst\": \"b\"}\n]}";
        let (line, column, message) = syntax_error(ops, Format::Json);
        assert_eq!((line, column), (3, 13), "{message}");
        assert!(
            message.starts_with("op 0 (dma_copy): src: unknown field `vector_offst`"),
            "{message}"
        );
        let one = ops.replace(
            ",\n {\"op\": \"dma_copy\", \"src\": \"b\", \"dst\": \"b\"}",
            "",
        );
        assert_eq!(syntax_error(&one, Format::Json).0, 3);
        assert_eq!(Format::of_path(Path::new("a/b.JSON")), Format::Json);
        assert_eq!(Format::of_path(Path::new("a/b.toml")), Format::Toml);
    }

    #[test]
    fn a_table_of_the_wrong_type_is_named_as_the_scenario_writes_it() {
        let text = "generation = \"cayman\"\ntensor = [\"x\"]\n";
        let (_, _, message) = syntax_error(text, Format::Toml);
        assert_eq!(
            message,
            "tensor: invalid type: string \"x\", expected a [[tensor]] table"
        );
        let json = r#"{"tensor": ["op"], "op": []}"#;
        let (_, _, message) = syntax_error(json, Format::Json);
        assert!(
            message.ends_with("expected a [[tensor]] table"),
            "{message}"
        );
        let (_, _, message) = syntax_error(&format!("{GOOD}bounds = [3]\n"), Format::Toml);
        assert!(
            !message.contains("struct") && !message.contains("Spec"),
            "{message}"
        );
        let e = parse_op(0, serde_json::json!(3)).unwrap_err().to_string();
        assert!(e.contains("an [[op]] table"), "{e}");
    }

    #[test]
    fn line_columns_count_characters() {
        assert_eq!(line_column("ab\ncdé\nx", 7), (2, 4));
        assert_eq!(line_column("ab\ncdé\nx", 8), (3, 1));
        assert_eq!(line_column("", 0), (1, 1));
    }

    #[test]
    fn exit_codes_split_faults_from_invalid_input() {
        let oob = Error::IndexOutOfBounds {
            side: crate::core_state::IndexSide::Src,
            position: 3,
            value: 9,
            bound: 4,
        };
        let fault = Error::ScenarioOpFault {
            index: 0,
            op: "dma_gather",
            operands: String::new(),
            source: Box::new(oob),
        };
        assert_eq!(exit_code(&fault), 1);
        let usage = Error::ScenarioOpFault {
            index: 0,
            op: "dma_copy",
            operands: String::new(),
            source: Box::new(Error::NoPoolKernel {
                opcode: 0xb8,
                name: "DMA_MEMCPY",
            }),
        };
        assert_eq!(exit_code(&usage), 2);
        let invalid = Error::Scenario {
            what: "x".into(),
            rule: "y".into(),
        };
        assert_eq!(exit_code(&invalid), 2);
    }

    fn arb_tensor() -> impl Strategy<Value = TensorSpec> {
        let dtypes = proptest::sample::select(dma::Dtype::ALL.to_vec());
        let spaces = proptest::sample::select(vec![dma::Space::Hbm, dma::Space::Sbuf]);
        (
            "[a-z][a-z0-9_]{0,6}",
            spaces,
            dtypes,
            proptest::collection::vec(1u64..9, 1..4),
            proptest::option::of(0u64..1 << 20),
            prop_oneof![
                Just(Init::Zeros),
                Just(Init::Iota),
                Just(Init::Uninit),
                Just(Init::Npy("d/x.npy".into()))
            ],
        )
            .prop_map(|(name, space, dtype, shape, addr, init)| TensorSpec {
                name,
                space: model::SpaceName(space),
                dtype: model::DtypeName(dtype),
                shape,
                init,
                addr,
                partition: (space != dma::Space::Hbm).then_some(3),
            })
    }

    fn arb_op() -> impl Strategy<Value = OpSpec> {
        prop_oneof![
            ("[a-z]{1,4}", any::<bool>()).prop_map(|(n, skip)| OpSpec::DmaScatter(model::RowDma {
                src: n.clone(),
                index: n.clone(),
                dst: n,
                compute: Compute::Add,
                oob: if skip { Oob::Skip } else { Oob::Error },
                unique_indices: Some(skip),
                name: skip.then(|| "a load".into()),
            })),
            (
                0u64..100,
                1i64..50,
                proptest::option::of(0u32..3),
                any::<bool>()
            )
                .prop_map(|(offset, n, dim, skip)| OpSpec::DmaCopy(model::DmaCopy {
                    src: model::ApSpec::Pattern(model::ApPattern {
                        tensor: "a".into(),
                        dtype: skip.then_some(model::DtypeName(dma::Dtype::U8)),
                        shape: skip.then(|| vec![2, n as u64]),
                        ap: Some(vec![[1, n], [n, 2]]),
                        offset,
                        vector_offset: dim.map(|d| {
                            Box::new(match d {
                                2 => model::ApSpec::Pattern(model::ApPattern {
                                    tensor: "i".into(),
                                    dtype: None,
                                    shape: None,
                                    ap: Some(vec![[4, 3], [1, 1]]),
                                    offset: offset % 4,
                                    vector_offset: None,
                                    indirect_dim: None,
                                    scalar_offset: None,
                                }),
                                _ => model::ApSpec::Whole("i".into()),
                            })
                        }),
                        indirect_dim: dim,
                        scalar_offset: None,
                    }),
                    dst: model::ApSpec::Whole("b".into()),
                    compute: Compute::Max,
                    oob: skip.then_some(Oob::Skip),
                    unique_indices: None,
                    dge: skip.then_some(model::Dge::Hwdge),
                    name: None,
                })),
            (1u32..33, proptest::option::of(1u32..100)).prop_map(|(per, valid)| {
                OpSpec::LocalGather(model::LocalGather {
                    src: "s".into(),
                    index: "i".into(),
                    dst: "d".into(),
                    num_elem_per_idx: per,
                    num_valid_indices: valid,
                    name: None,
                })
            }),
            Just(OpSpec::Isa(model::IsaOp {
                hex: Some("b8".repeat(64)),
                fields: None,
                bounds: vec![model::BoundSpec { reg: 2, bound: 77 }],
                shapes: vec![model::ShapeSpec {
                    reg: 8,
                    xyzw: [16, 4, 2, 1],
                }],
                name: Some("raw \"isa\"".into()),
            })),
        ]
    }

    proptest! {
        #[test]
        fn to_toml_round_trips(
            tensors in proptest::collection::vec(arb_tensor(), 0..4),
            ops in proptest::collection::vec(arb_op(), 0..4),
            g in 0usize..4,
        ) {
            let s = Scenario {
                generation: GenerationName(Generation::ALL[g]),
                mechanism: model::MechanismName(Mechanism::Dge),
                tensors,
                ops,
            };
            let text = s.to_toml().unwrap();
            prop_assert_eq!(parse("p.toml", &text, Format::Toml).unwrap(), s.clone());
            prop_assert_eq!(parse("p.json", &s.to_json().unwrap(), Format::Json).unwrap(), s);
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,200}") {
            let _ = parse("f.toml", &text, Format::Toml);
            let _ = parse("f.json", &text, Format::Json);
        }
    }
}
