//! Self-contained reproducers of [`Finding`]s: a folder `DIR/case-N/` that replays the
//! case without the fuzzer.
//!
//! - `oob` and `isa` cases: `scenario.toml` with one `[[tensor]]` per input byte range
//!   (u8, at its exact address, `init` = its `.npy` file beside it), one typed
//!   `[[tensor]]` per tensor an access-pattern DMA walks (its name, space, dtype, NKI
//!   shape, address and first partition), and one op per op of the stream: an `isa` op
//!   per instruction (`hex`, with the bound and shape registers the stream reads), a `dma_copy`
//!   with `.ap()` tables per access-pattern DMA; replayed with
//!   `hostsim run DIR/case-N/scenario.toml --mechanism M` for each route (not `pool`
//!   when the stream holds an access-pattern DMA, which no POOL kernel serves: a POOL
//!   finding then replays with `auto`, the kernel table's routes). When the routes
//!   disagreed at one op, the scenario stops after it (a later op that fails would keep
//!   `hostsim run` from writing the tensors that show the difference).
//! - `dma` cases: the same tensors and a queue file `queues.dmaq`, replayed with
//!   `hostsim replay`.
//! - every case: `finding.txt` (target, case seed, what differed) and the command that
//!   regenerates it (`hostsim fuzz --target T --case SEED`), the only form for the `ivp`
//!   and `dge` cases, which have no scenario.
//!
//! The folder is written as `case-N.partial` and renamed into place, so an interrupted
//! write never leaves a half reproducer.

use std::fs::File;
use std::path::{Path, PathBuf};

use dma::{ComputeOp, Fabric, FabricAddr, Generation, QueueFileWriter, Space};

use crate::error::Error;
use crate::fuzz::case::{Case, Op};
use crate::fuzz::{isa::hex, Finding, Input, Target};
use crate::nki::{ApDim, ApDma, ApSide, ApTensor, DgeMode, IndexAp, OobMode};
use crate::npy::{self, NpyArray};
use crate::runtime::Mechanism;
use crate::scenario::exec::write_atomic;
use crate::scenario::model::{
    ApPattern, ApSpec, BoundSpec, Compute, Dge, DmaCopy, DtypeName, GenerationName, Init, IsaOp,
    MechanismName, Oob, OpSpec, Scenario, ShapeSpec, SpaceName, TensorSpec,
};

