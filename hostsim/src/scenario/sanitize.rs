//! The tensor-level sanitizer (`hostsim run --sanitize`, always on under `fuzz
//! --scenario`): every byte an op reads or writes is checked against the tensors the op
//! names.
//!
//! Before an op runs on its route, the reference route runs it on a copy of the fabric
//! whose access log is on ([`dma::watch`]). The routes agree byte for byte, so the
//! reference's accesses are the op's. Each access is split over the scenario's tensors:
//!
//! - bytes of a tensor the op does not name, or of fabric no tensor owns, are a finding;
//! - a read of bytes of an `init = "uninit"` tensor that no op (this one included, up to
//!   that read) has written is a finding.
//!
//! An op names the tensors of its fields (`src`, `dst`, `index`, `table`, `data`, the
//! `.ap()` sides' `vector_offset` and `scalar_offset`); a raw `isa` op names the tensors
//! its address fields (every `*_addr` of the instruction) fall in. A finding names the
//! instruction, the index position and value the reference noted for the access (the
//! DMA_INDIRECT and embedding datapaths note them), the address and the tensor hit, and
//! stops the run as a fault before the op writes anything.

use std::collections::BTreeMap;

use dma::watch::Event;
use dma::{AccessKind, Fabric, FabricAddr};

use super::ops::PreparedOp;
use super::Prepared;
use crate::error::Error;
use crate::isa::text::operand_addresses;
use crate::runtime::{Mechanism, Runtime};

/// The bytes of the fabric each tensor of a scenario owns: `(first byte, end, tensor)`
/// runs, sorted, disjoint.
#[derive(Clone, Debug)]
pub struct Owners(Vec<(u64, u64, usize)>);

impl Owners {
    /// The runs of `p`'s tensors.
    pub fn new(p: &Prepared) -> Result<Owners, Error> {
        let map = dma::AddressMap::new(p.generation);
        let mut owners = Vec::new();
        for t in &p.tensors {
            for (addr, len) in t.runs(&map)? {
                owners.push((addr.0, addr.0 + len, t.index));
            }
        }
        owners.sort_unstable();
        Ok(Owners(owners))
    }

    /// The tensor owning the byte at `addr`.
    pub fn owner(&self, addr: u64) -> Option<usize> {
        self.from(addr).first().filter(|o| o.0 <= addr).map(|o| o.2)
    }

    /// The runs from the first that ends after `addr` on.
    fn from(&self, addr: u64) -> &[(u64, u64, usize)] {
        let i = self.0.partition_point(|o| o.1 <= addr);
        &self.0[i..]
    }
}

/// The bytes each tensor owns, and what the uninit tensors have had written; the
/// reference route that the checks run on.
pub struct Sanitizer {
    owners: Owners,
    /// Per uninit tensor, the byte ranges written so far (`start -> end`, disjoint).
    written: Vec<Option<BTreeMap<u64, u64>>>,
    names: Vec<String>,
    reference: Runtime,
}

/// What an access did wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wrong {
    /// Bytes of a tensor the op does not name (`None`: of no tensor).
    Foreign(Option<usize>),
    /// A read of bytes of an uninit tensor that nothing wrote.
    Unwritten(usize),
}

/// One bad access, with the note before it.
struct Finding {
    kind: AccessKind,
    addr: u64,
    len: u64,
    wrong: Wrong,
    note: Option<(u64, [Option<i64>; 2])>,
}

impl Sanitizer {
    /// A sanitizer over `p`'s tensors, its reference route at `p`'s generation.
    pub fn new(p: &Prepared) -> Result<Sanitizer, Error> {
        let owners = Owners::new(p)?;
        let written = p.tensors.iter().map(|t| t.uninit.then(BTreeMap::new));
        Ok(Sanitizer {
            owners,
            written: written.collect(),
            names: p.tensors.iter().map(|t| t.name.clone()).collect(),
            reference: p.runtime(Mechanism::Reference)?,
        })
    }

