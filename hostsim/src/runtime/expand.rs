//! The run-time expansion of PSEUDO_EMBEDDING_UPDATE 0xca (seed 000 section 1: the
//! compiler emits 0xca and the runtime expands it into a LoadPoolArgument /
//! EmbeddingUpdate / TensorStore sequence), as three explicit micro-ops:
//!
//! 1. [`load_pool_argument`]: the 64-byte operand becomes the POOL worker's argument block
//!    ([`PoolArgument`], the seed's `embed_update_info`);
//! 2. EmbeddingUpdate: the raw EMBEDDING_UPDATE 0x79 runs on the argument block through
//!    the opcode's route (the runtime does this step; see [`super::Runtime`]);
//! 3. [`tensor_store`]: the updated table rows are stored.
//!
//! The memory effect of the sequence is exactly the raw 0x79's: the route of step 2
//! commits the table rows itself, all or nothing (fail closed per instruction), so step 3
//! records the store and adds no write of its own. Steps 1 and 3 cannot fail once the
//! instruction is validated.

use super::RouteTaken;
use crate::core_state::{IndexSide, Outcome};
use crate::isa::{Instruction, PseudoEmbeddingUpdate, INSTRUCTION_BYTES};

/// One micro-op of the 0xca expansion, as the run report lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroOp {
    /// LoadPoolArgument: the argument block was loaded for the POOL worker.
    LoadPoolArgument {
        /// Bytes of the argument block (the 64-byte operand struct).
        bytes: u32,
        /// `sequence_length`: indices the update walks.
        sequence_length: u32,
    },
    /// EmbeddingUpdate: the raw 0x79 ran on `route`.
    EmbeddingUpdate {
        /// The mechanism that ran it.
        route: RouteTaken,
        /// Indices whose data row was reduced into the table.
        applied: u32,
        /// Indices at or past `embedding_table_num_entries`, skipped.
        skipped: u32,
    },
    /// TensorStore: the updated rows were stored to the table.
    TensorStore {
        /// Row updates stored (a row named twice counts twice).
        rows: u32,
        /// Bytes stored.
        bytes: u64,
    },
}

impl MicroOp {
    /// The micro-op's name in the seed's spelling.
    pub fn name(&self) -> &'static str {
        match self {
            MicroOp::LoadPoolArgument { .. } => "LoadPoolArgument",
            MicroOp::EmbeddingUpdate { .. } => "EmbeddingUpdate",
            MicroOp::TensorStore { .. } => "TensorStore",
        }
    }
}

/// The POOL worker's argument block of an embedding update (`embed_update_info`): the
/// operand's fields, as the raw 0x79 reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolArgument {
    operand: PseudoEmbeddingUpdate,
}

impl PoolArgument {
    /// The operand the block was loaded from.
    pub fn operand(&self) -> &PseudoEmbeddingUpdate {
        &self.operand
    }

    /// The raw EMBEDDING_UPDATE the routes run on this block (they take the operand
    /// struct: 0x79 has none of its own).
    pub fn instruction(&self) -> Instruction {
        Instruction::PseudoEmbeddingUpdate(self.operand)
    }
}

/// Micro-op 1, LoadPoolArgument: the block and its trace entry.
pub fn load_pool_argument(e: &PseudoEmbeddingUpdate) -> (PoolArgument, MicroOp) {
    let trace = MicroOp::LoadPoolArgument {
        bytes: INSTRUCTION_BYTES as u32,
        sequence_length: e.sequence_length(),
    };
    (PoolArgument { operand: *e }, trace)
}

/// The trace entry of micro-op 2 from the route's outcome.
pub fn embedding_update_trace(arg: &PoolArgument, route: RouteTaken, o: &Outcome) -> MicroOp {
    let (applied, skipped) = counts(arg, o);
    MicroOp::EmbeddingUpdate {
        route,
        applied,
        skipped,
    }
}

/// Micro-op 3, TensorStore: the store of the rows micro-op 2 updated.
pub fn tensor_store(arg: &PoolArgument, o: &Outcome) -> MicroOp {
    MicroOp::TensorStore {
        rows: counts(arg, o).0,
        bytes: o.bytes_written,
    }
}

/// (applied, skipped) indices: every EMBEDDING_UPDATE skip is a table-side index.
fn counts(arg: &PoolArgument, o: &Outcome) -> (u32, u32) {
    let skipped = o
        .skipped
        .iter()
        .filter(|s| s.side == IndexSide::Dst)
        .count();
    // Validation bounds sequence_length by 4096, so the count fits.
    let skipped = u32::try_from(skipped).unwrap_or(u32::MAX);
    (
        arg.operand.sequence_length().saturating_sub(skipped),
        skipped,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_state::SkippedIndex;
    use crate::isa::EmbeddingTable;
    use dma::{Addr4, CceOp, Dtype, FabricAddr, Space};

    #[test]
    fn trace_counts_applied_and_skipped_rows() {
        let table = EmbeddingTable {
            base_addr: FabricAddr(0x1000),
            num_entries: 4,
            stride_bytes: 8,
            num_elements: 2,
        };
        let a = Addr4::encode(Space::Sbuf, 0, 0).unwrap();
        let e = PseudoEmbeddingUpdate::new(table, a, a, 5, Dtype::F32, CceOp::Add);
        let (arg, load) = load_pool_argument(&e);
        assert_eq!(
            load,
            MicroOp::LoadPoolArgument {
                bytes: 64,
                sequence_length: 5
            }
        );
        assert_eq!(arg.instruction(), Instruction::PseudoEmbeddingUpdate(e));
        let skip = |position| SkippedIndex {
            side: IndexSide::Dst,
            position,
            value: 7,
        };
        let o = Outcome {
            skipped: vec![skip(1), skip(3)],
            oob_notification: false,
            bytes_written: 24,
            ..Outcome::default()
        };
        let update = embedding_update_trace(&arg, RouteTaken::Pool, &o);
        assert_eq!(
            update,
            MicroOp::EmbeddingUpdate {
                route: RouteTaken::Pool,
                applied: 3,
                skipped: 2
            }
        );
        let store = tensor_store(&arg, &o);
        assert_eq!(store, MicroOp::TensorStore { rows: 3, bytes: 24 });
        let names: Vec<&str> = [load, update, store].iter().map(MicroOp::name).collect();
        assert_eq!(
            names,
            ["LoadPoolArgument", "EmbeddingUpdate", "TensorStore"]
        );
    }
}