/// Writes the reproducer of `finding` (case `index`) under `dir` and returns the
/// commands that replay it, one per line.
pub fn write(dir: &Path, index: u64, finding: &Finding) -> Result<String, Error> {
    let folder = dir.join(format!("case-{index}"));
    let partial = dir.join(format!("case-{index}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| io(&partial, "created", e))?;
    let result = fill(&partial, &folder, finding);
    let renamed = result.and_then(|commands| {
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::rename(&partial, &folder).map_err(|e| io(&folder, "renamed into place", e))?;
        Ok(commands)
    });
    if renamed.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    renamed
}

fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::FuzzReproducer {
        path: path.display().to_string(),
        rule: format!("cannot be {what}: {e}"),
    }
}

/// Writes the files into `at`; the commands name `folder`, where they will end up.
fn fill(at: &Path, folder: &Path, finding: &Finding) -> Result<String, Error> {
    let target = finding.input.target();
    let forced = finding
        .generation
        .map_or(String::new(), |g| format!(" --generation {}", g.name()));
    let mut commands = match finding.case_seed {
        Some(seed) => format!(
            "hostsim fuzz --target {}{forced} --case {seed}\n",
            target.name()
        ),
        None => String::new(),
    };
    let scenario = folder.join("scenario.toml");
    match &finding.input {
        Input::Oob(c) => {
            let has_ap = c.stream.iter().any(|op| matches!(op, Op::Ap(_)));
            let mechanism = match (finding.mechanism, has_ap) {
                (Some(Mechanism::Pool), true) => Some(Mechanism::Auto),
                (m, _) => m,
            };
            let inputs = Inputs {
                generation: c.generation,
                fabric: &c.fabric,
                regions: &c.regions,
                tensors: &c.tensors,
            };
            let mut ops = stream_ops(c);
            ops.truncate(finding.op.map_or(ops.len(), |op| op + 1));
            write_scenario(at, inputs, ops, mechanism)?;
            for m in routes_to_show(mechanism, has_ap) {
                let path = scenario.display();
                commands.push_str(&format!("hostsim run {path} --mechanism {}\n", m.name()));
            }
        }
        Input::Isa(bytes) => {
            let ops = vec![isa_op(bytes, &[], &[])];
            let empty = Fabric::new(Generation::Cayman);
            let inputs = Inputs {
                generation: Generation::Cayman,
                fabric: &empty,
                regions: &[],
                tensors: &[],
            };
            write_scenario(at, inputs, ops, None)?;
            commands.push_str(&format!("hostsim run {}\n", scenario.display()));
        }
        Input::Dma(c) => {
            let inputs = Inputs {
                generation: c.fabric.generation(),
                fabric: &c.fabric,
                regions: &c.regions,
                tensors: &[],
            };
            write_scenario(at, inputs, Vec::new(), None)?;
            write_queues(&at.join("queues.dmaq"), c.fabric.generation(), &c.queues)?;
            let q = folder.join("queues.dmaq");
            commands.push_str(&format!(
                "hostsim replay {} --scenario {}\n",
                q.display(),
                scenario.display()
            ));
        }
        Input::Ivp(_) | Input::Dge(_) => {}
    }
    let scenario_ops = match (&finding.input, finding.op) {
        (Input::Oob(_), Some(op)) => format!("scenario: ops 0..={op} of the stream\n"),
        _ => String::new(),
    };
    let text = format!(
        "target: {}\ncase seed: {}\nroute: {}\nwhat: {}\n{scenario_ops}\nreplay:\n{commands}",
        target.name(),
        finding.case_seed.map_or("-".to_string(), |s| s.to_string()),
        finding.mechanism.map_or("-", Mechanism::name),
        finding.what
    );
    write_atomic(&at.join("finding.txt"), text.as_bytes())?;
    Ok(commands)
}

/// The reference and the route that disagreed (every route if unknown; no `pool` for a
/// stream with an access-pattern DMA, `has_ap`).
fn routes_to_show(m: Option<Mechanism>, has_ap: bool) -> Vec<Mechanism> {
    match (m, has_ap) {
        (Some(Mechanism::Reference) | None, false) => {
            vec![Mechanism::Reference, Mechanism::Pool, Mechanism::Dge]
        }
        (Some(Mechanism::Reference) | None, true) => vec![Mechanism::Reference, Mechanism::Dge],
        (Some(m), _) => vec![Mechanism::Reference, m],
    }
}

/// One op per op of the stream: an `isa` op per instruction, each with the case's bound
/// and shape registers; a `dma_copy` per access-pattern DMA.
fn stream_ops(c: &Case) -> Vec<OpSpec> {
    let mut bounds = c.bounds.clone();
    let mut shapes: Vec<ShapeSpec> = c
        .shapes
        .iter()
        .map(|&(reg, xyzw)| ShapeSpec { reg, xyzw })
        .collect();
    let mut ops = Vec::new();
    for op in &c.stream {
        match op {
            Op::Inst(i) => ops.push(isa_op(&i.encode(), &bounds, &shapes)),
            Op::Ap(dma) => ops.push(ap_op(dma)),
            // a scenario sets registers with the isa ops after the setting
            Op::Set(s) => {
                for b in &s.bounds {
                    bounds.retain(|&(reg, _)| reg != b.reg);
                    bounds.push((b.reg, b.bound));
                }
                for sh in &s.shapes {
                    shapes.retain(|o| o.reg != sh.reg);
                    shapes.push(ShapeSpec {
                        reg: sh.reg,
                        xyzw: sh.xyzw,
                    });
                }
            }
        }
    }
    ops
}

/// The `dma_copy` op of an access-pattern DMA: both sides as `.ap()` tables over the
/// case's typed tensors; `oob` only with an indexed side and `unique_indices` only with
/// an indexed destination (where the scenario accepts them).
pub fn ap_op(dma: &ApDma) -> OpSpec {
    let compute = match dma.op {
        ComputeOp::None => Compute::None,
        ComputeOp::Add => Compute::Add,
        ComputeOp::Multiply => Compute::Multiply,
        ComputeOp::Max => Compute::Max,
        ComputeOp::Min => Compute::Min,
    };
    let oob = match dma.oob {
        OobMode::Error => Oob::Error,
        OobMode::Skip => Oob::Skip,
    };
    let dge = match dma.dge {
        DgeMode::Chosen => None,
        DgeMode::Software => Some(Dge::Swdge),
        DgeMode::Hardware => Some(Dge::Hwdge),
        DgeMode::Prebuilt => Some(Dge::None),
    };
    OpSpec::DmaCopy(DmaCopy {
        src: ap_spec(&dma.src),
        dst: ap_spec(&dma.dst),
        compute,
        oob: dma.dynamic().then_some(oob),
        dge,
        unique_indices: dma
            .dst
            .vector_offset
            .is_some()
            .then_some(dma.unique_indices),
        name: None,
    })
}

/// One side as an `.ap()` table.
fn ap_spec(s: &ApSide) -> ApSpec {
    let offsets = s.dynamic();
    ApSpec::Pattern(ApPattern {
        tensor: s.tensor.name.clone(),
        dtype: None,
        shape: None,
        ap: Some(pairs(&s.dims)),
        offset: s.offset,
        vector_offset: s.vector_offset.as_ref().map(|v| Box::new(index_spec(v))),
        indirect_dim: offsets.then_some(s.indirect_dim as u32),
        scalar_offset: s.scalar_offset.as_ref().map(|t| t.name.clone()),
    })
}

/// An index view as the scenario names it: the tile, or its `.ap()` table.
fn index_spec(v: &IndexAp) -> ApSpec {
    let name = v.tensor.name.clone();
    match &v.ap {
        None => ApSpec::Whole(name),
        Some(dims) => ApSpec::Pattern(ApPattern {
            tensor: name,
            dtype: None,
            shape: None,
            ap: Some(pairs(dims)),
            offset: v.offset,
            vector_offset: None,
            indirect_dim: None,
            scalar_offset: None,
        }),
    }
}

/// A pattern's `[step, num]` pairs.
fn pairs(dims: &[ApDim]) -> Vec<[i64; 2]> {
    dims.iter().map(|d| [d.step, i64::from(d.num)]).collect()
}

fn isa_op(bytes: &[u8], bounds: &[(u8, u64)], shapes: &[ShapeSpec]) -> OpSpec {
    OpSpec::Isa(IsaOp {
        hex: Some(hex(bytes)),
        fields: None,
        bounds: bounds
            .iter()
            .map(|&(reg, bound)| BoundSpec { reg, bound })
            .collect(),
        shapes: shapes.to_vec(),
        name: None,
    })
}

/// What a reproducer's tensors hold: the generation, the fabric with the inputs, the
/// byte ranges of the raw inputs and the typed tensors.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    generation: Generation,
    fabric: &'a Fabric,
    regions: &'a [(FabricAddr, u64)],
    tensors: &'a [ApTensor],
}

