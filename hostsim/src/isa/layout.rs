//! The one table of field offsets for every operand struct and sub-struct.
//!
//! Seed 000 fixes the struct sizes (64 bytes), the TENSOR4D / INDIRECT / INDIRECT20B /
//! MEM_PATTERN4D compositions and PSEUDO_EMBEDDING_UPDATE's `sequence_length` at offset 52
//! (the worker reads it there); rows carrying those facts are [`Origin::Seed`]. Every
//! other offset is the project's own ([`Origin::Project`]). Each struct's tests pin its
//! `offset_of!` and field sizes against this table, and `rows_tile_each_struct` checks
//! the rows cover each struct with no gap or overlap.

/// Where a row's offset comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// Given by seed 000.
    Seed,
    /// Chosen by the project where the seed is silent.
    Project,
}

/// One field of one struct: byte offset and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldLayout {
    pub structure: &'static str,
    pub field: &'static str,
    pub offset: usize,
    pub size: usize,
    pub origin: Origin,
}

/// A struct or field name in the table.
type Name = &'static str;

/// A row whose offset is the project's own.
const fn p(structure: Name, field: Name, offset: usize, size: usize) -> FieldLayout {
    FieldLayout {
        structure,
        field,
        offset,
        size,
        origin: Origin::Project,
    }
}

/// A row whose offset seed 000 gives.
const fn s(structure: Name, field: Name, offset: usize, size: usize) -> FieldLayout {
    FieldLayout {
        origin: Origin::Seed,
        ..p(structure, field, offset, size)
    }
}

const HDR: &str = "INST_HEADER";
const T4: &str = "TENSOR4D";
const IND: &str = "INDIRECT";
const I20: &str = "INDIRECT20B";
const MP: &str = "MEM_PATTERN4D";
const PBL: &str = "POOL_BUFFER_LOAD";
const GT: &str = "S4D4_GT";
const IC: &str = "S4D4_IC";
const DI: &str = "DMA_INDIRECT1D";
const EU: &str = "PSEUDO_EMBEDDING_UPDATE";
const D2: &str = "DMA_DIRECT2D";

/// Every field of every struct, struct by struct, in offset order.
#[rustfmt::skip]
pub const FIELD_LAYOUT: &[FieldLayout] = &[
    p(HDR, "opcode", 0, 1), p(HDR, "inst_flags", 1, 1),
    p(HDR, "num_active_channels", 2, 1), p(HDR, "reserved", 3, 1),
    s(T4, "start_addr", 0, 4), s(T4, "step_elem", 4, 8), s(T4, "num_elem", 12, 8),
    s(IND, "index_addr", 0, 4), s(IND, "data_addr", 4, 4), s(IND, "num_elem", 8, 2),
    s(IND, "reserved", 10, 2),
    s(I20, "p", 0, 12), s(I20, "reserved", 12, 8),
    s(MP, "bytes", 0, 20),
    p(PBL, "header", 0, 4), p(PBL, "src_mem_pattern", 4, 20), p(PBL, "dtype", 24, 1),
    p(PBL, "reserved0", 25, 3), p(PBL, "start_index", 28, 4), p(PBL, "reserved1", 32, 32),
    p(GT, "header", 0, 4), p(GT, "src_mem_pattern", 4, 20), p(GT, "dst_mem_pattern", 24, 20),
    p(GT, "in_dtype", 44, 1), p(GT, "out_dtype", 45, 1), p(GT, "index_miss_behavior", 46, 1),
    p(GT, "free_pool_buffer", 47, 1), p(GT, "immediate", 48, 4), p(GT, "reserved", 52, 12),
    p(IC, "header", 0, 4), p(IC, "src", 4, 20), p(IC, "dst", 24, 20), p(IC, "in_dtype", 44, 1),
    p(IC, "out_dtype", 45, 1), p(IC, "src_num_elem_per_idx", 46, 1),
    p(IC, "dst_num_elem_per_idx", 47, 1), p(IC, "src_buffer_size", 48, 4),
    p(IC, "dst_buffer_size", 52, 4), p(IC, "index_dtype", 56, 1), p(IC, "mode", 57, 1),
    p(IC, "reserved", 58, 6),
    p(DI, "header", 0, 4), p(DI, "flags", 4, 1), p(DI, "src_idx_bound_reg", 5, 1),
    p(DI, "dst_idx_bound_reg", 6, 1), p(DI, "compute_op", 7, 1), p(DI, "src_start_addr", 8, 8),
    p(DI, "dst_start_addr", 16, 8), p(DI, "src_idx_start_addr", 24, 4),
    p(DI, "dst_idx_start_addr", 28, 4), p(DI, "src_num_elem", 32, 2),
    p(DI, "dst_num_elem", 34, 2), p(DI, "src_elem_size", 36, 4), p(DI, "dst_elem_size", 40, 4),
    p(DI, "src_step_elem", 44, 2), p(DI, "dst_step_elem", 46, 2), p(DI, "dtype", 48, 1),
    p(DI, "shape_reg", 49, 1), p(DI, "eng_mask", 50, 2), p(DI, "reshape_kind", 52, 1),
    p(DI, "reserved", 53, 11),
    p(EU, "header", 0, 4), p(EU, "cce_op", 4, 1), p(EU, "dtype", 5, 1),
    p(EU, "index_dtype", 6, 1), p(EU, "reserved0", 7, 1),
    p(EU, "embedding_table_base_addr", 8, 8), p(EU, "embed_index_addr", 16, 4),
    p(EU, "embed_data_addr", 20, 4), p(EU, "embedding_table_num_entries", 24, 4),
    p(EU, "embed_entry_stride_bytes", 28, 4), p(EU, "embed_entry_num_elements", 32, 4),
    p(EU, "eng_mask", 36, 2), p(EU, "reserved1", 38, 14), s(EU, "sequence_length", 52, 4),
    p(EU, "reserved2", 56, 8),
    p(D2, "header", 0, 4), p(D2, "compute_op", 4, 1), p(D2, "dtype", 5, 1),
    p(D2, "reserved0", 6, 2), p(D2, "src_start_addr", 8, 8), p(D2, "dst_start_addr", 16, 8),
    p(D2, "elem_size", 24, 4), p(D2, "num_elem", 28, 4), p(D2, "src_step_elem", 32, 4),
    p(D2, "dst_step_elem", 36, 4), p(D2, "eng_mask", 40, 2), p(D2, "reserved1", 42, 22),
];

