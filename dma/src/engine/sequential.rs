//! The plain synchronous reference replay: queue by queue, descriptor by descriptor,
//! through the fabric's `&mut` API, no runtime and no threads.

use std::ops::Range;

use crate::compute::ComputeOp;
use crate::descriptor::{Descriptor, SEMAPHORES};
use crate::error::Error;
use crate::fabric::Fabric;

use super::cast::execute_cast;
use super::exec::with_fill_pattern;
use super::validate::{check_ranges, replay_error};

/// Replays `queues` one after another: queue 0 runs until it ends or reaches a WAIT not yet
/// met, then queue 1, and so on, round after round, until every queue is done. Fails
/// closed: every range is checked and the whole schedule computed (a wait that is never
/// met is [`Error::SemaphoreDeadlock`]) before anything is written. For queues the engine
/// accepts, the result equals [`super::Engine::run`]'s.
pub fn execute_sequential(fabric: &mut Fabric, queues: &[Vec<Descriptor>]) -> Result<(), Error> {
    for (queue, descs) in queues.iter().enumerate() {
        for (index, d) in descs.iter().enumerate() {
            check_ranges(fabric, d)
                .map_err(|(what, e)| replay_error(queue, index as u64, what, e))?;
        }
    }
    for (queue, run) in schedule(queues)? {
        let descs = queues.get(queue).and_then(|q| q.get(run.clone()));
        for (index, d) in (run.start as u64..).zip(descs.unwrap_or_default()) {
            apply(fabric, d).map_err(|e| replay_error(queue, index, "execution", e))?;
        }
    }
    Ok(())
}

/// One descriptor through the `&mut` forms (which reserve what they write).
fn apply(fabric: &mut Fabric, d: &Descriptor) -> Result<(), Error> {
    let len = u64::from(d.len());
    match d.op().compute_op() {
        _ if d.is_cast() => execute_cast(fabric, d),
        None => with_fill_pattern(d, |p| fabric.fill(d.dst(), len, p)),
        Some(ComputeOp::None) => fabric.copy(d.src(), d.dst(), len),
        Some(op) => fabric.reduce(d.src(), d.dst(), len, d.dtype(), op),
    }
}

/// The order of the reference: runs `(queue, descriptor range)`.
fn schedule(queues: &[Vec<Descriptor>]) -> Result<Vec<(usize, Range<usize>)>, Error> {
    let mut signals = [0u64; SEMAPHORES as usize];
    let mut cursors = vec![0usize; queues.len()];
    let mut runs = Vec::new();
    loop {
        let before = runs.len();
        for (queue, (descs, cursor)) in queues.iter().zip(cursors.iter_mut()).enumerate() {
            let start = *cursor;
            while let Some(d) = descs.get(*cursor) {
                if d.waits_beyond(&signals) {
                    break;
                }
                if let Some(s) = d.signal() {
                    signals[s.index()] += 1;
                }
                *cursor += 1;
            }
            if *cursor > start {
                runs.push((queue, start..*cursor));
            }
        }
        if runs.len() == before {
            break;
        }
    }
    // the first queue (lowest index) left waiting is a deadlock
    for (queue, (descs, &cursor)) in queues.iter().zip(&cursors).enumerate() {
        if let Some(w) = descs.get(cursor).and_then(Descriptor::wait) {
            let reached = signals.get(w.sem.index()).copied().unwrap_or(0);
            return Err(Error::deadlock(queue, cursor as u64, w, reached));
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::{DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use crate::generation::Generation;
    use std::num::NonZeroU32;

    fn fill(dst: u64, element: u64) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), 4, Dtype::U8, element).unwrap()
    }

    fn wait(sem: u8, count: u32) -> SemWait {
        SemWait {
            sem: SemId::new(sem).unwrap(),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    #[test]
    fn schedule_runs_queues_in_rounds_until_blocked() {
        let s = SemId::new(1).unwrap();
        let queues = vec![
            vec![fill(0, 1), fill(4, 2).with_wait(wait(1, 1)), fill(8, 3)],
            vec![fill(12, 4).with_signal(s)],
        ];
        assert_eq!(
            schedule(&queues).unwrap(),
            vec![(0, 0..1), (1, 0..1), (0, 1..3)]
        );
    }

    #[test]
    fn a_wait_never_met_is_a_deadlock_and_writes_nothing() {
        let queues = vec![vec![fill(0, 1)], vec![fill(4, 2).with_wait(wait(3, 2))]];
        let mut f = Fabric::new(Generation::Cayman);
        let e = execute_sequential(&mut f, &queues).unwrap_err();
        let want = Error::SemaphoreDeadlock {
            queue: 1,
            index: 0,
            sem: 3,
            count: 2,
            reached: 0,
        };
        assert_eq!(e, want);
        assert_eq!(f.allocated_bytes(), 0);
    }

    #[test]
    fn reference_executes_every_op_through_the_fabric() {
        let mut f = Fabric::new(Generation::Cayman);
        f.write_elems(FabricAddr(0x100), &[1.5f32, -2.0]).unwrap();
        f.write_elems(FabricAddr(0x200), &[0.25f32, 4.0]).unwrap();
        let op = |op, src, dst| {
            Descriptor::new(op, FabricAddr(src), FabricAddr(dst), 8, Dtype::F32).unwrap()
        };
        let queues = vec![
            vec![
                op(DescOp::Add, 0x200, 0x100),
                op(DescOp::Copy, 0x100, 0x300),
            ],
            vec![Descriptor::fill(FabricAddr(0x400), 8, Dtype::F32, 0x3f80_0000).unwrap()],
            vec![op(DescOp::Max, 0x200, 0x500)],
        ];
        execute_sequential(&mut f, &queues).unwrap();
        let read = |a| {
            let mut out = [0f32; 2];
            f.read_elems(FabricAddr(a), &mut out).unwrap();
            out
        };
        assert_eq!(read(0x100), [1.75, 2.0]);
        assert_eq!(read(0x300), [1.75, 2.0]);
        assert_eq!(read(0x400), [1.0, 1.0]);
        assert_eq!(read(0x500), [0.25, 4.0]);
        // a bad range anywhere: nothing runs
        let gap = crate::addr::SBUF_BASE - 64;
        let bad = vec![vec![fill(0x600, 9)], vec![op(DescOp::Copy, gap, 0x700)]];
        let digest = f.digest();
        let e = execute_sequential(&mut f, &bad).unwrap_err();
        assert!(matches!(
            e,
            Error::ReplayDescriptor {
                queue: 1,
                index: 0,
                what: "source range",
                ..
            }
        ));
        assert_eq!(f.digest(), digest);
    }
}
