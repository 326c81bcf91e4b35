//! The cost estimate of a POOL kernel ([`PoolCost`]) and of a run of kernels
//! ([`PoolCostReport`]), in integer picoseconds like the DMA timing report, so estimates
//! are bit-reproducible.
//!
//! # The model (seed 000 section 9, plus stated assumptions)
//!
//! `cycles = GPSIMD_START + vectors * MIN_II + ceil(bytes / VECTOR_BYTES_PER_CYCLE)` on
//! the busiest GpSimd core, where
//!
//! - [`GPSIMD_START`] = 150 cycles is the seed's fixed GpSimd startup (kernel_info
//!   dispatch, trampoline, windowed-ABI entry), paid once per kernel;
//! - `vectors` counts the kernel's vector iterations (one 16- or 32-lane index vector
//!   through gather, compare, select and gather/scatter), each costed at the seed's
//!   Vector MIN_II [`MIN_II`] = 64 cycles. ASSUMPTION: the seed gives MIN_II as the
//!   Vector engine's minimum initiation interval; it is used here as the floor of one
//!   gather-resident loop iteration;
//! - `bytes` are the bytes the kernel moves (rows, runs, window elements), at
//!   [`VECTOR_BYTES_PER_CYCLE`] = 64 (one 512-bit vector load/store per cycle;
//!   ASSUMPTION);
//! - the clock is [`CLOCK_MHZ`] = 1400 MHz (ASSUMPTION: a GpSimd clock of the order of
//!   the public NeuronCore figures; the seed gives cycles only).
//!
//! Work is split the way the kernels split it: the eight GpSimd cores each take 16
//! channels (INDIRECT_COPY by core id; GATHER and POOL_BUFFER_LOAD by channel), so a
//! kernel's time is its busiest core's. DMA_INDIRECT and EMBEDDING_UPDATE walk their
//! indices on one core.

/// Fixed GpSimd kernel startup, cycles (seed 000 section 9, GPSIMD_START).
pub const GPSIMD_START: u64 = 150;
/// Cycles per vector iteration (seed 000 section 9, the Vector MIN_II; see module docs).
pub const MIN_II: u64 = 64;
/// Bytes moved per cycle (ASSUMPTION: one 512-bit access per cycle).
pub const VECTOR_BYTES_PER_CYCLE: u64 = 64;
/// The GpSimd clock, MHz (ASSUMPTION, see module docs).
pub const CLOCK_MHZ: u64 = 1400;
/// GpSimd cores of the POOL engine.
pub const POOL_CORES: u64 = 8;
/// Channels (partitions) per GpSimd core.
pub const CORE_CHANNELS: u64 = 16;

const PS_PER_US: u64 = 1_000_000;

/// The work of one kernel on its busiest core, the input of [`PoolCost::estimate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Work {
    /// Vector iterations.
    pub vectors: u64,
    /// Bytes moved.
    pub bytes: u64,
}

impl Work {
    /// The busiest core's share of `per_channel` work repeated over `channels` channels
    /// (16 channels per core, at most the channels there are).
    pub fn per_channel(per_channel: Work, channels: u64) -> Work {
        let busiest = channels.min(CORE_CHANNELS);
        Work {
            vectors: per_channel.vectors.saturating_mul(busiest),
            bytes: per_channel.bytes.saturating_mul(busiest),
        }
    }
}

/// The cost estimate of one POOL kernel run, with its breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolCost {
    /// The kernel (`pool_gather`, `pool_indirect_copy`, ...).
    pub kernel: &'static str,
    /// GpSimd cores the work was split over.
    pub cores: u64,
    /// The fixed startup, cycles.
    pub start_cycles: u64,
    /// Vector iterations on the busiest core.
    pub vectors: u64,
    /// `vectors * MIN_II`, cycles.
    pub vector_cycles: u64,
    /// Bytes the busiest core moved.
    pub bytes: u64,
    /// `ceil(bytes / 64)`, cycles.
    pub move_cycles: u64,
    /// The sum of the three, cycles.
    pub total_cycles: u64,
    /// `total_cycles` at [`CLOCK_MHZ`], ps (rounded up).
    pub estimated_ps: u64,
}

