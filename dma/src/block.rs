//! Compact descriptor blocks: one request's descriptors held as two address rules.
//!
//! A [`Block`] is `rows` descriptors of one op, dtypes and length, without semaphores,
//! dealt round-robin over its queues (row `i` to queue `deal[i % deal.len()]`), each
//! queue's last carrying END_OF_INSTRUCTION. Row `i` reads at `src.addr(i)` and writes at
//! `dst.addr(i)`. [`Block::queues`] is its definition: the per-queue descriptor lists it
//! stands for, which `gen`, queue files and reports show. The engine validates and runs a
//! block without building those lists where it can ([`crate::Engine::validate_block`]):
//! 32 bytes a descriptor are 8 (an indexed side) or none (a strided one).

use crate::descriptor::{DescFlags, DescOp, Descriptor};
use crate::error::Error;
use crate::queue_file::MAX_QUEUES;
use crate::FabricAddr;

/// Where the rows of one side of a block lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Row `i` at `start + i * stride` (wrapping, as the DGE's row bases do).
    Strided { start: u64, stride: u64 },
    /// Row `i` at `addrs[i]`.
    Listed(Vec<u64>),
}

impl Rows {
    /// The address of row `i` (`i` below the block's rows).
    #[inline(always)]
    pub fn addr(&self, i: usize) -> u64 {
        match self {
            Rows::Strided { start, stride } => start.wrapping_add((i as u64).wrapping_mul(*stride)),
            Rows::Listed(addrs) => addrs.get(i).copied().unwrap_or(0),
        }
    }

    /// The lowest and the highest row address of `rows` rows (`rows >= 1`).
    pub(crate) fn span(&self, rows: usize) -> (u64, u64) {
        match self {
            Rows::Strided { start, .. } => {
                let last = self.addr(rows.saturating_sub(1));
                (*start.min(&last), *start.max(&last))
            }
            Rows::Listed(addrs) => addrs
                .iter()
                .fold((u64::MAX, 0), |(lo, hi), &a| (lo.min(a), hi.max(a))),
        }
    }
}

/// Descriptors as rows (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Every row's op, dtypes and length (its addresses unused).
    template: Descriptor,
    rows: usize,
    src: Rows,
    dst: Rows,
    /// The queues in dealing order.
    deal: Vec<u8>,
}

fn bad_block(field: &'static str, value: u64, rule: &str) -> Error {
    Error::BadDescriptor {
        field,
        value,
        rule: format!("a descriptor block {rule}"),
    }
}

impl Block {
    /// `rows` (at least one) descriptors like `template` (its addresses ignored), row `i`
    /// from `src.addr(i)` to `dst.addr(i)`, dealt over the distinct queues `deal`. The
    /// template has no flags, WAIT or SIGNAL and is no FILL (which reads no source);
    /// a listed side has an address per row.
    pub fn new(
        template: Descriptor,
        rows: usize,
        src: Rows,
        dst: Rows,
        deal: Vec<u8>,
    ) -> Result<Block, Error> {
        let listed = |r: &Rows| matches!(r, Rows::Listed(a) if a.len() != rows);
        if rows == 0 || listed(&src) || listed(&dst) {
            return Err(bad_block(
                "rows",
                rows as u64,
                "has at least one row, an address per row on a listed side",
            ));
        }
        if template.synchronises() || template.flags() != DescFlags::NONE {
            return Err(bad_block(
                "flags",
                template.flags().bits().into(),
                "has no flags, WAIT or SIGNAL",
            ));
        }
        if template.op() == DescOp::Fill {
            return Err(bad_block(
                "op",
                template.op().code().into(),
                "reads a source (no FILL)",
            ));
        }
        let mut seen = [false; MAX_QUEUES];
        let distinct = deal.iter().all(|&q| {
            let fresh = seen.get(usize::from(q)).is_some_and(|s| !s);
            if let Some(s) = seen.get_mut(usize::from(q)) {
                *s = true;
            }
            fresh
        });
        if deal.is_empty() || !distinct {
            return Err(bad_block(
                "deal",
                deal.len() as u64,
                "deals to distinct queues below 16, at least one",
            ));
        }
        Ok(Block {
            template,
            rows,
            src,
            dst,
            deal,
        })
    }

    /// Its rows (descriptors).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The sides' rows.
    pub fn sides(&self) -> (&Rows, &Rows) {
        (&self.src, &self.dst)
    }

    /// Every row's op, dtypes and length, at row 0's addresses, without flags.
    pub fn template(&self) -> Descriptor {
        let at = |side: &Rows| FabricAddr(side.addr(0));
        self.template.at(at(&self.src), at(&self.dst))
    }

    /// The queues in dealing order.
    pub fn deal(&self) -> &[u8] {
        &self.deal
    }

    /// The queue of row `i` and its index there.
    #[inline(always)]
    pub fn at(&self, i: usize) -> (usize, u64) {
        let n = self.deal.len().max(1);
        let queue = self.deal.get(i % n).copied().unwrap_or(0);
        (usize::from(queue), (i / n) as u64)
    }

