//! A scenario built and run op by op (the Python package's `Core`).
//!
//! Tensors are added with their contents and placed as a scenario places them (in the
//! order added, automatically); each op is checked and lowered by [`ops::prepare_op`] and
//! run at once on the session's fabric by one [`Runtime`] ([`exec::run_op`]), as `hostsim
//! run` runs it. The session keeps what ran as a [`Scenario`] and a [`Prepared`], so its
//! [`Report`], its explanation and the folder [`Session::save`] writes are what `hostsim
//! run` and `hostsim explain` give for that folder.
//!
//! A refused or failing op leaves every tensor as it was and is not kept: the runtime
//! writes nothing for a failing instruction, and for an op of several steps the bytes of
//! the tensors it names are saved first and put back on a fault. The bound and shape
//! registers are put back as well.

use std::path::{Path, PathBuf};
use std::time::Instant;

use dma::{Descriptor, Dtype, EngineConfig, Fabric, Generation, Space};

use super::model::{DtypeName, GenerationName, Init, MechanismName, SpaceName};
use super::{exec, ops, place, OpReport, OpSpec, Placed, Prepared, Report, Scenario, TensorSpec};
use crate::dge_route::RecordedReplays;
use crate::error::Error;
use crate::explain::{self, Explanation};
use crate::npy;
use crate::runtime::{Mechanism, RunReport, Runtime};

/// A tensor to add: what a `[[tensor]]` says, and its contents (`None`: zeros).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTensor {
    pub name: String,
    pub space: Space,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// sbuf/psum: the first partition (default 0).
    pub partition: Option<u32>,
    /// Its initial bytes, row-major (partition-major on core).
    pub data: Option<Vec<u8>>,
}

/// One descriptor the DGE route ran, with where it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorAt<'a> {
    /// The op (index in the session).
    pub op: usize,
    /// The engine replay within the op.
    pub replay: usize,
    pub queue: usize,
    /// Its position in its queue.
    pub position: usize,
    pub descriptor: &'a Descriptor,
}

/// A scenario run as it is built.
#[derive(Debug)]
pub struct Session {
    scenario: Scenario,
    prepared: Prepared,
    fabric: Fabric,
    runtime: Runtime,
    /// Report `i` is op `i`'s.
    reports: Vec<RunReport>,
    /// Per op, the queues of each replay its DGE route ran.
    replays: Vec<RecordedReplays>,
    wall_seconds: f64,
}

impl Session {
    /// An empty session on `generation` with `mechanism` and `queues` DMA queues.
    pub fn new(generation: Generation, mechanism: Mechanism, queues: usize) -> Result<Self, Error> {
        if !(1..=dma::queue_file::MAX_QUEUES).contains(&queues) {
            return Err(Error::Scenario {
                what: format!("queues = {queues}"),
                rule: "must be 1..=16 (the DMA rings)".into(),
            });
        }
        let config = EngineConfig {
            queues,
            ..EngineConfig::default()
        };
        let mut runtime = Runtime::with_engine_config(generation, mechanism, config)?;
        runtime.record_queues(true);
        Ok(Session {
            scenario: Scenario {
                generation: GenerationName(generation),
                mechanism: MechanismName(mechanism),
                tensors: Vec::new(),
                ops: Vec::new(),
            },
            prepared: Prepared {
                generation,
                mechanism,
                queues,
                tensors: Vec::new(),
                initial: Vec::new(),
                ops: Vec::new(),
            },
            fabric: Fabric::new(generation),
            runtime,
            reports: Vec::new(),
            replays: Vec::new(),
            wall_seconds: 0.0,
        })
    }