impl PoolCost {
    /// The estimate for `work` on the busiest of `cores` cores.
    pub fn estimate(kernel: &'static str, cores: u64, work: Work) -> PoolCost {
        let vector_cycles = work.vectors.saturating_mul(MIN_II);
        let move_cycles = work.bytes.div_ceil(VECTOR_BYTES_PER_CYCLE);
        let total_cycles = GPSIMD_START
            .saturating_add(vector_cycles)
            .saturating_add(move_cycles);
        PoolCost {
            kernel,
            cores,
            start_cycles: GPSIMD_START,
            vectors: work.vectors,
            vector_cycles,
            bytes: work.bytes,
            move_cycles,
            total_cycles,
            estimated_ps: cycles_to_ps(total_cycles),
        }
    }

    /// The estimate in whole ns (rounded up).
    pub fn estimated_ns(&self) -> u64 {
        self.estimated_ps.div_ceil(1000)
    }
}

/// `cycles` at [`CLOCK_MHZ`], ps, rounded up.
pub fn cycles_to_ps(cycles: u64) -> u64 {
    let ps = u128::from(cycles) * u128::from(PS_PER_US);
    u64::try_from(ps.div_ceil(u128::from(CLOCK_MHZ))).unwrap_or(u64::MAX)
}

/// The costs of a run of kernels, back to back on the POOL engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolCostReport {
    /// Each kernel's estimate, in run order.
    pub kernels: Vec<PoolCost>,
    /// The sum of their estimates, ps.
    pub total_ps: u64,
}

impl PoolCostReport {
    /// An empty report.
    pub fn new() -> PoolCostReport {
        PoolCostReport::default()
    }

    /// Adds one kernel's estimate.
    pub fn push(&mut self, cost: PoolCost) {
        self.total_ps = self.total_ps.saturating_add(cost.estimated_ps);
        self.kernels.push(cost);
    }

    /// The total in whole ns (rounded up).
    pub fn total_ns(&self) -> u64 {
        self.total_ps.div_ceil(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_empty_kernel_costs_the_startup() {
        let c = PoolCost::estimate("k", 1, Work::default());
        assert_eq!(c.total_cycles, 150);
        // 150 cycles at 1.4 GHz = 107142.857 ps, rounded up
        assert_eq!(c.estimated_ps, 107_143);
        assert_eq!(c.estimated_ns(), 108);
    }

    #[test]
    fn breakdown_adds_up() {
        let w = Work {
            vectors: 10,
            bytes: 4097,
        };
        let c = PoolCost::estimate("k", 8, w);
        assert_eq!((c.vector_cycles, c.move_cycles), (640, 65));
        assert_eq!(c.total_cycles, 150 + 640 + 65);
        assert_eq!(c.estimated_ps, (855u64 * 1_000_000).div_ceil(1400));
    }

    #[test]
    fn per_channel_work_counts_the_busiest_core() {
        let one = Work {
            vectors: 2,
            bytes: 100,
        };
        assert_eq!(
            Work::per_channel(one, 5),
            Work {
                vectors: 10,
                bytes: 500
            }
        );
        assert_eq!(
            Work::per_channel(one, 128),
            Work {
                vectors: 32,
                bytes: 1600
            }
        );
    }

    #[test]
    fn report_sums_kernels() {
        let mut r = PoolCostReport::new();
        r.push(PoolCost::estimate("a", 1, Work::default()));
        r.push(PoolCost::estimate(
            "b",
            1,
            Work {
                vectors: 1,
                bytes: 0,
            },
        ));
        assert_eq!(r.kernels.len(), 2);
        assert_eq!(r.total_ps, 107_143 + cycles_to_ps(214));
        assert_eq!(r.total_ns(), r.total_ps.div_ceil(1000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn cost_is_monotone_in_work(v in 0u64..1 << 20, b in 0u64..1 << 30, dv in 0u64..100, db in 0u64..10_000) {
            let small = PoolCost::estimate("k", 1, Work { vectors: v, bytes: b });
            let big = PoolCost::estimate("k", 1, Work { vectors: v + dv, bytes: b + db });
            prop_assert!(big.estimated_ps >= small.estimated_ps);
            prop_assert_eq!(small.total_cycles, small.start_cycles + small.vector_cycles + small.move_cycles);
        }
    }
}