/// `scenario.toml` and one `.npy` per region and typed tensor.
fn write_scenario(
    at: &Path,
    inputs: Inputs<'_>,
    ops: Vec<OpSpec>,
    mechanism: Option<Mechanism>,
) -> Result<(), Error> {
    let (scenario, arrays) = scenario_of(inputs, ops, mechanism)?;
    for (name, array) in &arrays {
        npy::write(&at.join(format!("{name}.npy")), array)?;
    }
    write_atomic(&at.join("scenario.toml"), scenario.to_toml()?.as_bytes())
}

/// The scenario of a case (one u8 tensor per region, named `in<i>`, then the typed
/// tensors under their own names, `init` each one's `.npy`) and the arrays of those
/// files.
fn scenario_of(
    inputs: Inputs<'_>,
    ops: Vec<OpSpec>,
    mechanism: Option<Mechanism>,
) -> Result<(Scenario, Vec<(String, NpyArray)>), Error> {
    let n = inputs.regions.len() + inputs.tensors.len();
    let mut tensors = Vec::with_capacity(n);
    let mut arrays = Vec::with_capacity(n);
    for (i, &(addr, len)) in inputs.regions.iter().enumerate() {
        let name = format!("in{i}");
        let (spec, array) = region_tensor(inputs.fabric, &name, addr, len)?;
        tensors.push(spec);
        arrays.push((name, array));
    }
    for t in inputs.tensors {
        let (spec, array) = typed_tensor(inputs.fabric, t)?;
        tensors.push(spec);
        arrays.push((t.name.clone(), array));
    }
    let scenario = Scenario {
        generation: GenerationName(inputs.generation),
        mechanism: MechanismName(mechanism.unwrap_or(Mechanism::Auto)),
        tensors,
        ops,
    };
    Ok((scenario, arrays))
}