    /// Row `i` as a descriptor (END_OF_INSTRUCTION if it is its queue's last).
    #[inline(always)]
    pub fn descriptor(&self, i: usize) -> Descriptor {
        let d = self
            .template
            .at(FabricAddr(self.src.addr(i)), FabricAddr(self.dst.addr(i)));
        match i + self.deal.len() >= self.rows {
            true => d.with_flags(DescFlags::END_OF_INSTRUCTION),
            false => d,
        }
    }

    /// How many queues [`Block::queues`] has: up to the highest a row is dealt to.
    pub fn queue_count(&self) -> usize {
        let used = self.deal.iter().take(self.rows);
        used.map(|&q| usize::from(q) + 1).max().unwrap_or(1)
    }

    /// The queues it stands for: one list per queue up to the highest it deals a row to
    /// (queues it deals nothing to are empty), rows in order.
    pub fn queues(&self) -> Vec<Vec<Descriptor>> {
        let mut queues = vec![Vec::new(); self.queue_count()];
        for i in 0..self.rows {
            if let Some(list) = queues.get_mut(self.at(i).0) {
                list.push(self.descriptor(i));
            }
        }
        queues
    }

    /// The number of rows dealt to each of `queues` queues (by queue id).
    pub(crate) fn per_queue(&self, queues: usize) -> Vec<u64> {
        let n = self.deal.len();
        let mut counts = vec![0; queues];
        for (k, &q) in self.deal.iter().enumerate() {
            if let Some(c) = counts.get_mut(usize::from(q)) {
                *c = self.rows.saturating_sub(k).div_ceil(n) as u64;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;
    use proptest::prelude::*;

    fn copy(len: u32) -> Descriptor {
        Descriptor::new(DescOp::Copy, FabricAddr(0), FabricAddr(0), len, Dtype::F32).unwrap()
    }

    #[test]
    fn rows_are_dealt_round_robin_and_each_queue_ends_its_instruction() {
        let b = Block::new(
            copy(4),
            5,
            Rows::Listed(vec![40, 8, 12, 0, 4]),
            Rows::Strided {
                start: 100,
                stride: 4,
            },
            vec![2, 0],
        )
        .unwrap();
        let q = b.queues();
        assert_eq!(q.len(), 3);
        let addrs = |l: &[Descriptor]| l.iter().map(|d| (d.src().0, d.dst().0)).collect::<Vec<_>>();
        assert_eq!(addrs(&q[2]), [(40, 100), (12, 108), (4, 116)]);
        assert_eq!(addrs(&q[0]), [(8, 104), (0, 112)]);
        assert!(q[1].is_empty());
        let ends = |l: &[Descriptor]| {
            l.iter()
                .map(|d| d.flags().contains(DescFlags::END_OF_INSTRUCTION))
                .collect::<Vec<_>>()
        };
        assert_eq!(ends(&q[2]), [false, false, true]);
        assert_eq!(ends(&q[0]), [false, true]);
        assert_eq!(b.per_queue(3), [2, 0, 3]);
        assert_eq!((b.at(3), b.at(4)), ((0, 1), (2, 2)));
    }

    #[test]
    fn a_bad_block_is_refused_naming_the_field() {
        let s = || Rows::Strided {
            start: 0,
            stride: 4,
        };
        let new = |rows, src, deal| Block::new(copy(4), rows, src, s(), deal);
        let field = |r: Result<Block, Error>| match r {
            Err(Error::BadDescriptor { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(new(0, s(), vec![0])), "rows");
        assert_eq!(field(new(2, Rows::Listed(vec![0]), vec![0])), "rows");
        assert_eq!(field(new(2, s(), vec![])), "deal");
        assert_eq!(field(new(2, s(), vec![1, 1])), "deal");
        assert_eq!(field(new(2, s(), vec![16])), "deal");
        let fill = Descriptor::fill(FabricAddr(0), 4, Dtype::U8, 1).unwrap();
        assert_eq!(field(Block::new(fill, 1, s(), s(), vec![0])), "op");
        let ended = copy(4).with_flags(DescFlags::END_OF_INSTRUCTION);
        assert_eq!(field(Block::new(ended, 1, s(), s(), vec![0])), "flags");
    }

    proptest! {
        /// Each queue's count is what the expansion puts there, and row `i` is
        /// descriptor `at(i).1` of queue `at(i).0`.
        #[test]
        fn counts_and_positions_match_the_expansion(
            rows in 1usize..80,
            deal in proptest::sample::subsequence((0u8..16).collect::<Vec<_>>(), 1..16).prop_shuffle(),
        ) {
            let src = Rows::Listed((0..rows as u64).map(|i| i * 64).collect());
            let b = Block::new(copy(8), rows, src, Rows::Strided { start: 1 << 20, stride: 8 }, deal).unwrap();
            let q = b.queues();
            let counts: Vec<u64> = q.iter().map(|l| l.len() as u64).collect();
            prop_assert_eq!(b.per_queue(q.len()), counts);
            for i in 0..rows {
                let (queue, index) = b.at(i);
                prop_assert_eq!(q[queue][index as usize], b.descriptor(i));
            }
            prop_assert!(q.last().is_some_and(|l| !l.is_empty()));
        }
    }
}
