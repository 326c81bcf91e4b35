//! The `.npy` inputs of the example scenarios in the repository's `examples/`
//! folder, made deterministically (a fixed xorshift stream per file): `cargo run -p
//! hostsim --example make_examples` writes them, a test regenerates them and compares
//! with the committed files, and the demo uses the embedding example's indices.
//!
//! - `embedding/`: `ids.npy`, 4096 u32 row indices into a 1000-row table, drawn with
//!   repeats, the last [`EMBEDDING_PADDING`] padded with the out-of-range row 1000;
//! - `pool_gathers/`: `nc_idx.npy` (u32 `[16, 256]`, some past the 1500-element rows),
//!   `lg_src.npy` (bf16 bits `[32, 512]`) and `lg_idx.npy` (u16 element offsets
//!   `[32, 8]`);
//! - `copy_update/`: `table.npy` (f32 `[256, 32]`), `upd_idx.npy` (u32 `[1, 512]`, some
//!   past the 256 rows) and `upd_data.npy` (f32 `[1, 512, 32]`);
//! - `embedding_tile/`: `idx.npy`, a `(128, 1)` i32 index tile (one negative, one past
//!   the table, one repeat);
//! - `column_window/`: `rows.npy` (`(32, 1)` i32) and `row0.npy` (1x1 i32);
//! - `bound_register/`: `idx.npy` and `idx_overrun.npy` (u32 `[1, 8]`, the second with
//!   one index past the table but under the bound register);
//! - `gather_transpose/`: `idx.npy` ([`GATHER_TRANSPOSE_INDICES`], u32 `[1, 8]`, one past
//!   the 64-row tables);
//! - `moe_expert/`: `block_expert.npy` and `inactive.npy` (1x1 i32 expert numbers, the
//!   second past the experts).

use std::path::{Path, PathBuf};

use dma::Dtype;

use crate::error::Error;
use crate::npy::{self, storage_descr, NpyArray};

/// The example folders under `examples/`.
pub const EXAMPLES: [&str; 10] = [
    "embedding",
    "pool_gathers",
    "copy_update",
    "embedding_tile",
    "column_window",
    "copy_5d",
    "bound_register",
    "gather_transpose",
    "index_column",
    "moe_expert",
];

/// Rows of the embedding example's table.
pub const EMBEDDING_ROWS: u32 = 1000;
/// Indices of the embedding example.
pub const EMBEDDING_INDICES: usize = 4096;
/// Trailing indices of the embedding example padded with [`EMBEDDING_ROWS`].
pub const EMBEDDING_PADDING: usize = 96;

/// A deterministic xorshift64 stream.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn array(dtype: Dtype, shape: &[u64], data: Vec<u8>) -> NpyArray {
    NpyArray {
        descr: storage_descr(dtype).to_string(),
        shape: shape.to_vec(),
        data,
    }
}

fn u32s(values: impl IntoIterator<Item = u32>) -> Vec<u8> {
    values.into_iter().flat_map(u32::to_le_bytes).collect()
}

/// Small multiples of 1/8 in -125..125: exact in f32 and bf16.
fn eighths(s: &mut Stream) -> f32 {
    (s.below(2000) as f32 - 1000.0) / 8.0
}

/// The embedding example's `ids.npy`: `[1, 4096]` u32.
pub fn embedding_ids() -> NpyArray {
    let mut s = Stream(0x2545_f491_4f6c_dd1d);
    let ids = (0..EMBEDDING_INDICES).map(|i| match i >= EMBEDDING_INDICES - EMBEDDING_PADDING {
        true => EMBEDDING_ROWS,
        false => s.below(u64::from(EMBEDDING_ROWS)) as u32,
    });
    array(
        Dtype::U32,
        &[1, EMBEDDING_INDICES as u64],
        u32s(ids.collect::<Vec<_>>()),
    )
}

fn pool_gathers() -> Vec<(&'static str, NpyArray)> {
    let mut s = Stream(0x9e37_79b9_7f4a_7c15);
    let nc_idx = u32s(
        (0..16 * 256)
            .map(|_| s.below(1600) as u32)
            .collect::<Vec<_>>(),
    );
    let lg_src: Vec<u8> = (0..32 * 512)
        .flat_map(|_| half::bf16::from_f32(eighths(&mut s)).to_le_bytes())
        .collect();
    let lg_idx: Vec<u8> = (0..32 * 8)
        .flat_map(|_| (s.below(508) as u16).to_le_bytes())
        .collect();
    vec![
        (
            "pool_gathers/nc_idx.npy",
            array(Dtype::U32, &[16, 256], nc_idx),
        ),
        (
            "pool_gathers/lg_src.npy",
            array(Dtype::Bf16, &[32, 512], lg_src),
        ),
        (
            "pool_gathers/lg_idx.npy",
            array(Dtype::U16, &[32, 8], lg_idx),
        ),
    ]
}