    /// Runs `op` on the reference over a copy of `fabric` and checks its accesses: the
    /// first finding as [`Error::SanitizerFinding`]. An op the reference refuses passes
    /// (its own route reports the fault). `fabric` is not changed.
    pub fn check(&mut self, fabric: &Fabric, op: &PreparedOp) -> Result<(), Error> {
        let named = self.named(op, fabric);
        let mut scratch = fabric.clone();
        let lowered = &op.lowered;
        if lowered
            .apply_registers(self.reference.registers_mut())
            .is_err()
        {
            return Ok(());
        }
        let units = lowered.instructions.len() + lowered.ap_dmas.len();
        for unit in 0..units {
            scratch.watch();
            let ran = match lowered.instructions.get(unit) {
                Some(inst) => self.reference.step(&mut scratch, inst).map(drop),
                None => {
                    let dma = &lowered.ap_dmas[unit - lowered.instructions.len()];
                    self.reference.run_ap_dma(&mut scratch, dma).map(drop)
                }
            };
            let events = scratch.take_events();
            if ran.is_err() {
                return Ok(());
            }
            if let Some(f) = self.scan(&named, &events) {
                return Err(self.error(op, unit, f, &named));
            }
        }
        Ok(())
    }

    /// The tensors `op` names (by field; an `isa` op by its address fields).
    fn named(&self, op: &PreparedOp, fabric: &Fabric) -> Vec<usize> {
        let mut named = op.named.clone();
        if op.kind == "isa" {
            for inst in &op.lowered.instructions {
                let addrs = operand_addresses(inst, fabric.map());
                named.extend(addrs.iter().filter_map(|(_, a)| self.owners.owner(a.0)));
            }
        }
        named.sort_unstable();
        named.dedup();
        named
    }

    /// Walks `events` in order, recording uninit writes; the first bad write if any,
    /// else the first bad read.
    fn scan(&mut self, named: &[usize], events: &[Event]) -> Option<Finding> {
        let mut note = None;
        let mut read: Option<Finding> = None;
        for e in events {
            let (addr, len, kind) = match *e {
                Event::Note { position, values } => {
                    note = Some((position, values));
                    continue;
                }
                Event::Access { addr, len, kind } => (addr.0, len, kind),
            };
            if let Some((wrong, lo, hi)) = self.wrong(named, addr, len, kind) {
                let f = Finding {
                    kind,
                    addr: lo,
                    len: hi - lo,
                    wrong,
                    note,
                };
                match kind {
                    AccessKind::Write => return Some(f),
                    AccessKind::Read => read = read.or(Some(f)),
                }
            }
            if kind == AccessKind::Write {
                self.record_write(addr, addr + len);
            }
        }
        read
    }

    /// What is wrong with `len` bytes at `addr`, if anything, and the bytes `lo..hi` of
    /// the access it is wrong about (the first such part).
    fn wrong(
        &self,
        named: &[usize],
        addr: u64,
        len: u64,
        kind: AccessKind,
    ) -> Option<(Wrong, u64, u64)> {
        let end = addr.saturating_add(len);
        let mut at = addr;
        for &(lo, hi, t) in self.owners.from(addr) {
            if at >= end {
                return None;
            }
            if lo > at {
                return Some((Wrong::Foreign(None), at, lo.min(end)));
            }
            let upto = hi.min(end);
            if !named.contains(&t) {
                return Some((Wrong::Foreign(Some(t)), at, upto));
            }
            if kind == AccessKind::Read {
                if let Some((x, y)) = self.first_unwritten(t, at, upto) {
                    return Some((Wrong::Unwritten(t), x, y));
                }
            }
            at = upto;
        }
        (at < end).then_some((Wrong::Foreign(None), at, end))
    }

    /// The first run of bytes of `lo..hi` of tensor `t` that nothing wrote, if any (none
    /// unless `t` is uninit). Written ranges never touch, so the run ends where the next
    /// one starts.
    fn first_unwritten(&self, t: usize, lo: u64, hi: u64) -> Option<(u64, u64)> {
        let Some(Some(ranges)) = self.written.get(t) else {
            return None;
        };
        let from = match ranges.range(..=lo).next_back() {
            Some((_, &end)) if end > lo => end,
            _ => lo,
        };
        let to = ranges
            .range(from..)
            .next()
            .map_or(hi, |(&start, _)| start.min(hi));
        (from < hi).then_some((from, to))
    }