    /// The session as a prepared scenario: its tensors, their initial bytes, the ops that
    /// ran.
    pub fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    /// The session as a scenario (`.npy` inits named `NAME.npy`).
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Checks and places `t` (a scenario's rules), writes its contents onto the fabric
    /// and returns it placed; on an error nothing is added.
    pub fn add_tensor(&mut self, t: NewTensor) -> Result<Placed, Error> {
        let init = match t.data {
            Some(_) => Init::Npy(PathBuf::from(format!("{}.npy", t.name))),
            None => Init::Zeros,
        };
        let spec = TensorSpec {
            name: t.name,
            space: SpaceName(t.space),
            dtype: DtypeName(t.dtype),
            shape: t.shape,
            init,
            addr: None,
            partition: t.partition,
        };
        let mut specs = self.scenario.tensors.clone();
        specs.push(spec);
        // Automatic placement is first fit in order, so re-placing the list gives the
        // earlier tensors their places again and the new one the next free one.
        let mut placed = place::place(self.fabric.map(), &specs)?;
        let new = placed.pop().ok_or_else(|| Error::Scenario {
            what: "tensor".into(),
            rule: "was not placed".into(),
        })?;
        // zeros are written too: a raw `isa` op may have written where it is placed
        let zeros = || vec![0; new.bytes() as usize];
        new.write(&mut self.fabric, t.data.as_ref().map_or(&zeros(), |d| d))?;
        self.scenario.tensors = specs;
        self.prepared.initial.push(t.data);
        self.prepared.tensors.push(new.clone());
        Ok(new)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&Placed> {
        self.prepared.tensors.iter().find(|t| t.name == name)
    }

    /// The current contents of tensor `index` (row-major bytes).
    pub fn read(&self, index: usize) -> Result<Vec<u8>, Error> {
        let t = self
            .prepared
            .tensors
            .get(index)
            .ok_or_else(|| Error::Scenario {
                what: format!("tensor {index}"),
                rule: format!("the session has {} tensors", self.prepared.tensors.len()),
            })?;
        t.read(&self.fabric)
    }

    /// Checks, lowers and runs `op` now; on success it becomes the session's next op.
    /// On an error (invalid, or a fault while running) every tensor is as it was.
    pub fn run(&mut self, op: OpSpec) -> Result<OpReport, Error> {
        let map = *self.fabric.map();
        let index = self.prepared.ops.len();
        let target = (&map, self.prepared.mechanism);
        let prepared = ops::prepare_op(target, index, &op, &self.prepared.tensors)?;
        let saved = self.save_named(&prepared)?;
        let started = Instant::now();
        let result = exec::run_op(&mut self.runtime, &mut self.fabric, &prepared);
        self.wall_seconds += started.elapsed().as_secs_f64();
        let replays = self.runtime.take_recorded();
        // explain asks the runtime again for the requests; here they are not kept
        drop(self.runtime.take_requests());
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                self.restore(saved)?;
                return Err(e);
            }
        };
        let summary = exec::op_report(&prepared, &report);
        self.scenario.ops.push(op);
        self.prepared.ops.push(prepared);
        self.reports.push(report);
        self.replays.push(replays);
        Ok(summary)
    }

    /// The registers and, for an op of several steps, the bytes of the tensors it names.
    fn save_named(&self, op: &ops::PreparedOp) -> Result<Saved, Error> {
        let lowered = &op.lowered;
        let steps = lowered.instructions.len() + lowered.ap_dmas.len();
        let tensors = match steps > 1 {
            true => op.named.clone(),
            false => Vec::new(),
        };
        let bytes = tensors
            .into_iter()
            .map(|i| Ok((i, self.read(i)?)))
            .collect::<Result<_, Error>>()?;
        Ok(Saved {
            registers: self.runtime.state().regs,
            tensors: bytes,
        })
    }

    /// Puts back what [`Session::save_named`] saved.
    fn restore(&mut self, saved: Saved) -> Result<(), Error> {
        *self.runtime.registers_mut() = saved.registers;
        for (i, bytes) in saved.tensors {
            if let Some(t) = self.prepared.tensors.get(i) {
                t.write(&mut self.fabric, &bytes)?;
            }
        }
        Ok(())
    }

    /// The session's `report.json`.
    pub fn report(&self) -> Report {
        let ops = self.prepared.ops.iter().zip(&self.reports);
        let ops = ops.map(|(op, r)| exec::op_report(op, r)).collect();
        Report::with_total(ops, self.wall_seconds)
    }

