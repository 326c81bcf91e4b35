//! The scatter side of the SuperGather: the queue of posted lane stores that `scatter` and
//! `scatterinc` fill and the `scatterw` barrier commits, and the [`ScatterReport`] it returns.
//!
//! # Visibility (project decision, following "scatters are visible after scatterw")
//!
//! A scatter posts one store per enabled lane, in ascending lane order, to a queue of
//! [`SCATTER_QUEUE_DEPTH`] lane stores; memory does not change yet, and gathers do not see
//! posted stores. `scatterw` commits the queue to the port in posting order, so duplicate
//! addresses end with the last (highest-lane, latest-op) writer and scatterinc collisions
//! accumulate one by one. When an op would overfill the queue the queue is committed first
//! (the core stalls on a full queue), so a kernel must end with `scatterw` but never loses
//! stores to capacity.
//!
//! scatterinc is a read-modify-write `+1` at the element width, wrapping (`0xff + 1` is 0
//! for NX8U). A lane whose address overflows 64 bits or that the port refuses is dead.

use crate::control::{ElemSize, Width};
use crate::port::MemPort;
use crate::reg::{VBool, VecReg};

/// Lane stores the scatter queue holds before a forced commit.
pub const SCATTER_QUEUE_DEPTH: usize = 256;

/// What a `scatterw` committed since the previous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScatterReport {
    /// Lane stores applied to memory (a scatterinc lane counts once).
    pub written: u32,
    /// Enabled lanes dropped as dead: address overflow or refused by the port.
    pub dead: u32,
}

/// What a posted lane store does at commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    Write(u32),
    Increment,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LaneStore {
    addr: u64,
    elem_sz: ElemSize,
    store: Store,
}

const IDLE: LaneStore = LaneStore {
    addr: 0,
    elem_sz: ElemSize::B1,
    store: Store::Increment,
};

/// The posted-store queue and the counts since the last barrier.
#[derive(Clone, Debug)]
pub(crate) struct ScatterQueue {
    entries: [LaneStore; SCATTER_QUEUE_DEPTH],
    len: usize,
    report: ScatterReport,
}

impl Default for ScatterQueue {
    fn default() -> ScatterQueue {
        ScatterQueue {
            entries: [IDLE; SCATTER_QUEUE_DEPTH],
            len: 0,
            report: ScatterReport::default(),
        }
    }
}

/// One scatter or scatterinc instruction's operands.
pub(crate) struct ScatterOp<'a> {
    pub width: Width,
    pub base: u64,
    pub offsets: &'a VecReg,
    /// The stored data for scatter, `None` for scatterinc.
    pub data: Option<&'a VecReg>,
    pub pred: VBool,
}

impl ScatterQueue {
    /// Lane stores posted and not yet committed.
    pub(crate) fn pending(&self) -> usize {
        self.len
    }

    /// Posts one op's enabled lanes in ascending lane order.
    pub(crate) fn post<P: MemPort>(&mut self, port: &mut P, op: &ScatterOp<'_>) {
        let (view, elem_sz) = (op.width.view(), op.width.elem_sz());
        if self.len + op.width.lanes() > SCATTER_QUEUE_DEPTH {
            self.commit(port);
        }
        for k in (0..op.width.lanes()).filter(|&k| op.pred.lane(view, k)) {
            // offset < 2^32 and elem_sz <= 4, so the product fits; only the add can overflow.
            let offset = u64::from(op.offsets.lane(view, k)) * elem_sz.bytes();
            let store = match op.data {
                Some(d) => Store::Write(d.lane(view, k)),
                None => Store::Increment,
            };
            match (op.base.checked_add(offset), self.entries.get_mut(self.len)) {
                (Some(addr), Some(slot)) => {
                    *slot = LaneStore {
                        addr,
                        elem_sz,
                        store,
                    };
                    self.len += 1;
                }
                _ => self.report.dead += 1,
            }
        }
    }