    /// Adds `lo..hi` to the written ranges of the uninit tensors it covers.
    fn record_write(&mut self, lo: u64, hi: u64) {
        let runs: Vec<(u64, u64, usize)> = self
            .owners
            .from(lo)
            .iter()
            .take_while(|o| o.0 < hi)
            .copied()
            .collect();
        for (s, e, t) in runs {
            if let Some(Some(ranges)) = self.written.get_mut(t) {
                insert_range(ranges, lo.max(s), hi.min(e));
            }
        }
    }

    fn error(&self, op: &PreparedOp, unit: usize, f: Finding, named: &[usize]) -> Error {
        let opcode = match op.lowered.instructions.get(unit) {
            Some(inst) => inst.opcode().name(),
            None => "access-pattern DMA",
        };
        let verb = match f.kind {
            AccessKind::Read => "reads",
            AccessKind::Write => "writes",
        };
        let at = match f.note {
            Some((position, values)) => {
                let side = usize::from(f.kind == AccessKind::Write);
                let value = values[side].or(values[1 - side]);
                match value {
                    Some(v) => format!(" for index position {position} (value {v})"),
                    None => format!(" for position {position}"),
                }
            }
            None => String::new(),
        };
        let tensor = |t: usize| format!("tensor {t} ({})", self.names[t]);
        let names: Vec<&str> = named.iter().map(|&t| self.names[t].as_str()).collect();
        let names = names.join(", ");
        let what = match f.wrong {
            Wrong::Foreign(Some(t)) => {
                format!(
                    "{}, which the op does not name (it names {names})",
                    tensor(t)
                )
            }
            Wrong::Foreign(None) => format!("fabric no tensor owns (the op names {names})"),
            Wrong::Unwritten(t) => {
                format!("{}, bytes no op has written (init = \"uninit\")", tensor(t))
            }
        };
        let addr = FabricAddr(f.addr);
        Error::SanitizerFinding {
            instruction: unit,
            opcode,
            finding: format!("{verb} {} bytes at {addr}{at}: {what}", f.len),
        }
    }
}