/// The `scenario.toml` text an `oob` case's reproducer holds.
pub fn oob_scenario_text(c: &Case) -> Result<String, Error> {
    let inputs = Inputs {
        generation: c.generation,
        fabric: &c.fabric,
        regions: &c.regions,
        tensors: &c.tensors,
    };
    scenario_of(inputs, stream_ops(c), None)?.0.to_toml()
}

/// The typed tensor `t` as the scenario declares it (at its address and first
/// partition) with its contents on `fabric`, element by element in NKI order.
fn typed_tensor(fabric: &Fabric, t: &ApTensor) -> Result<(TensorSpec, NpyArray), Error> {
    let loc = fabric.map().locate(t.start)?;
    let size = t.dtype.size();
    let row = t.row_elements().max(1);
    let mut data = vec![0u8; usize::try_from(t.elements()).unwrap_or(0) * size];
    for (q, chunk) in data.chunks_mut(row as usize * size).enumerate() {
        fabric.read(t.addr(q as u64 * row), chunk)?;
    }
    let spec = TensorSpec {
        name: t.name.clone(),
        space: SpaceName(loc.space),
        dtype: DtypeName(t.dtype),
        shape: t.shape.clone(),
        init: Init::Npy(PathBuf::from(format!("{}.npy", t.name))),
        addr: Some(loc.offset),
        partition: (loc.space != Space::Hbm).then_some(loc.partition),
    };
    let array = NpyArray {
        descr: npy::storage_descr(t.dtype).to_string(),
        shape: t.shape.clone(),
        data,
    };
    Ok((spec, array))
}

/// The u8 tensor holding `len` bytes at `addr` (one partition row on core).
fn region_tensor(
    fabric: &Fabric,
    name: &str,
    addr: FabricAddr,
    len: u64,
) -> Result<(TensorSpec, NpyArray), Error> {
    let loc = fabric.map().locate(addr)?;
    let mut data = vec![0u8; usize::try_from(len).unwrap_or(0)];
    fabric.read(addr, &mut data)?;
    let (shape, partition) = match loc.space {
        Space::Hbm => (vec![len], None),
        _ => (vec![1, len], Some(loc.partition)),
    };
    let spec = TensorSpec {
        name: name.to_string(),
        space: SpaceName(loc.space),
        dtype: DtypeName(dma::Dtype::U8),
        shape: shape.clone(),
        init: Init::Npy(PathBuf::from(format!("{name}.npy"))),
        addr: Some(loc.offset),
        partition,
    };
    let array = NpyArray {
        descr: npy::storage_descr(dma::Dtype::U8).to_string(),
        shape,
        data,
    };
    Ok((spec, array))
}