    /// Applies every posted store to the port in posting order and empties the queue.
    pub(crate) fn commit<P: MemPort>(&mut self, port: &mut P) {
        for s in self.entries.iter().take(self.len) {
            let applied = match s.store {
                Store::Write(v) => port.store(s.addr, s.elem_sz, v),
                Store::Increment => port
                    .load(s.addr, s.elem_sz)
                    .is_some_and(|v| port.store(s.addr, s.elem_sz, v.wrapping_add(1))),
            };
            if applied {
                self.report.written += 1;
            } else {
                self.report.dead += 1;
            }
        }
        self.len = 0;
    }

    /// The barrier: commit, then hand back and reset the counts.
    pub(crate) fn fence<P: MemPort>(&mut self, port: &mut P) -> ScatterReport {
        self.commit(port);
        std::mem::take(&mut self.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::MemTable;

    fn inc_op(offsets: &VecReg) -> ScatterOp<'_> {
        ScatterOp {
            width: Width::N2x32,
            base: 0,
            offsets,
            data: None,
            pred: VBool::ALL,
        }
    }

    #[test]
    fn posted_stores_wait_for_the_fence() {
        let mut q = ScatterQueue::default();
        let mut t = MemTable::zeroed(8);
        let offs = VecReg::ZERO;
        q.post(&mut t, &inc_op(&offs));
        assert_eq!(q.pending(), 16);
        assert_eq!(t.as_bytes(), &[0; 8]);
        assert_eq!(
            q.fence(&mut t),
            ScatterReport {
                written: 16,
                dead: 0
            }
        );
        assert_eq!(t.as_bytes(), &[16, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(q.fence(&mut t), ScatterReport::default());
    }

    #[test]
    fn a_full_queue_commits_before_taking_more() {
        let mut q = ScatterQueue::default();
        let mut t = MemTable::zeroed(4);
        let offs = VecReg::ZERO;
        for _ in 0..SCATTER_QUEUE_DEPTH / 16 {
            q.post(&mut t, &inc_op(&offs));
        }
        assert_eq!(q.pending(), SCATTER_QUEUE_DEPTH);
        assert_eq!(t.as_bytes(), &[0; 4]);
        q.post(&mut t, &inc_op(&offs));
        assert_eq!(q.pending(), 16);
        assert_eq!(t.as_bytes(), &[0, 1, 0, 0]);
        q.fence(&mut t);
        assert_eq!(t.as_bytes(), &[16, 1, 0, 0]);
    }

    #[test]
    fn refused_and_overflowing_lanes_count_as_dead() {
        let mut q = ScatterQueue::default();
        let mut t = MemTable::zeroed(8);
        let offs = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32));
        let data = VecReg::from_n_2x32([0x0102_0304; 16]);
        let op = ScatterOp {
            width: Width::N2x32,
            base: 0,
            offsets: &offs,
            data: Some(&data),
            pred: VBool::ALL,
        };
        q.post(&mut t, &op);
        let far = ScatterOp {
            base: u64::MAX,
            ..inc_op(&offs)
        };
        q.post(&mut t, &far);
        // 14 lanes past the 8-byte table; of the far op, lane 0 is posted at u64::MAX and
        // refused by the port, lanes 1..16 overflow at posting: 14 + 16 dead.
        assert_eq!(q.pending(), 16 + 1);
        assert_eq!(
            q.fence(&mut t),
            ScatterReport {
                written: 2,
                dead: 14 + 16
            }
        );
        assert_eq!(t.as_bytes(), &[4, 3, 2, 1, 4, 3, 2, 1]);
    }

    #[test]
    fn scatterinc_wraps_at_the_element_width() {
        let mut q = ScatterQueue::default();
        let mut t = MemTable::from_bytes(vec![0xff, 0x07]);
        let offs = VecReg::ZERO;
        let op = ScatterOp {
            width: Width::Nx8u,
            pred: VBool::from_bits(1),
            ..inc_op(&offs)
        };
        q.post(&mut t, &op);
        q.fence(&mut t);
        assert_eq!(t.as_bytes(), &[0x00, 0x07]);
    }
}