    /// Every descriptor the DGE route ran so far, in order.
    pub fn descriptors(&self) -> impl Iterator<Item = DescriptorAt<'_>> {
        self.replays.iter().enumerate().flat_map(|(op, replays)| {
            replays
                .iter()
                .enumerate()
                .flat_map(move |(replay, queues)| {
                    queues.iter().enumerate().flat_map(move |(queue, list)| {
                        list.iter()
                            .enumerate()
                            .map(move |(position, descriptor)| DescriptorAt {
                                op,
                                replay,
                                queue,
                                position,
                                descriptor,
                            })
                    })
                })
        })
    }

    /// `hostsim explain` of the ops that ran (on the DGE route, from the initial tensors).
    pub fn explain(&self) -> Result<Explanation, Error> {
        explain::explain_prepared(&self.prepared, None, None).map(|(e, _)| e)
    }

    /// Writes `dir/scenario.toml`, `dir/NAME.npy` for every tensor given contents and
    /// `dir/report.json` (the session's report), all or none: `hostsim run
    /// dir/scenario.toml --queues Q` (Q the session's queue count) runs the session again.
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let arrays: Vec<exec::OutArray<'_>> = self
            .prepared
            .tensors
            .iter()
            .zip(&self.prepared.initial)
            .filter_map(|(t, bytes)| {
                Some(exec::OutArray {
                    name: &t.name,
                    descr: npy::storage_descr(t.dtype),
                    shape: &t.shape,
                    payload: exec::Payload::Bytes(bytes.as_deref()?),
                })
            })
            .collect();
        let text = self.scenario.to_toml()?;
        std::fs::create_dir_all(dir).map_err(|e| Error::Scenario {
            what: dir.display().to_string(),
            rule: format!("the folder cannot be created: {e}"),
        })?;
        let toml = dir.join("scenario.toml");
        let report = self.report();
        exec::write_outputs(&[(&toml, &text)], Some((dir, &arrays, &report)))
    }
}

/// What a failing op must put back.
struct Saved {
    registers: crate::isa::BoundRegisters,
    tensors: Vec<(usize, Vec<u8>)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{load, parse_op, prepare, Overrides};
    use serde_json::json;

