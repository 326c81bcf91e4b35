//! The per-generation kernel table: which opcodes have a POOL kernel on which generation,
//! and therefore which mechanism the runtime routes each instruction to.
//!
//! Seed 000 section 1: sunda's EXTISA_0 kernel_info_table registers POOL kernels for
//! 0x68, 0xe7, 0xbb and 0x79; cayman's registers none of them, its indirection being
//! served by the DGE descriptor-generation layer. Both are OBSERVED. Mariana and maverick
//! follow cayman (INFERRED: no kernel table of theirs was decoded). 0xca expands at run
//! time into 0x79 and follows its route. POOL_BUFFER_LOAD follows GATHER, whose
//! Pool_Buffer it fills (INFERRED everywhere: the seed lists no row for it). DMA_MEMCPY
//! is the DGE's DIRECT2D kind on every generation.

use dma::{Confidence, Generation};

use super::opcode::Opcode;
use Confidence::{Inferred as I, Observed as O};
use Route::{Dge, Pool};

/// The mechanism that serves an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// A POOL kernel on the IVP core.
    Pool,
    /// DGE descriptor generation, replayed by the DMA engine.
    Dge,
}

impl Route {
    /// `pool` or `dge`.
    pub fn name(self) -> &'static str {
        match self {
            Route::Pool => "pool",
            Route::Dge => "dge",
        }
    }
}

/// One opcode's routes, indexed by generation (sunda, cayman, mariana, maverick).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelRow {
    pub opcode: Opcode,
    pub routes: [(Route, Confidence); 4],
}

/// The routes of the four indirection opcodes (and 0xca, which expands into 0x79).
const INDIRECTION: [(Route, Confidence); 4] = [(Pool, O), (Dge, O), (Dge, I), (Dge, I)];

/// The kernel table, one row per opcode in [`Opcode::ALL`] order.
pub const KERNEL_TABLE: [KernelRow; 7] = [
    KernelRow {
        opcode: Opcode::PoolBufferLoad,
        routes: [(Pool, I), (Dge, I), (Dge, I), (Dge, I)],
    },
    KernelRow {
        opcode: Opcode::Gather,
        routes: INDIRECTION,
    },
    KernelRow {
        opcode: Opcode::EmbeddingUpdate,
        routes: INDIRECTION,
    },
    KernelRow {
        opcode: Opcode::DmaMemcpy,
        routes: [(Dge, O), (Dge, O), (Dge, I), (Dge, I)],
    },
    KernelRow {
        opcode: Opcode::DmaIndirect,
        routes: INDIRECTION,
    },
    KernelRow {
        opcode: Opcode::PseudoEmbeddingUpdate,
        routes: INDIRECTION,
    },
    KernelRow {
        opcode: Opcode::IndirectCopy,
        routes: INDIRECTION,
    },
];

/// The route of `opcode` on `generation`, with how well it is grounded.
pub fn route_with_confidence(generation: Generation, opcode: Opcode) -> (Route, Confidence) {
    // Opcode variants are declared in `KERNEL_TABLE` order and Generation variants in
    // `routes` order (test `table_matches_the_seed`), so both indexes are in range.
    KERNEL_TABLE[opcode as usize].routes[generation as usize]
}

/// Whether `opcode` is served by a POOL kernel or by the DGE on `generation`.
pub fn route(generation: Generation, opcode: Opcode) -> Route {
    route_with_confidence(generation, opcode).0
}

/// Whether `generation` ships a POOL kernel for `opcode`.
pub fn has_pool_kernel(generation: Generation, opcode: Opcode) -> bool {
    route(generation, opcode) == Route::Pool
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_seed() {
        for (i, op) in Opcode::ALL.into_iter().enumerate() {
            assert_eq!(KERNEL_TABLE[i].opcode, op);
        }
        let sunda_pool: Vec<u8> = Opcode::ALL
            .into_iter()
            .filter(|o| has_pool_kernel(Generation::Sunda, *o))
            .map(Opcode::code)
            .collect();
        assert_eq!(sunda_pool, vec![0x67, 0x68, 0x79, 0xbb, 0xca, 0xe7]);
        for g in [
            Generation::Cayman,
            Generation::Mariana,
            Generation::Maverick,
        ] {
            assert!(
                Opcode::ALL.into_iter().all(|o| route(g, o) == Route::Dge),
                "{g}"
            );
        }
    }

    #[test]
    fn confidence_per_generation() {
        for op in [
            Opcode::Gather,
            Opcode::IndirectCopy,
            Opcode::DmaIndirect,
            Opcode::EmbeddingUpdate,
        ] {
            let c: Vec<Confidence> = Generation::ALL
                .iter()
                .map(|g| route_with_confidence(*g, op).1)
                .collect();
            assert_eq!(c, vec![O, O, I, I], "{op}");
        }
        assert_eq!(
            route_with_confidence(Generation::Sunda, Opcode::PoolBufferLoad),
            (Pool, I)
        );
        assert_eq!(
            route_with_confidence(Generation::Maverick, Opcode::DmaMemcpy),
            (Dge, I)
        );
        assert_eq!(Route::Pool.name(), "pool");
    }
}
