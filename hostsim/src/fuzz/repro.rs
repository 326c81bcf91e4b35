//! Self-contained reproducers of [`Finding`]s: a folder `DIR/case-N/` that replays the
//! case without the fuzzer.
//!
//! - `oob` and `isa` cases: `scenario.toml` with one `[[tensor]]` per input byte range
//!   (u8, at its exact address, `init` = its `.npy` file beside it) and one `isa` op per
//!   instruction (`hex`, with the bound registers the stream reads); replayed with
//!   `hostsim run DIR/case-N/scenario.toml --mechanism M` for each route.
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

use dma::{Fabric, FabricAddr, Generation, QueueFileWriter, Space};

use crate::error::Error;
use crate::fuzz::{case::Case, isa::hex, Finding, Input, Target};
use crate::npy::{self, NpyArray};
use crate::runtime::Mechanism;
use crate::scenario::exec::write_atomic;
use crate::scenario::model::{
    BoundSpec, DtypeName, GenerationName, Init, IsaOp, MechanismName, OpSpec, Scenario, SpaceName,
    TensorSpec,
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
            let ops = stream_ops(c);
            write_scenario(
                at,
                c.generation,
                &c.fabric,
                &c.regions,
                ops,
                finding.mechanism,
            )?;
            for m in routes_to_show(finding.mechanism) {
                let path = scenario.display();
                commands.push_str(&format!("hostsim run {path} --mechanism {}\n", m.name()));
            }
        }
        Input::Isa(bytes) => {
            let ops = vec![isa_op(bytes, &[])];
            let empty = Fabric::new(Generation::Cayman);
            write_scenario(at, Generation::Cayman, &empty, &[], ops, None)?;
            commands.push_str(&format!("hostsim run {}\n", scenario.display()));
        }
        Input::Dma(c) => {
            write_scenario(
                at,
                c.fabric.generation(),
                &c.fabric,
                &c.regions,
                Vec::new(),
                None,
            )?;
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
    let text = format!(
        "target: {}\ncase seed: {}\nroute: {}\nwhat: {}\n\nreplay:\n{commands}",
        target.name(),
        finding.case_seed.map_or("-".to_string(), |s| s.to_string()),
        finding.mechanism.map_or("-", Mechanism::name),
        finding.what
    );
    write_atomic(&at.join("finding.txt"), text.as_bytes())?;
    Ok(commands)
}

/// The reference and the route that disagreed (every route if unknown).
fn routes_to_show(m: Option<Mechanism>) -> Vec<Mechanism> {
    match m {
        Some(Mechanism::Reference) | None => {
            vec![Mechanism::Reference, Mechanism::Pool, Mechanism::Dge]
        }
        Some(m) => vec![Mechanism::Reference, m],
    }
}

/// One `isa` op per instruction of the stream, each with the case's bound registers.
fn stream_ops(c: &Case) -> Vec<OpSpec> {
    c.stream
        .iter()
        .map(|i| isa_op(&i.encode(), &c.bounds))
        .collect()
}

fn isa_op(bytes: &[u8], bounds: &[(u8, u64)]) -> OpSpec {
    OpSpec::Isa(IsaOp {
        hex: Some(hex(bytes)),
        fields: None,
        bounds: bounds
            .iter()
            .map(|&(reg, bound)| BoundSpec { reg, bound })
            .collect(),
        shapes: Vec::new(),
    })
}

/// `scenario.toml` and one `.npy` per region.
fn write_scenario(
    at: &Path,
    generation: Generation,
    fabric: &Fabric,
    regions: &[(FabricAddr, u64)],
    ops: Vec<OpSpec>,
    mechanism: Option<Mechanism>,
) -> Result<(), Error> {
    let (scenario, arrays) = scenario_of(generation, fabric, regions, ops, mechanism)?;
    for (name, array) in &arrays {
        npy::write(&at.join(format!("{name}.npy")), array)?;
    }
    write_atomic(&at.join("scenario.toml"), scenario.to_toml()?.as_bytes())
}

/// The scenario of a case (one u8 tensor per region, named `in<i>`, `init` its `.npy`)
/// and the arrays of those files.
fn scenario_of(
    generation: Generation,
    fabric: &Fabric,
    regions: &[(FabricAddr, u64)],
    ops: Vec<OpSpec>,
    mechanism: Option<Mechanism>,
) -> Result<(Scenario, Vec<(String, NpyArray)>), Error> {
    let mut tensors = Vec::with_capacity(regions.len());
    let mut arrays = Vec::with_capacity(regions.len());
    for (i, &(addr, len)) in regions.iter().enumerate() {
        let name = format!("in{i}");
        let (spec, array) = region_tensor(fabric, &name, addr, len)?;
        tensors.push(spec);
        arrays.push((name, array));
    }
    let scenario = Scenario {
        generation: GenerationName(generation),
        mechanism: MechanismName(mechanism.unwrap_or(Mechanism::Auto)),
        tensors,
        ops,
    };
    Ok((scenario, arrays))
}

/// The `scenario.toml` text an `oob` case's reproducer holds.
pub fn oob_scenario_text(c: &Case) -> Result<String, Error> {
    scenario_of(c.generation, &c.fabric, &c.regions, stream_ops(c), None)?
        .0
        .to_toml()
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
    use crate::fuzz::{plan_case, Budget, Plan};

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