    fn u32s(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn tensor(
        name: &str,
        space: Space,
        dtype: Dtype,
        shape: &[u64],
        data: Option<Vec<u8>>,
    ) -> NewTensor {
        NewTensor {
            name: name.into(),
            space,
            dtype,
            shape: shape.to_vec(),
            partition: None,
            data,
        }
    }

    fn op(index: usize, value: serde_json::Value) -> OpSpec {
        parse_op(index, value).unwrap()
    }

    /// A table of 8 rows of 4 u32 (row r holds 4r..4r+4), indices [2, 9, 1] and a
    /// gathered [3, 4] in SBUF, with `n` indices.
    fn gather_session(g: Generation, m: Mechanism, queues: usize) -> Session {
        let mut s = Session::new(g, m, queues).unwrap();
        let table: Vec<u32> = (0..32).collect();
        s.add_tensor(tensor(
            "table",
            Space::Hbm,
            Dtype::U32,
            &[8, 4],
            Some(u32s(&table)),
        ))
        .unwrap();
        s.add_tensor(tensor(
            "idx",
            Space::Sbuf,
            Dtype::U32,
            &[1, 3],
            Some(u32s(&[2, 9, 1])),
        ))
        .unwrap();
        s.add_tensor(tensor("out", Space::Hbm, Dtype::U32, &[3, 4], None))
            .unwrap();
        s
    }

    fn gather(index: usize) -> OpSpec {
        op(
            index,
            json!({"op": "dma_gather", "src": "table", "index": "idx", "dst": "out", "oob": "skip"}),
        )
    }

    #[test]
    fn ops_run_when_added_on_every_mechanism() {
        let want = u32s(&[8, 9, 10, 11, 0, 0, 0, 0, 4, 5, 6, 7]);
        for g in [Generation::Sunda, Generation::Cayman] {
            for m in Mechanism::ALL {
                let mut s = gather_session(g, m, 3);
                let report = s.run(gather(0)).unwrap();
                assert_eq!(s.read(2).unwrap(), want, "{g} {}", m.name());
                assert_eq!(report.oob_skipped, 1);
                assert_eq!(s.report().ops, vec![report]);
            }
        }
    }

    #[test]
    fn descriptors_are_the_ones_the_report_counts() {
        let mut s = gather_session(Generation::Cayman, Mechanism::Dge, 2);
        s.run(gather(0)).unwrap();
        s.run(gather(1)).unwrap();
        let listed: Vec<DescriptorAt> = s.descriptors().collect();
        assert_eq!(listed.len() as u64, s.report().total.descriptors);
        assert_eq!(listed.iter().filter(|d| d.op == 1).count(), 2);
        assert!(listed
            .iter()
            .all(|d| d.queue < 2 && d.descriptor.len() == 16));
    }

    #[test]
    fn a_refused_op_is_not_kept_and_changes_nothing() {
        let mut s = gather_session(Generation::Cayman, Mechanism::Auto, 16);
        let bad = op(
            0,
            json!({"op": "dma_gather", "src": "table", "index": "nope", "dst": "out"}),
        );
        let e = s.run(bad).unwrap_err();
        assert_eq!(crate::scenario::exit_code(&e), 2);
        assert_eq!(
            e.to_string(),
            "op 0 (dma_gather): index = \"nope\": no tensor has that name"
        );
        assert!(s.prepared().ops.is_empty() && s.scenario().ops.is_empty());
        let taken = s.add_tensor(tensor("out", Space::Hbm, Dtype::U8, &[1], None));
        assert!(taken
            .unwrap_err()
            .to_string()
            .contains("already taken by tensor 2"));
        assert_eq!(s.prepared().tensors.len(), 3);
    }

    /// A gather of 5000 indices is two DMA_INDIRECTs; an out-of-bounds index in the
    /// second fails it after the first wrote its rows, and the session puts them back.
    #[test]
    fn a_fault_in_a_later_instruction_leaves_every_tensor_as_it_was() {
        let mut s = Session::new(Generation::Cayman, Mechanism::Auto, 16).unwrap();
        let mut idx = vec![1u32; 5000];
        idx[4500] = 99;
        s.add_tensor(tensor(
            "src",
            Space::Hbm,
            Dtype::U32,
            &[8, 1],
            Some(u32s(&[7; 8])),
        ))
        .unwrap();
        s.add_tensor(tensor(
            "idx",
            Space::Sbuf,
            Dtype::U32,
            &[1, 5000],
            Some(u32s(&idx)),
        ))
        .unwrap();
        s.add_tensor(tensor("dst", Space::Hbm, Dtype::U32, &[5000, 1], None))
            .unwrap();
        let before: Vec<Vec<u8>> = (0..3).map(|i| s.read(i).unwrap()).collect();
        let g = op(
            0,
            json!({"op": "dma_gather", "src": "src", "index": "idx", "dst": "dst"}),
        );
        let e = s.run(g).unwrap_err();
        assert_eq!(crate::scenario::exit_code(&e), 1);
        let at = e.index_fault();
        assert_eq!(
            (at.position, at.value, at.bound),
            (Some(4500), Some(99), Some(8))
        );
        let after: Vec<Vec<u8>> = (0..3).map(|i| s.read(i).unwrap()).collect();
        assert_eq!(after, before);
        assert!(s.prepared().ops.is_empty());
    }

    #[test]
    fn a_saved_session_runs_again_to_the_same_tensors_and_report() {
        let mut s = gather_session(Generation::Sunda, Mechanism::Auto, 16);
        s.run(gather(0)).unwrap();
        let update = json!({"op": "dma_scatter", "src": "out", "index": "idx", "dst": "table", "compute": "add", "oob": "skip", "unique_indices": false});
        s.run(op(1, update)).unwrap();
        let dir = std::env::temp_dir().join(format!("hostsim-session-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        s.save(&dir).unwrap();
        let p = prepare(
            &load(&dir.join("scenario.toml")).unwrap(),
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(p.ops, s.prepared().ops);
        let exec = p.execute().unwrap();
        for (i, t) in p.tensors.iter().enumerate() {
            assert_eq!(
                t.read(&exec.fabric).unwrap(),
                s.read(i).unwrap(),
                "{}",
                t.name
            );
        }
        assert_eq!(Report::of_run(&p, &exec).ops, s.report().ops);
        // `out` started as zeros: no file
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            ["idx.npy", "report.json", "scenario.toml", "table.npy"]
        );
        let explained =
            crate::explain::explain(&dir.join("scenario.toml"), &Default::default(), false);
        let (explained, _) = explained.unwrap();
        assert_eq!(explained.to_json(), s.explain().unwrap().to_json());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
