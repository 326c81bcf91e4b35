//! The `dma` target: random descriptor queues replayed by the async engine against
//! [`dma::execute_sequential`], the plain loop.
//!
//! A case has 1 to 16 queues. Every queue writes only its own slab (HBM or one SBUF
//! partition) and reads a shared read-only source or its own slab (never the bytes the
//! same descriptor writes), so within a queue descriptors depend on each other in order
//! and across queues nothing races. With a barrier, every queue's last descriptor of the
//! first phase signals, queue 0 collects the signals and every other queue's second
//! phase waits for queue 0 (see `add_barrier`); second-phase descriptors may then read
//! any queue's first slab and write a second slab of their own. Lengths reach 1 byte, whole elements for the
//! reductions and FILL, and now and then a descriptor ends on the last byte of its
//! region or one byte past it (the whole replay must then be rejected by both, leaving
//! the fabric as it was).
//!
//! The replay must agree with the loop byte for byte (engine with the race check off and
//! on: the queues are race-free by construction).

use std::num::NonZeroU32;

use dma::{
    execute_sequential, Addr4, DescOp, Descriptor, Dtype, Engine, EngineConfig, Fabric, FabricAddr,
    Generation, RaceCheck, SemId, SemWait, Space,
};

use crate::fuzz::rng::Rng;

/// One `dma` case: the fabric before the replay, its input ranges and the queues.
#[derive(Clone, Debug)]
pub struct QueueCase {
    /// The fabric with the inputs written.
    pub fabric: Fabric,
    /// The byte ranges holding inputs.
    pub regions: Vec<(FabricAddr, u64)>,
    /// The queues, queue `q` on DMA ring `q`.
    pub queues: Vec<Vec<Descriptor>>,
}

/// Bytes of the shared source and of each slab.
const SLAB: u64 = 4096;
/// Where the shared source starts in HBM.
const SOURCE: u64 = 0x10_0000;

/// A slab: where it starts, how long it is, and whether it ends on its region's last
/// byte (only then may a descriptor reach one byte past it: off the fabric, never into
/// a neighbour's slab).
#[derive(Clone, Copy)]
struct Slab {
    start: u64,
    len: u64,
    at_end: bool,
}

/// The case drawn from `rng`.
pub fn case(mut rng: Rng, generation: Option<Generation>) -> QueueCase {
    let generation = generation.unwrap_or_else(|| rng.pick(&Generation::ALL));
    let mut fabric = Fabric::new(generation);
    let nq = rng.range(1, 16) as usize;
    let barrier = rng.chance(40);
    let source = Slab {
        start: SOURCE,
        len: SLAB,
        at_end: false,
    };
    let mut regions = vec![(FabricAddr(source.start), source.len)];
    let data = rng.edge_data(Dtype::F32, (SLAB / 4) as usize);
    // The source lies inside HBM on every generation.
    let _ = fabric.write(FabricAddr(source.start), &data);
    let first: Vec<Slab> = (0..nq).map(|q| slab(&mut rng, &fabric, q, 0)).collect();
    let second: Vec<Slab> = (0..nq).map(|q| slab(&mut rng, &fabric, q, 1)).collect();
    for s in first.iter().chain(&second) {
        let junk = rng.bytes(s.len as usize);
        if fabric.write(FabricAddr(s.start), &junk).is_ok() {
            regions.push((FabricAddr(s.start), s.len));
        }
    }
    let mut queues: Vec<Vec<Descriptor>> = Vec::with_capacity(nq);
    for own in &first {
        queues.push(phase(&mut rng, &[source, *own], *own));
    }
    if barrier {
        add_barrier(&mut rng, &mut queues, &first, &second, source);
    }
    QueueCase {
        fabric,
        regions,
        queues,
    }
}

/// Queue `q`'s slab of phase `phase`: in HBM, or at the end of an SBUF partition (so the
/// region's last byte is in reach).
fn slab(rng: &mut Rng, fabric: &Fabric, q: usize, phase: u64) -> Slab {
    let hbm = Slab {
        start: SOURCE + SLAB * (1 + 2 * q as u64 + phase),
        len: SLAB,
        at_end: false,
    };
    if !rng.chance(30) {
        return hbm;
    }
    let part = (2 * q as u32 + phase as u32) % 128;
    let top = fabric.generation().sbuf_partition_bytes();
    let at = Addr4::encode(Space::Sbuf, part, (top - SLAB) as u32)
        .and_then(|a| a.to_fabric(fabric.map()));
    match at {
        Ok(a) => Slab {
            start: a.0,
            len: SLAB,
            at_end: true,
        },
        Err(_) => hbm,
    }
}