/// The rows of one struct, in offset order.
pub fn fields_of(structure: &str) -> impl Iterator<Item = &'static FieldLayout> + '_ {
    FIELD_LAYOUT
        .iter()
        .filter(move |r| r.structure == structure)
}

/// Test support: asserts a struct's real `(field, offset_of!, size)` list is exactly its
/// rows of [`FIELD_LAYOUT`].
#[cfg(test)]
pub(crate) fn assert_pinned(structure: &str, actual: &[(&str, usize, usize)]) {
    let table: Vec<(&str, usize, usize)> = fields_of(structure)
        .map(|r| (r.field, r.offset, r.size))
        .collect();
    assert_eq!(
        actual,
        table.as_slice(),
        "{structure} layout drifted from FIELD_LAYOUT"
    );
}

/// Test support: `pinned!(Type, "NAME", [field, ...])` checks each field's `offset_of!`
/// and size against [`FIELD_LAYOUT`], and the type's size against the rows' total.
#[cfg(test)]
macro_rules! pinned {
    ($t:ty, $name:expr, [$($f:ident),* $(,)?]) => {{
        use zerocopy::FromZeros;
        let z = <$t>::new_zeroed();
        let actual = [$((stringify!($f), core::mem::offset_of!($t, $f), core::mem::size_of_val(&z.$f))),*];
        $crate::isa::layout::assert_pinned($name, &actual);
        let total: usize = actual.iter().map(|a| a.2).sum();
        assert_eq!(core::mem::size_of::<$t>(), total, "{} size", $name);
    }};
}
#[cfg(test)]
pub(crate) use pinned;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_tile_each_struct() {
        let sizes = [
            (HDR, 4),
            (T4, 20),
            (IND, 12),
            (I20, 20),
            (MP, 20),
            (PBL, 64),
            (GT, 64),
            (IC, 64),
            (DI, 64),
            (EU, 64),
            (D2, 64),
        ];
        for (name, size) in sizes {
            let mut next = 0;
            for r in fields_of(name) {
                assert_eq!(
                    r.offset, next,
                    "{name}.{} leaves a gap or overlaps",
                    r.field
                );
                next += r.size;
            }
            assert_eq!(next, size, "{name} rows do not cover {size} bytes");
        }
        let covered: usize = sizes.iter().map(|(n, _)| fields_of(n).count()).sum();
        assert_eq!(covered, FIELD_LAYOUT.len(), "a row names an unknown struct");
    }

    #[test]
    fn seed_offsets_are_marked() {
        let seq = fields_of(EU)
            .find(|r| r.field == "sequence_length")
            .unwrap();
        assert_eq!((seq.offset, seq.size, seq.origin), (52, 4, Origin::Seed));
        assert!(fields_of(T4).all(|r| r.origin == Origin::Seed));
        assert!(fields_of(GT).all(|r| r.origin == Origin::Project));
    }
}