fn copy_update() -> Vec<(&'static str, NpyArray)> {
    let mut s = Stream(0xd1b5_4a32_d192_ed03);
    let f32s = |s: &mut Stream, n: usize| -> Vec<u8> {
        (0..n).flat_map(|_| eighths(s).to_le_bytes()).collect()
    };
    let table = f32s(&mut s, 256 * 32);
    let idx = u32s((0..512).map(|_| s.below(300) as u32).collect::<Vec<_>>());
    let data = f32s(&mut s, 512 * 32);
    vec![
        (
            "copy_update/table.npy",
            array(Dtype::F32, &[256, 32], table),
        ),
        ("copy_update/upd_idx.npy", array(Dtype::U32, &[1, 512], idx)),
        (
            "copy_update/upd_data.npy",
            array(Dtype::F32, &[1, 512, 32], data),
        ),
    ]
}

fn i32s(values: impl IntoIterator<Item = i32>) -> Vec<u8> {
    values.into_iter().flat_map(i32::to_le_bytes).collect()
}

/// Partitions of the NKI-idiom examples' SBUF tiles.
pub const TILE_ROWS: usize = 128;

/// `embedding_tile/idx.npy`: a `(128, 1)` i32 row index per partition into the 1000-row
/// table; position 5 is -1 and 77 is 1000 (both out of bounds), and 100 repeats 3.
fn embedding_tile() -> Vec<(&'static str, NpyArray)> {
    let mut s = Stream(0x6a09_e667_f3bc_c908);
    let mut ids: Vec<i32> = (0..TILE_ROWS).map(|_| s.below(1000) as i32).collect();
    (ids[5], ids[77], ids[100]) = (-1, 1000, ids[3]);
    let a = array(Dtype::I32, &[TILE_ROWS as u64, 1], i32s(ids));
    vec![("embedding_tile/idx.npy", a)]
}

/// `column_window/`: `rows.npy`, 32 i32 row indices `(32, 1)` into the 256-row table,
/// and `row0.npy`, the 1x1 i32 first row of the scalar-offset block (100).
fn column_window() -> Vec<(&'static str, NpyArray)> {
    let mut s = Stream(0xbb67_ae85_84ca_a73b);
    let rows = i32s((0..32).map(|_| s.below(256) as i32));
    vec![
        ("column_window/rows.npy", array(Dtype::I32, &[32, 1], rows)),
        (
            "column_window/row0.npy",
            array(Dtype::I32, &[1, 1], i32s([100])),
        ),
    ]
}

/// The clean indices of the `bound_register/` example (a `[1, 8]` u32 row into its
/// 1000-row table), and the same with position 3 set to 1500: past the table, under the
/// instruction's bound of 2000.
pub const BOUND_REGISTER_INDICES: [u32; 8] = [3, 999, 0, 500, 1, 2, 7, 998];

/// `bound_register/`: `idx.npy` ([`BOUND_REGISTER_INDICES`]) and `idx_overrun.npy`
/// (position 3 is 1500).
fn bound_register() -> Vec<(&'static str, NpyArray)> {
    let mut overrun = BOUND_REGISTER_INDICES;
    overrun[3] = 1500;
    let row = |v: [u32; 8]| array(Dtype::U32, &[1, 8], u32s(v));
    vec![
        ("bound_register/idx.npy", row(BOUND_REGISTER_INDICES)),
        ("bound_register/idx_overrun.npy", row(overrun)),
    ]
}

/// The `gather_transpose/` example's row indices into its 64-row tables: position 5 is
/// past them, and 9 repeats.
pub const GATHER_TRANSPOSE_INDICES: [u32; 8] = [9, 0, 63, 17, 9, 64, 32, 1];

/// `gather_transpose/idx.npy`: [`GATHER_TRANSPOSE_INDICES`] as a `[1, 8]` u32 vector.
fn gather_transpose() -> Vec<(&'static str, NpyArray)> {
    let a = array(Dtype::U32, &[1, 8], u32s(GATHER_TRANSPOSE_INDICES));
    vec![("gather_transpose/idx.npy", a)]
}