/// 1 to 12 descriptors writing `own`, reading any of `reads` (not the bytes they write).
fn phase(rng: &mut Rng, reads: &[Slab], own: Slab) -> Vec<Descriptor> {
    let n = rng.range(1, 12);
    let mut out = Vec::new();
    for _ in 0..n {
        if let Some(d) = descriptor(rng, reads, own) {
            out.push(d);
        }
    }
    if out.is_empty() {
        // A queue always holds one descriptor, so a barrier has something to signal.
        if let Ok(d) = Descriptor::fill(FabricAddr(own.start), 1, Dtype::U8, 0) {
            out.push(d);
        }
    }
    out
}

/// One descriptor (`None` when the drawn fields break a descriptor rule).
fn descriptor(rng: &mut Rng, reads: &[Slab], own: Slab) -> Option<Descriptor> {
    let op = rng.pick(&DescOp::ALL);
    let dtype = rng.dtype();
    let size = dtype.size() as u64;
    let elems = rng.pick(&[1u64, 1, 2, 7, 64, 300]);
    let len = match op {
        DescOp::Copy if rng.chance(30) => rng.range(1, 65) as u64,
        _ => elems * size,
    }
    .min(own.len);
    let dst = place(rng, own, len);
    if op == DescOp::Fill {
        let element = rng.next_u64() & (u64::MAX >> (64 - 8 * size));
        return Descriptor::fill(FabricAddr(dst), len as u32, dtype, element).ok();
    }
    let from = rng.pick_from(reads).unwrap_or(own);
    let mut src = place(rng, from, len);
    if src < dst + len && dst < src + len {
        // Never the bytes this descriptor writes: read the first slab instead.
        src = reads.first().map_or(src, |s| s.start);
    }
    Descriptor::new(op, FabricAddr(src), FabricAddr(dst), len as u32, dtype).ok()
}

/// A start for `len` bytes in `slab`: anywhere, its last byte on the slab's last byte,
/// or (rarely, for a slab at its region's end) one byte past it.
fn place(rng: &mut Rng, slab: Slab, len: u64) -> u64 {
    let room = slab.len - len;
    match rng.below(100) {
        0..=9 => slab.start + room,
        10..=11 if slab.at_end => slab.start + room + 1,
        _ => slab.start + rng.below(room + 1),
    }
}

/// The second phase behind a barrier (one signalling queue per semaphore, as the engine
/// requires): queue `p > 0` signals semaphore `p` at the end of its first phase; queue 0
/// then waits for each in turn with one-byte FILLs of its own slab, the last of which
/// signals semaphore 0, which every other queue's second phase waits for.
fn add_barrier(
    rng: &mut Rng,
    queues: &mut [Vec<Descriptor>],
    first: &[Slab],
    second: &[Slab],
    source: Slab,
) {
    let sem = |q: usize| SemId::new(q as u8).ok();
    for (p, q) in queues.iter_mut().enumerate().skip(1) {
        if let (Some(last), Some(s)) = (q.last_mut(), sem(p)) {
            *last = last.with_signal(s);
        }
    }
    let (Some(zero), Some(own)) = (sem(0), first.first()) else {
        return;
    };
    let mut gather = Vec::new();
    for p in 1..queues.len() {
        let fill = Descriptor::fill(FabricAddr(own.start), 1, Dtype::U8, 0);
        if let (Ok(d), Some(s)) = (fill, sem(p)) {
            gather.push(d.with_wait(SemWait {
                sem: s,
                count: NonZeroU32::MIN,
            }));
        }
    }
    if let Ok(d) = Descriptor::fill(FabricAddr(own.start), 1, Dtype::U8, 0) {
        gather.push(d.with_signal(zero));
    }
    let mut reads = vec![source];
    reads.extend_from_slice(first);
    for (q, (queue, own)) in queues.iter_mut().zip(second).enumerate() {
        if q == 0 {
            queue.append(&mut gather);
        }
        let mut next = phase(rng, &reads, *own);
        if let (Some(head), true) = (next.first_mut(), q > 0) {
            *head = head.with_wait(SemWait {
                sem: zero,
                count: NonZeroU32::MIN,
            });
        }
        queue.extend(next);
    }
}