fn write_queues(
    path: &Path,
    generation: Generation,
    queues: &[Vec<dma::Descriptor>],
) -> Result<(), Error> {
    let file = File::create(path).map_err(|e| io(path, "created", e))?;
    let mut w = QueueFileWriter::new(std::io::BufWriter::new(file), generation, queues.len())?;
    for (q, descs) in queues.iter().enumerate() {
        for d in descs {
            w.push(q, d)?;
        }
    }
    w.finish()?;
    Ok(())
}

/// Whether `target` can be written as a scenario (else only `finding.txt`).
pub fn has_scenario(target: Target) -> bool {
    matches!(target, Target::Oob | Target::Isa | Target::Dma)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::fuzz::{plan_case, Budget, Plan, Rng};
    use crate::runtime::Runtime;

    /// The first case of a run of `target` seeded with `seed`, as a finding of `route`.
    fn finding_of(target: Target, seed: u64, route: Option<Mechanism>) -> (u64, Finding) {
        let plan = Plan {
            target,
            seed,
            budget: Budget::Iters(1),
            generation: None,
        };
        let (case_seed, input) = plan_case(&plan, 0);
        let f = Finding {
            case_seed: Some(case_seed),
            generation: None,
            input,
            mechanism: route,
            op: None,
            what: "a test finding".into(),
        };
        (case_seed, f)
    }

    fn finding(target: Target) -> (u64, Finding) {
        finding_of(target, 3, Some(Mechanism::Dge))
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hostsim-fuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn an_oob_reproducer_is_a_scenario_that_loads_back() {
        let dir = temp_dir("oob");
        let (seed, f) = finding(Target::Oob);
        let commands = write(&dir, 7, &f).unwrap();
        let folder = dir.join("case-7");
        let expect = format!(
            "hostsim fuzz --target oob --case {seed}\nhostsim run {p} --mechanism reference\nhostsim run {p} --mechanism dge\n",
            p = folder.join("scenario.toml").display()
        );
        assert_eq!(commands, expect);
        let loaded = crate::scenario::load(&folder.join("scenario.toml")).unwrap();
        let Input::Oob(c) = &f.input else { panic!() };
        assert_eq!(loaded.scenario.ops.len(), c.stream.len());
        assert_eq!(loaded.scenario.tensors.len(), c.regions.len());
        assert!(!dir.join("case-7.partial").exists());
        let text = std::fs::read_to_string(folder.join("finding.txt")).unwrap();
        assert!(text.starts_with("target: oob\n"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A finding at one op of a longer stream: the scenario stops after that op.
    #[test]
    fn a_finding_at_one_op_keeps_the_stream_up_to_it() {
        let dir = temp_dir("at-op");
        let c = (0..)
            .map(|s| crate::fuzz::oob::case(Rng::new(s), None))
            .find(|c| c.stream.len() >= 2)
            .unwrap();
        let f = Finding {
            case_seed: None,
            generation: None,
            input: Input::Oob(Box::new(c)),
            mechanism: Some(Mechanism::Dge),
            op: Some(0),
            what: "a test finding".into(),
        };
        write(&dir, 0, &f).unwrap();
        let loaded = crate::scenario::load(&dir.join("case-0/scenario.toml")).unwrap();
        assert_eq!(loaded.scenario.ops.len(), 1);
        let text = std::fs::read_to_string(dir.join("case-0/finding.txt")).unwrap();
        assert!(
            text.contains("\nscenario: ops 0..=0 of the stream\n"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The reproducer replays through `hostsim run`: the reference and the DGE route give
    /// the same tensors, or the same failure, as the fuzzer saw them agree.
    #[test]
    fn reproducers_replay_through_the_scenario_runner() {
        use crate::scenario::commands::{run, Settings};
        let dir = temp_dir("replay");
        let mut ran = 0;
        for index in 0..6 {
            let (_, f) = finding_of(Target::Oob, 40 + index, None);
            write(&dir, index, &f).unwrap();
            let folder = dir.join(format!("case-{index}"));
            let results: Vec<Result<Vec<u8>, String>> = ["reference", "dge"]
                .iter()
                .map(|m| {
                    let out = folder.join(format!("out-{m}"));
                    let settings = Settings {
                        mechanism: Some(m.to_string()),
                        ..Settings::default()
                    };
                    run(&folder.join("scenario.toml"), Some(&out), &settings)
                        .map_err(|e| format!("{:?}", e.kind()))?;
                    std::fs::read(out.join("in0.npy")).map_err(|e| e.to_string())
                })
                .collect();
            assert_eq!(results[0], results[1], "case {index}");
            ran += usize::from(results[0].is_ok());
        }
        assert!(ran > 0, "no reproducer ran to the end");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The case run op by op on `mechanism` up to its first failure: the fabric then
    /// and the failure's kind.
    fn run_case(c: &Case, mechanism: Mechanism) -> (Fabric, Option<ErrorKind>) {
        let mut fabric = c.fabric.clone();
        let mut r = Runtime::new(c.generation, mechanism).unwrap();
        r.reset(c.registers());
        for op in &c.stream {
            let ran = match op {
                Op::Inst(inst) => r.step(&mut fabric, inst).map(|_| ()),
                Op::Ap(dma) => r.run_ap_dma(&mut fabric, dma).map(|_| ()),
                Op::Set(s) => s.apply_registers(r.registers_mut()),
            };
            if let Err(e) = ran {
                return (fabric, Some(e.kind()));
            }
        }
        (fabric, None)
    }

    /// Cases with access-pattern DMAs: `ap` cases, and mixed `oob` ones whose
    /// instructions are all valid (a scenario with an invalid one is refused whole).
    fn ap_cases() -> Vec<Case> {
        let alone = (0..8).map(|s| crate::fuzz::ap::case(Rng::new(s), None));
        let mixed = (0..200)
            .map(|s| crate::fuzz::oob::case(Rng::new(s), None))
            .filter(|c| c.stream.iter().any(|op| matches!(op, Op::Ap(_))))
            .filter(|c| c.stream.iter().any(|op| matches!(op, Op::Inst(_))))
            .filter(|c| c.instructions().all(|i| i.validate(c.generation).is_ok()))
            .take(6);
        alone.chain(mixed).collect()
    }

    /// Case `c` as a finding of route `m` over its whole stream.
    fn case_finding(c: &Case, m: Mechanism) -> Finding {
        Finding {
            case_seed: None,
            generation: None,
            input: Input::Oob(Box::new(c.clone())),
            mechanism: Some(m),
            op: None,
            what: "a test finding".into(),
        }
    }

    /// Runs the reproducer in `folder` (of case `c`, prepared as `prepared`) through
    /// `hostsim run` on `m`: `true` when it ran, every tensor's `.npy` then equal to its
    /// bytes on the fabric the case leaves; `false` when it failed with the case's error
    /// kind and wrote nothing. Anything else panics.
    fn reruns(c: &Case, folder: &Path, prepared: &crate::scenario::Prepared, m: Mechanism) -> bool {
        use crate::scenario::commands::{run, Settings};
        let (fabric, error) = run_case(c, m);
        let out = folder.join(format!("out-{}", m.name()));
        let settings = Settings {
            mechanism: Some(m.name().to_string()),
            ..Settings::default()
        };
        let at = folder.display();
        match (
            run(&folder.join("scenario.toml"), Some(&out), &settings),
            error,
        ) {
            (Ok(_), None) => {
                for (name, want) in prepared.outputs(&fabric).unwrap() {
                    let got = npy::read(&out.join(format!("{name}.npy"))).unwrap();
                    assert_eq!(got, want, "{at} {name} on {}", m.name());
                }
                true
            }
            (Err(e), Some(kind)) => {
                assert_eq!(e.kind(), kind, "{at}: {e}");
                assert!(!out.exists());
                false
            }
            (got, want) => panic!("{at}: run gave {got:?}, the case {want:?}"),
        }
    }

    /// A reproducer of a case with shape registers sets them (the case's, as the fuzzer
    /// ran them) on every `isa` op and re-runs on the reference and the DGE route to the
    /// case's own result.
    #[test]
    fn a_shaped_reproducer_carries_its_shape_registers() {
        let dir = temp_dir("shaped");
        let shaped = (0..2000)
            .map(|s| crate::fuzz::oob::case(Rng::new(s), None))
            .filter(|c| c.labels.contains(&"dma_indirect_shaped"))
            .filter(|c| c.instructions().all(|i| i.validate(c.generation).is_ok()))
            .take(4);
        let mut ran = 0;
        for (index, c) in shaped.enumerate() {
            let f = case_finding(&c, Mechanism::Dge);
            write(&dir, index as u64, &f).unwrap();
            let folder = dir.join(format!("case-{index}"));
            let loaded = crate::scenario::load(&folder.join("scenario.toml")).unwrap();
            let prepared = crate::scenario::prepare(&loaded, Default::default()).unwrap();
            for op in prepared
                .ops
                .iter()
                .filter(|op| !op.lowered.instructions.is_empty())
            {
                let shapes: Vec<(u8, [u32; 4])> =
                    op.lowered.shapes.iter().map(|s| (s.reg, s.xyzw)).collect();
                assert_eq!(shapes, c.shapes, "case {index}");
            }
            for m in [Mechanism::Reference, Mechanism::Dge] {
                ran += usize::from(reruns(&c, &folder, &prepared, m));
            }
        }
        assert!(ran >= 2, "{ran} ran");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A reproducer of a case with access-pattern DMAs loads back to the very same ops
    /// (each `isa` op to its instruction, each `dma_copy` to the case's `ApDma`, tensors
    /// and starts included) and
    /// re-runs through `hostsim run`, on the reference and the DGE route, to the case's
    /// own result: every tensor's `.npy` equals its bytes on the fabric the case leaves,
    /// or the run fails with the case's error kind and writes nothing.
    #[test]
    fn an_ap_reproducer_reruns_to_the_case_result() {
        let dir = temp_dir("ap");
        let (mut ran, mut failed) = (0, 0);
        for (index, c) in ap_cases().into_iter().enumerate() {
            let index = index as u64;
            let f = case_finding(&c, Mechanism::Pool);
            let commands = write(&dir, index, &f).unwrap();
            assert!(!commands.contains("pool"), "{commands}");
            let folder = dir.join(format!("case-{index}"));
            let scenario = folder.join("scenario.toml");
            let loaded = crate::scenario::load(&scenario).unwrap();
            let prepared = crate::scenario::prepare(&loaded, Default::default()).unwrap();
            assert_eq!(prepared.ops.len(), c.stream.len());
            for (got, op) in prepared.ops.iter().zip(&c.stream) {
                let (got, want) = (&got.lowered, op.lowered());
                assert_eq!(got.instructions, want.instructions, "case {index}");
                assert_eq!(got.ap_dmas, want.ap_dmas, "case {index}");
            }
            assert_eq!(prepared.mechanism, Mechanism::Auto);
            for m in [Mechanism::Reference, Mechanism::Dge] {
                match reruns(&c, &folder, &prepared, m) {
                    true => ran += 1,
                    false => failed += 1,
                }
            }
        }
        assert!(ran >= 4 && failed >= 2, "{ran} ran, {failed} failed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_dma_reproducer_holds_a_queue_file_and_an_ivp_one_a_command() {
        let dir = temp_dir("dma");
        let (_, f) = finding(Target::Dma);
        let commands = write(&dir, 0, &f).unwrap();
        assert!(dir.join("case-0/queues.dmaq").exists());
        assert!(commands.contains("hostsim replay"), "{commands}");
        let (seed, f) = finding(Target::Ivp);
        let commands = write(&dir, 1, &f).unwrap();
        assert_eq!(
            commands,
            format!("hostsim fuzz --target ivp --case {seed}\n")
        );
        assert!(!dir.join("case-1/scenario.toml").exists());
        assert!(has_scenario(Target::Isa) && !has_scenario(Target::Dge));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