/// Adds `lo..hi` to disjoint `ranges`, merging what it meets or touches.
fn insert_range(ranges: &mut BTreeMap<u64, u64>, mut lo: u64, mut hi: u64) {
    if lo >= hi {
        return;
    }
    let meeting: Vec<(u64, u64)> = ranges
        .range(..=hi)
        .rev()
        .take_while(|(_, &e)| e >= lo)
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in meeting {
        ranges.remove(&s);
        lo = lo.min(s);
        hi = hi.max(e);
    }
    ranges.insert(lo, hi);
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    use super::*;
    use crate::scenario::{exit_code, load, prepare, Overrides};

    fn example(file: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/bound_register")
            .join(file)
    }

    fn sanitized(text: &str, dir: &Path) -> Result<super::super::exec::Execution, Error> {
        let loaded = super::super::Loaded {
            scenario: super::super::parse("t.toml", text, super::super::Format::Toml)?,
            dir: dir.to_path_buf(),
            file: "t.toml".into(),
        };
        let p = prepare(&loaded, Overrides::default())?;
        let options = super::super::exec::RunOptions {
            record: false,
            sanitize: true,
        };
        let hidden = &mut crate::progress::Progress::hidden(0, "t");
        p.execute_recording(p.mechanism, options, hidden)
            .map(|(e, _)| e)
    }

    #[test]
    fn the_bound_register_example_is_clean_and_its_overrun_a_fault() {
        let dir = example("");
        let clean = std::fs::read_to_string(example("scenario.toml")).unwrap();
        sanitized(&clean, &dir).unwrap();
        let p = prepare(
            &load(&example("overrun.toml")).unwrap(),
            Overrides::default(),
        )
        .unwrap();
        // without the sanitizer the overrun runs: the row of `next` is read
        p.execute().unwrap();
        let overrun = std::fs::read_to_string(example("overrun.toml")).unwrap();
        let e = sanitized(&overrun, &dir).unwrap_err();
        assert_eq!(exit_code(&e), 1);
        assert_eq!(
            e.to_string(),
            "op 0 (isa) failed while running: sanitizer: instruction 0 (DMA_INDIRECT) reads 16 \
             bytes at 0x5dc0 for index position 3 (value 1500): tensor 1 (next), which the op \
             does not name (it names table, idx, out)"
        );
    }

    const UNINIT: &str = "[[tensor]]\nname = \"a\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4, 4]\ninit = \"iota\"\n\
        [[tensor]]\nname = \"u\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4, 4]\ninit = \"uninit\"\n\
        [[tensor]]\nname = \"o\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [4, 4]\n";

    #[test]
    fn reading_unwritten_bytes_of_an_uninit_tensor_is_a_finding() {
        let read = format!("{UNINIT}[[op]]\nop = \"dma_copy\"\nsrc = \"u\"\ndst = \"o\"\n");
        let e = sanitized(&read, Path::new(".")).unwrap_err().to_string();
        // the reference reads `u` whole; the finding names the bytes nothing wrote
        assert!(e.contains("reads 64 bytes at 0x40: tensor 1 (u)"), "{e}");
        assert!(
            e.ends_with("tensor 1 (u), bytes no op has written (init = \"uninit\")"),
            "{e}"
        );
        // written first (rows 0..2 only: row 2 is still unwritten)
        let half = "[[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"a\", ap = [[4, 2], [1, 4]] }\ndst = { tensor = \"u\", ap = [[4, 2], [1, 4]] }\n";
        let text = format!("{UNINIT}{half}[[op]]\nop = \"dma_copy\"\nsrc = \"u\"\ndst = \"o\"\n");
        let e = sanitized(&text, Path::new(".")).unwrap_err().to_string();
        assert!(e.starts_with("op 1 (dma_copy"), "{e}");
        assert!(e.contains("reads 32 bytes at 0x60: tensor 1 (u)"), "{e}");
        // a raw gather (DMA_INDIRECT, a plain copy) into the uninit tensor writes it
        // without reading it
        let gather = "[[tensor]]\nname = \"i\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, 4]\ninit = \"iota\"\n\
            [[op]]\nop = \"dma_gather\"\nsrc = \"a\"\nindex = \"i\"\ndst = \"u\"\n";
        sanitized(&format!("{UNINIT}{gather}"), Path::new(".")).unwrap();
        let whole = format!("{UNINIT}[[op]]\nop = \"dma_copy\"\nsrc = \"a\"\ndst = \"u\"\n[[op]]\nop = \"dma_copy\"\nsrc = \"u\"\ndst = \"o\"\n");
        sanitized(&whole, Path::new(".")).unwrap();
    }

    #[test]
    fn ranges_merge_what_they_meet_or_touch() {
        let mut r = BTreeMap::new();
        let covered = |r: &BTreeMap<u64, u64>| r.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>();
        insert_range(&mut r, 10, 20);
        insert_range(&mut r, 30, 40);
        assert_eq!(covered(&r), [(10, 20), (30, 40)]);
        insert_range(&mut r, 20, 30);
        assert_eq!(covered(&r), [(10, 40)]);
        insert_range(&mut r, 0, 5);
        insert_range(&mut r, 3, 12);
        assert_eq!(covered(&r), [(0, 40)]);
        insert_range(&mut r, 50, 50);
        assert_eq!(covered(&r), [(0, 40)]);
    }

    /// A sanitizer over made-up tensors `(start, len)` (no runtime needed for `scan`),
    /// every other one uninit.
    fn over(tensors: &[(u64, u64)]) -> Sanitizer {
        let mut owners: Vec<(u64, u64, usize)> = tensors
            .iter()
            .enumerate()
            .map(|(t, &(s, l))| (s, s + l, t))
            .collect();
        owners.sort_unstable();
        Sanitizer {
            owners: Owners(owners),
            written: (0..tensors.len())
                .map(|t| (t % 2 == 1).then(BTreeMap::new))
                .collect(),
            names: (0..tensors.len()).map(|t| format!("t{t}")).collect(),
            reference: Runtime::new(dma::Generation::Cayman, Mechanism::Reference).unwrap(),
        }
    }

    /// The byte-by-byte verdict: the first bad byte and its fault, writes before reads.
    fn brute(
        tensors: &[(u64, u64)],
        named: &[usize],
        events: &[(u64, u64, bool)],
    ) -> Option<(u64, u64, Wrong)> {
        let owner = |b: u64| tensors.iter().position(|&(s, l)| s <= b && b < s + l);
        let mut written = std::collections::HashSet::new();
        let mut read = None;
        for &(addr, len, write) in events {
            let fault = |b: u64| match owner(b) {
                None => Some(Wrong::Foreign(None)),
                Some(t) if !named.contains(&t) => Some(Wrong::Foreign(Some(t))),
                Some(t) if !write && t % 2 == 1 && !written.contains(&b) => {
                    Some(Wrong::Unwritten(t))
                }
                _ => None,
            };
            // the first bad byte, and how many bytes from it have the same fault
            let bad = (addr..addr + len).find_map(|b| {
                let w = fault(b)?;
                let n = (b..addr + len).take_while(|&e| fault(e) == Some(w)).count();
                Some((b, n as u64, w))
            });
            match (bad, write) {
                (Some(w), true) => return Some(w),
                (Some(w), false) => read = read.or(Some(w)),
                _ => {}
            }
            if write {
                written.extend(addr..addr + len);
            }
        }
        read
    }

    fn as_events(events: &[(u64, u64, bool)], shorten: u64) -> Vec<Event> {
        let kind = |w: bool| {
            if w {
                AccessKind::Write
            } else {
                AccessKind::Read
            }
        };
        events
            .iter()
            .map(|&(a, l, w)| Event::Access {
                addr: FabricAddr(a),
                len: l - shorten.min(l - 1),
                kind: kind(w),
            })
            .collect()
    }

    /// Tensors `(start, len)`, the ones the op names, accesses `(addr, len, write)`.
    type Layout = (Vec<(u64, u64)>, Vec<usize>, Vec<(u64, u64, bool)>);

    /// Tensors laid out with gaps, the op naming some; accesses near the edges.
    fn layout() -> impl Strategy<Value = Layout> {
        let tensors = proptest::collection::vec((0u64..3, 1u64..12), 1..5).prop_map(|v| {
            let mut at = 0;
            v.into_iter()
                .map(|(gap, len)| {
                    at += gap;
                    let t = (at, len);
                    at += len;
                    t
                })
                .collect::<Vec<_>>()
        });
        tensors.prop_flat_map(|t| {
            let end = t.last().map_or(1, |&(s, l)| s + l + 2);
            let named = proptest::collection::vec(0..t.len(), 0..=t.len());
            let events = proptest::collection::vec((0..end, 1u64..6, any::<bool>()), 1..8);
            (Just(t), named, events)
        })
    }

    fn verdict(s: &mut Sanitizer, named: &[usize], events: &[Event]) -> Option<(u64, u64, Wrong)> {
        s.scan(named, events).map(|f| (f.addr, f.len, f.wrong))
    }

    proptest! {
        #[test]
        fn scan_agrees_with_the_byte_by_byte_check((tensors, mut named, events) in layout()) {
            named.sort_unstable();
            named.dedup();
            let mut s = over(&tensors);
            prop_assert_eq!(
                verdict(&mut s, &named, &as_events(&events, 0)),
                brute(&tensors, &named, &events)
            );
        }
    }

    /// The planted bug "misses a one-byte overrun": a sanitizer that checks one byte
    /// less of every access. The byte-by-byte comparison above catches it: the number
    /// of random cases it takes is printed (`--nocapture`).
    #[test]
    fn a_sanitizer_missing_the_last_byte_is_caught() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mut cases = 0;
        let caught = loop {
            cases += 1;
            assert!(cases < 100_000, "the planted bug was never caught");
            let (tensors, mut named, events) = layout().new_tree(&mut runner).unwrap().current();
            named.sort_unstable();
            named.dedup();
            let mutant = verdict(&mut over(&tensors), &named, &as_events(&events, 1));
            if mutant != brute(&tensors, &named, &events) {
                break cases;
            }
        };
        println!("the one-byte-overrun mutant was caught after {caught} cases");
        assert!(caught < 1000, "caught only after {caught} cases");
    }
}