/// The engines a `dma` case is replayed on: race check off and on.
pub struct Engines {
    plain: Engine,
    checked: Engine,
}

impl Engines {
    /// Two engines of 16 queues and 2 workers.
    pub fn new() -> Result<Engines, String> {
        let config = EngineConfig {
            workers: 2,
            ..EngineConfig::default()
        };
        let checked = EngineConfig {
            race_check: RaceCheck::On,
            ..config
        };
        let build = |c| Engine::new(c).map_err(|e| e.to_string());
        Ok(Engines {
            plain: build(config)?,
            checked: build(checked)?,
        })
    }

    /// Replays `c` on both engines and the loop; `Err` says how they differ.
    pub fn check(&self, c: &QueueCase) -> Result<(), String> {
        let mut expect = c.fabric.clone();
        let looped = execute_sequential(&mut expect, &c.queues).map_err(|e| e.to_string());
        if looped.is_err() && expect.first_difference(&c.fabric).is_some() {
            return Err("execute_sequential failed but changed the fabric".into());
        }
        for (name, engine) in [
            ("engine", &self.plain),
            ("race-checked engine", &self.checked),
        ] {
            let mut got = c.fabric.clone();
            let replay = engine.run(&mut got, &c.queues).map(|_| ());
            match (&looped, replay) {
                (Ok(()), Ok(())) | (Err(_), Err(_)) => {}
                (Ok(()), Err(e)) => return Err(format!("{name} rejected what the loop ran: {e}")),
                (Err(e), Ok(())) => return Err(format!("{name} ran what the loop rejected: {e}")),
            }
            if let Some(at) = got.first_difference(&expect) {
                return Err(format!("{name} differs from the loop at {:#x}", at.0));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// Found by `hostsim fuzz --target dma` (seed 8 of the unit corpus): queue 1 signals
    /// semaphore 1, queue 0 waits for it and signals semaphore 0, queue 1 then waits for
    /// semaphore 0. The loop runs it; the engine reported a SemaphoreDeadlock because the
    /// timeline's trimming of SIGNAL end times dropped the one queue 1 still needed.
    #[test]
    fn regression_barrier_through_queue_zero_is_not_a_deadlock() {
        let fill = |a: u64, v: u64| Descriptor::fill(FabricAddr(a), 1, Dtype::U8, v).unwrap();
        let sem = |q| SemId::new(q).unwrap();
        let wait = |q| SemWait {
            sem: sem(q),
            count: NonZeroU32::MIN,
        };
        let q0 = vec![
            fill(0x1000, 1),
            fill(0x1000, 2).with_wait(wait(1)),
            fill(0x1000, 3).with_signal(sem(0)),
            fill(0x1001, 4),
        ];
        let q1 = vec![
            fill(0x2000, 5).with_signal(sem(1)),
            fill(0x2001, 6).with_wait(wait(0)),
        ];
        let c = QueueCase {
            fabric: Fabric::new(Generation::Cayman),
            regions: Vec::new(),
            queues: vec![q0, q1],
        };
        assert_eq!(Engines::new().unwrap().check(&c), Ok(()));
    }

    #[test]
    fn engines_agree_with_the_loop_on_random_queues() {
        let engines = Engines::new().unwrap();
        let mut barriers = 0;
        let mut rejected = 0;
        for seed in 0..60 {
            let c = case(Rng::new(seed), None);
            barriers += usize::from(
                c.queues
                    .iter()
                    .any(|q| q.iter().any(|d| d.wait().is_some())),
            );
            let mut f = c.fabric.clone();
            rejected += usize::from(execute_sequential(&mut f, &c.queues).is_err());
            assert_eq!(engines.check(&c), Ok(()), "seed {seed}");
        }
        assert!(
            barriers > 5 && rejected > 0 && rejected < 60,
            "{barriers} {rejected}"
        );
    }

    #[test]
    fn cases_are_deterministic() {
        let (a, b) = (case(Rng::new(4), None), case(Rng::new(4), None));
        assert_eq!(a.queues, b.queues);
        assert_eq!(a.regions, b.regions);
        assert_eq!(a.fabric.first_difference(&b.fabric), None);
    }
}