/// Tiles of the `index_column/` example: columns of its index tile.
pub const INDEX_COLUMNS: usize = 4;

/// `index_column/i_sb.npy`: a `(128, 4)` i32 tile, column `t` the 1000-row table's rows
/// for tile `t`; partition 9 of column 1 is -1 and partition 30 of column 2 is 1000 (both
/// out of bounds).
fn index_column() -> Vec<(&'static str, NpyArray)> {
    let mut s = Stream(0x3c6e_f372_fe94_f82b);
    let mut ids: Vec<i32> = (0..TILE_ROWS * INDEX_COLUMNS)
        .map(|_| s.below(1000) as i32)
        .collect();
    (ids[9 * INDEX_COLUMNS + 1], ids[30 * INDEX_COLUMNS + 2]) = (-1, 1000);
    let shape = [TILE_ROWS as u64, INDEX_COLUMNS as u64];
    vec![(
        "index_column/i_sb.npy",
        array(Dtype::I32, &shape, i32s(ids)),
    )]
}

/// `moe_expert/`: `block_expert.npy` (1x1 i32, expert 2) and `inactive.npy` (1x1 i32,
/// expert 4: past the 4 experts, a skipped load).
fn moe_expert() -> Vec<(&'static str, NpyArray)> {
    let one = |v: i32| array(Dtype::I32, &[1, 1], i32s([v]));
    vec![
        ("moe_expert/block_expert.npy", one(2)),
        ("moe_expert/inactive.npy", one(4)),
    ]
}

/// Every example `.npy` file: its path under `examples/` and its array.
pub fn example_files() -> Vec<(&'static str, NpyArray)> {
    let mut files = vec![("embedding/ids.npy", embedding_ids())];
    files.extend(pool_gathers());
    files.extend(copy_update());
    files.extend(embedding_tile());
    files.extend(column_window());
    files.extend(bound_register());
    files.extend(gather_transpose());
    files.extend(index_column());
    files.extend(moe_expert());
    files
}

/// Writes every example `.npy` file under `root` (creating the folders); returns the
/// paths written.
pub fn write_examples(root: &Path) -> Result<Vec<PathBuf>, Error> {
    example_files()
        .into_iter()
        .map(|(rel, a)| {
            let path = root.join(rel);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::Scenario {
                    what: dir.display().to_string(),
                    rule: format!("the folder cannot be created: {e}"),
                })?;
            }
            npy::write(&path, &a)?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Mechanism;
    use crate::scenario::{load, prepare, Overrides};

    fn repo_examples() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"))
    }

    #[test]
    fn the_committed_files_are_what_the_generator_makes() {
        let dir = std::env::temp_dir().join(format!("hostsim-examples-{}", std::process::id()));
        let written = write_examples(&dir).unwrap();
        assert_eq!(written.len(), 16);
        for (rel, _) in example_files() {
            let fresh = std::fs::read(dir.join(rel)).unwrap();
            let committed = std::fs::read(repo_examples().join(rel)).unwrap();
            assert!(
                fresh == committed,
                "examples/{rel} differs from the generator's output"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_embedding_indices_repeat_and_end_in_padding() {
        let a = embedding_ids();
        let ids: Vec<u32> = a
            .data
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(ids.len(), EMBEDDING_INDICES);
        assert!(ids[EMBEDDING_INDICES - EMBEDDING_PADDING..]
            .iter()
            .all(|&i| i == EMBEDDING_ROWS));
        let real = &ids[..EMBEDDING_INDICES - EMBEDDING_PADDING];
        assert!(real.iter().all(|&i| i < EMBEDDING_ROWS));
        let mut distinct = real.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() < real.len(), "duplicates exist");
    }

    #[test]
    fn every_example_runs_and_matches_the_reference() {
        for name in EXAMPLES {
            let loaded = load(&repo_examples().join(name).join("scenario.toml")).unwrap();
            let p = prepare(&loaded, Overrides::default()).unwrap();
            let routed = p.execute().unwrap();
            let reference = p.execute_with(Mechanism::Reference).unwrap();
            assert_eq!(
                routed.fabric.first_difference(&reference.fabric),
                None,
                "{name}"
            );
            assert_eq!(routed.reports.len(), loaded.scenario.ops.len(), "{name}");
        }
    }
}
