//! NKI's DMA idioms written as scenarios, each run on every generation with every
//! mechanism that serves it, and checked against the value numpy gives (computed here in
//! closed form: `np.take`, `np.add.at`, slicing), element for element.

use dma::Generation;

use super::exec::tests::{check_with, prepared, u32_array};
use super::Overrides;
use crate::npy::NpyArray;
use crate::runtime::Mechanism;

/// A `.npy` array of i32 values.
fn i32_array(shape: &[u64], v: &[i32]) -> NpyArray {
    NpyArray {
        descr: "<i4".into(),
        shape: shape.to_vec(),
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// An f32 `[rows, cols]` HBM tensor `name` holding iota, as scenario text.
fn iota(name: &str, shape: &str) -> String {
    format!("[[tensor]]\nname = \"{name}\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = {shape}\ninit = \"iota\"\n")
}

/// A tensor `name` of `dtype` in `space`, as scenario text (`init` a file, or zeros).
fn tensor(name: &str, space: &str, dtype: &str, shape: &str, init: Option<&str>) -> String {
    let init = init.map_or(String::new(), |f| format!("init = \"{f}\"\n"));
    format!("[[tensor]]\nname = \"{name}\"\nspace = \"{space}\"\ndtype = \"{dtype}\"\nshape = {shape}\n{init}")
}

/// Runs `text` on every generation with auto, dge and reference, and asserts tensor
/// `name` (f32) ends as `want` on each.
fn check(text: &str, files: &[(&str, NpyArray)], name: &str, want: &[f32]) {
    let mechanisms = [Mechanism::Auto, Mechanism::Dge, Mechanism::Reference];
    let want: Vec<u64> = want.iter().map(|x| u64::from(x.to_bits())).collect();
    check_with(&Generation::ALL, &mechanisms, text, files, (name, 4), &want);
}

/// `np.arange(n)` as f32.
fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// Rows `idx` of a `[10, 4]` iota table, zeros for an index outside it (numpy's `take`
/// of the in-bounds ones into a zeroed tile).
fn take_10x4_iota(idx: &[i32]) -> Vec<f32> {
    let table = arange(40);
    idx.iter()
        .flat_map(|&i| match i {
            0..=9 => table[i as usize * 4..i as usize * 4 + 4].to_vec(),
            _ => vec![0.0; 4],
        })
        .collect()
}

#[test]
fn whole_one_partition_tensors_copy_and_gather_row_by_row() {
    // a [1, R, C] on-core tensor as a whole side is its R rows inside one partition
    let there = format!(
        "{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"h\"\ndst = \"t\"\n",
        iota("h", "[6, 4]"),
        tensor("t", "sbuf", "f32", "[1, 6, 4]", None),
    );
    check(&there, &[], "t", &arange(24));
    // and back, rows 4, 0, 5 of it gathered to HBM
    let idx = [4, 0, 5];
    let back = format!(
        "{there}{}{}[[op]]\nop = \"dma_gather\"\nsrc = \"t\"\nindex = \"idx\"\ndst = \"o\"\n",
        tensor("idx", "sbuf", "i32", "[3, 1]", Some("idx.npy")),
        tensor("o", "hbm", "f32", "[3, 4]", None),
    );
    let want: Vec<f32> = idx
        .iter()
        .flat_map(|&r| arange(24)[r * 4..r * 4 + 4].to_vec())
        .collect();
    let files = [("idx.npy", i32_array(&[3, 1], &[4, 0, 5]))];
    check(&back, &files, "o", &want);
}

#[test]
fn embedding_lookup_into_an_sbuf_tile_with_oob_skip() {
    // tile[p, :] = table[idx[p], :] for in-bounds idx[p]; -1 and 10 are skipped
    let idx = [3, -1, 0, 10, 3, 9, 2, 1];
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"table\", ap = [[4, 8], [1, 4]], vector_offset = \"idx\", indirect_dim = 0 }}\ndst = \"tile\"\noob = \"skip\"\n",
        iota("table", "[10, 4]"),
        tensor("idx", "sbuf", "i32", "[8, 1]", Some("idx.npy")),
        tensor("tile", "sbuf", "f32", "[8, 4]", None),
    );
    let want = take_10x4_iota(&idx);
    check(
        &text,
        &[("idx.npy", i32_array(&[8, 1], &idx))],
        "tile",
        &want,
    );
}

#[test]
fn scatter_add_from_an_sbuf_tile_with_duplicate_i32_indices() {
    // np.add.at(table, idx, tile) with idx repeating rows 1 and 4
    let idx = [1, 4, 1, 0, 4, 4];
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_scatter\"\nsrc = \"tile\"\nindex = \"idx\"\ndst = \"table\"\ncompute = \"add\"\nunique_indices = false\n",
        iota("table", "[5, 3]"),
        tensor("idx", "sbuf", "i32", "[6, 1]", Some("idx.npy")),
        tensor("tile", "sbuf", "f32", "[6, 3]", Some("tile.npy")),
    );
    let tile: Vec<f32> = (0..18).map(|i| 0.5 + i as f32).collect();
    let tile_npy = NpyArray {
        descr: "<f4".into(),
        shape: vec![6, 3],
        data: tile.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let mut want = arange(15);
    for (k, &r) in idx.iter().enumerate() {
        for c in 0..3 {
            want[r as usize * 3 + c] += tile[k * 3 + c];
        }
    }
    let files = [
        ("idx.npy", i32_array(&[6, 1], &idx)),
        ("tile.npy", tile_npy),
    ];
    check(&text, &files, "table", &want);
}

#[test]
fn a_3d_copy_indexed_on_dim_1() {
    // dst = src[:, idx, :] for src [3, 5, 4]
    let idx = [4, 0, 2];
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"src\", ap = [[20, 3], [4, 3], [1, 4]], vector_offset = \"idx\", indirect_dim = 1 }}\ndst = \"dst\"\n",
        iota("src", "[3, 5, 4]"),
        tensor("idx", "sbuf", "i32", "[1, 3]", Some("idx.npy")),
        tensor("dst", "hbm", "f32", "[3, 3, 4]", None),
    );
    let mut want = Vec::new();
    for a in 0..3 {
        for &b in &idx {
            want.extend((0..4).map(|c| (a * 20 + b * 4 + c) as f32));
        }
    }
    check(
        &text,
        &[("idx.npy", i32_array(&[1, 3], &idx))],
        "dst",
        &want,
    );
}

#[test]
fn both_sides_indexed_in_one_copy() {
    // dst[didx[k], :] = src[sidx[k], :]; the other dst rows keep their values
    let (sidx, didx) = ([5, 0, 3], [1, 6, 2]);
    let text = format!(
        "{}{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"src\", ap = [[2, 3], [1, 2]], vector_offset = \"sidx\" }}\ndst = {{ tensor = \"dst\", ap = [[2, 3], [1, 2]], vector_offset = \"didx\" }}\n",
        iota("src", "[6, 2]"),
        tensor("sidx", "sbuf", "i32", "[3, 1]", Some("s.npy")),
        tensor("didx", "sbuf", "u32", "[1, 3]", Some("d.npy")),
        tensor("dst", "hbm", "f32", "[7, 2]", None),
    );
    let mut want = vec![0.0f32; 14];
    for (s, d) in sidx.iter().zip(didx) {
        want[d * 2] = (s * 2) as f32;
        want[d * 2 + 1] = (s * 2 + 1) as f32;
    }
    let didx_npy = super::exec::tests::u32_array(&[1, 3], &didx.map(|d| d as u32));
    let files = [("s.npy", i32_array(&[3, 1], &sidx)), ("d.npy", didx_npy)];
    check(&text, &files, "dst", &want);
}

#[test]
fn a_column_window_and_a_scalar_offset_row_block() {
    // win = table[rows, 3:5] (offset 3); blk = table[row0:row0 + 2, :]
    let rows = [6, 1, 4];
    let text = format!(
        "{}{}{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"table\", ap = [[8, 3], [1, 2]], offset = 3, vector_offset = \"rows\" }}\ndst = \"win\"\n\
         [[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"table\", ap = [[8, 2], [1, 8]], scalar_offset = \"row0\" }}\ndst = \"blk\"\n",
        iota("table", "[7, 8]"),
        tensor("rows", "sbuf", "i32", "[3, 1]", Some("rows.npy")),
        tensor("row0", "sbuf", "i32", "[1, 1]", Some("row0.npy")),
        tensor("win", "sbuf", "f32", "[3, 2]", None),
        tensor("blk", "sbuf", "f32", "[2, 8]", None),
    );
    let files = [
        ("rows.npy", i32_array(&[3, 1], &rows)),
        ("row0.npy", i32_array(&[1, 1], &[5])),
    ];
    let win: Vec<f32> = rows
        .iter()
        .flat_map(|r| [(r * 8 + 3) as f32, (r * 8 + 4) as f32])
        .collect();
    check(&text, &files, "win", &win);
    check(
        &text,
        &files,
        "blk",
        &(40..56).map(|i| i as f32).collect::<Vec<_>>(),
    );
    // row0 = 6 takes the 2-row block past the table's 7 rows: a run-time fault (exit 1)
    let files = [
        ("rows.npy", i32_array(&[3, 1], &rows)),
        ("row0.npy", i32_array(&[1, 1], &[6])),
    ];
    let p = prepared(&text, &files, Overrides::default()).unwrap();
    let e = p.execute().unwrap_err();
    assert_eq!(super::exit_code(&e), 1, "{e}");
    assert!(e.to_string().contains("op 1 (dma_copy"), "{e}");
    assert!(e.to_string().contains("scalar_offset 6"), "{e}");
    // (the table's 7 rows are the bound the scalar broke)
    let at = e.index_fault();
    assert_eq!((at.value, at.bound), (Some(6), Some(7)));
}

#[test]
fn index_views_a_column_of_a_wider_tile_and_a_strided_window() {
    // NKI's prefill idiom: i_sb is [8, 3], column t holding tile t's indices, read as
    // i_sb.ap([[3, 8], [1, 1]], offset = t); tile_t[p, :] = table[i_sb[p, t], :]
    let cols: [[i32; 8]; 3] = [
        [3, 0, 9, 1, 2, 8, 4, 7],
        [5, 5, 6, -1, 0, 1, 2, 3],
        [9, 8, 7, 6, 5, 4, 3, 2],
    ];
    let i_sb: Vec<i32> = (0..8).flat_map(|p| cols.map(|c| c[p])).collect();
    let mut text =
        iota("table", "[10, 4]") + &tensor("i_sb", "sbuf", "i32", "[8, 3]", Some("i_sb.npy"));
    for t in 0..3 {
        text += &tensor(&format!("tile{t}"), "sbuf", "f32", "[8, 4]", None);
        text += &format!(
            "[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"table\", ap = [[4, 8], [1, 4]], vector_offset = {{ tensor = \"i_sb\", ap = [[3, 8], [1, 1]], offset = {t} }} }}\ndst = \"tile{t}\"\noob = \"skip\"\n"
        );
    }
    let files = [("i_sb.npy", i32_array(&[8, 3], &i_sb))];
    for (t, col) in cols.iter().enumerate() {
        let want = take_10x4_iota(col);
        check(&text, &files, &format!("tile{t}"), &want);
    }
    // under oob = "error" the -1 at i_sb[3, 1] fails the op, named by its tile element
    let strict = text.replace("oob = \"skip\"", "oob = \"error\"");
    fails_when_run(
        &strict,
        &files,
        "src index -1 at position 3 of the .ap() view of i_sb (i_sb[3, 1]) is out of bounds for dim 0 of table (size 10)",
    );
    // a scatter-add through every other element of a [1, 8] vector from element 1:
    // out[v[1 + 2k], :] += rows[k, :]
    let v = [7, 2, 7, 0, 7, 2, 7, 1];
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"rows\"\ndst = {{ tensor = \"out\", ap = [[3, 4], [1, 3]], vector_offset = {{ tensor = \"v\", ap = [[8, 1], [2, 4]], offset = 1 }} }}\ncompute = \"add\"\nunique_indices = false\n",
        iota("rows", "[4, 3]"),
        tensor("v", "sbuf", "u32", "[1, 8]", Some("v.npy")),
        tensor("out", "hbm", "f32", "[3, 3]", Some("out.npy")),
    );
    let ones = NpyArray {
        descr: "<f4".into(),
        shape: vec![3, 3],
        data: [1.0f32; 9].iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let files = [("v.npy", u32_array(&[1, 8], &v)), ("out.npy", ones)];
    let mut want = [1.0f32; 9];
    for (k, &i) in [2usize, 0, 2, 1].iter().enumerate() {
        for c in 0..3 {
            want[i * 3 + c] += (k * 3 + c) as f32;
        }
    }
    check(&text, &files, "out", &want);
}

#[test]
fn index_views_that_break_a_rule_are_refused_naming_it() {
    let text = |view: &str| {
        format!(
            "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"table\", ap = [[4, 8], [1, 4]], vector_offset = {view} }}\ndst = \"tile\"\n",
            iota("table", "[10, 4]"),
            tensor("i_sb", "sbuf", "i32", "[8, 3]", None),
            tensor("tile", "sbuf", "f32", "[8, 4]", None),
        )
    };
    for (view, rule) in [
        (
            "\"i_sb\"",
            "vector_offset i_sb has shape [8, 3]; it must be [1, 8] or [8, 1], one index per position of ap[0] (num 8), or pick 8 of its elements with an .ap()",
        ),
        (
            "{ tensor = \"i_sb\", ap = [[3, 4], [1, 1]] }",
            "vector_offset i_sb: its ap visits 4 elements, but the side's ap[0] has num 8",
        ),
        (
            "{ tensor = \"i_sb\", ap = [[3, 8], [1, 1]], offset = 3 }",
            "vector_offset i_sb: ap[0] = [3, 8] takes position [7] to element 24, outside the 24 elements of i_sb",
        ),
        (
            "{ tensor = \"i_sb\", ap = [[1, 8], [1, 1]] }",
            "vector_offset i_sb: on sbuf the first [step, num] pair steps partitions",
        ),
        (
            "{ tensor = \"i_sb\", ap = [[3, 8], [1, 1]], vector_offset = \"i_sb\" }",
            "src.vector_offset: an index tile's .ap() takes no vector_offset, indirect_dim or scalar_offset of its own",
        ),
        (
            "{ tensor = \"nope\", ap = [[3, 8], [1, 1]] }",
            "src.vector_offset.tensor",
        ),
    ] {
        let e = prepared(&text(view), &[], Overrides::default()).unwrap_err();
        assert_eq!(super::exit_code(&e), 2, "{e}");
        assert!(e.to_string().contains(rule), "{view}: {e}");
    }
}

/// `np.arange(prod(shape)).reshape(shape).transpose(axes)`, flattened.
fn transposed_iota(shape: &[usize], axes: &[usize]) -> Vec<f32> {
    let out: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let strides: Vec<usize> = (0..shape.len())
        .map(|k| shape[k + 1..].iter().product())
        .collect();
    let total: usize = shape.iter().product();
    (0..total)
        .map(|flat| {
            let (mut rest, mut at) = (flat, 0);
            for k in (0..out.len()).rev() {
                at += (rest % out[k]) * strides[axes[k]];
                rest /= out[k];
            }
            at as f32
        })
        .collect()
}

#[test]
fn direct_transposes_are_numpys_between_every_pair_of_spaces() {
    let cases: [(&[usize], &[usize]); 3] = [
        (&[6, 4], &[1, 0]),
        (&[3, 4, 5], &[2, 1, 0]),
        (&[4, 2, 1, 3], &[3, 1, 2, 0]),
    ];
    for (shape, axes) in cases {
        let out: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        for (from, to) in [
            ("hbm", "hbm"),
            ("hbm", "sbuf"),
            ("sbuf", "hbm"),
            ("sbuf", "sbuf"),
        ] {
            let text = format!(
                "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"h\"\ndst = \"x\"\n[[op]]\nop = \"dma_transpose\"\nsrc = \"x\"\ndst = \"y\"\n",
                iota("h", &format!("{shape:?}")),
                tensor("x", from, "f32", &format!("{shape:?}"), None),
                tensor("y", to, "f32", &format!("{out:?}"), None),
            );
            let want = transposed_iota(shape, axes);
            check(&text, &[], "y", &want);
        }
    }
    // an .ap() side: the [4, 6] block at row 1 of an [8, 6] tensor, into a [6, 4] tile
    let text = format!(
        "{}{}[[op]]\nop = \"dma_transpose\"\nsrc = {{ tensor = \"h\", ap = [[6, 4], [1, 6]], offset = 6 }}\ndst = \"y\"\naxes = [1, 0]\n",
        iota("h", "[8, 6]"),
        tensor("y", "sbuf", "f32", "[6, 4]", None),
    );
    let want: Vec<f32> = transposed_iota(&[4, 6], &[1, 0])
        .iter()
        .map(|v| v + 6.0)
        .collect();
    check(&text, &[], "y", &want);
}

#[test]
fn direct_transposes_that_break_a_rule_are_refused_naming_it() {
    let text = |src_shape: &str, dst: &str, extra: &str| {
        format!(
            "{}{}[[op]]\nop = \"dma_transpose\"\nsrc = \"h\"\ndst = {dst}\n{extra}",
            iota("h", src_shape),
            tensor("y", "sbuf", "f32", "[6, 4]", None),
        )
    };
    for (t, rule) in [
        (
            text("[4, 6]", "\"y\"", "axes = [0, 1]\n"),
            "axes: [0, 1] for a src of 2 dims",
        ),
        (
            text("[6, 4]", "\"y\"", ""),
            "dst: y walks [6, 4]; src h [6, 4] transposed by [1, 0] is [4, 6]",
        ),
        (
            text("[4, 3, 2]", "\"y\"", ""),
            "dst: y walks [6, 4]; src h [4, 3, 2] transposed by [2, 1, 0] is [2, 3, 4]",
        ),
        (
            text(
                "[4, 6]",
                "{ tensor = \"y\", ap = [[4, 6], [1, 4]], scalar_offset = \"y\" }",
                "",
            ),
            "dst: a direct dma_transpose's sides take no vector_offset or scalar_offset",
        ),
        // a walk that leaves its tensor is named as the user wrote it (from an audit: the
        // permuted walk was named)
        (
            text(
                "[6, 4]",
                "{ tensor = \"y\", ap = [[4, 6], [1, 4]], offset = 1 }",
                "",
            ),
            "dst: ap[1] = [1, 4] takes position [5, 3] to element 24, outside the 24 elements of y",
        ),
    ] {
        let e = prepared(&t, &[], Overrides::default()).unwrap_err();
        assert_eq!(super::exit_code(&e), 2, "{e}");
        assert!(e.to_string().contains(rule), "{rule}: {e}");
    }
}

/// Runs `text` on the DGE and the reference: each fails with an error containing `rule`.
fn fails_when_run(text: &str, files: &[(&str, NpyArray)], rule: &str) {
    for m in [Mechanism::Dge, Mechanism::Reference] {
        let over = Overrides {
            mechanism: Some(m),
            ..Overrides::default()
        };
        let e = prepared(text, files, over).unwrap().execute().unwrap_err();
        assert!(e.to_string().contains(rule), "{}: {e}", m.name());
    }
}

/// A `.npy` array of i64 values.
fn i64_array(shape: &[u64], v: &[i64]) -> NpyArray {
    NpyArray {
        descr: "<i8".into(),
        shape: shape.to_vec(),
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

#[test]
fn a_scalar_offset_steps_a_tensor_dim_past_the_patterns_pairs() {
    // NKI's KV-cache write: k_cache is (B, d, Smax) = (2, 3, 8); batch 1's new S = 2
    // columns at position p, k_cache.ap([[Smax, d], [1, S]], offset = 1 * d * Smax,
    // scalar_offset = p, indirect_dim = 2): indirect_dim names the tensor's last dim (its
    // stride is 1), though the pattern has two pairs
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"new\"\ndst = {{ tensor = \"k_cache\", ap = [[8, 3], [1, 2]], offset = 24, scalar_offset = \"p\", indirect_dim = 2 }}\n",
        iota("new", "[3, 2]"),
        tensor("p", "sbuf", "i32", "[1, 1]", Some("p.npy")),
        tensor("k_cache", "hbm", "f32", "[2, 3, 8]", None),
    );
    let files = [("p.npy", i32_array(&[1, 1], &[5]))];
    let mut want = vec![0.0f32; 48];
    for r in 0..3 {
        for c in 0..2 {
            want[24 + r * 8 + 5 + c] = (r * 2 + c) as f32;
        }
    }
    check(&text, &files, "k_cache", &want);
    // p = 7 takes column 8 past the cache's last position: a run-time error
    fails_when_run(
        &text,
        &[("p.npy", i32_array(&[1, 1], &[7]))],
        "scalar_offset 7",
    );
}

/// nki-library's MoE weight loads, as the `moe_expert/` example writes them: the expert
/// weights declared flat and seen as `[E, P, F]` (`shape`), one expert's block by a
/// run-time expert number on the hardware DGE, an inactive expert (past the experts)
/// skipped under `oob = "skip"`, and the loaded block's bytes as u8 (`dtype`).
#[test]
fn moe_expert_loads_by_a_run_time_expert_and_skip_an_inactive_one() {
    let load = |e: &str, dst: &str, dge: &str| {
        format!("[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"w\", shape = [3, 4, 6], ap = [[6, 4], [1, 6]], scalar_offset = \"{e}\", indirect_dim = 0 }}\ndst = \"{dst}\"\noob = \"skip\"\n{dge}")
    };
    let text = [
        iota("w", "[12, 6]"),
        tensor("e", "sbuf", "i32", "[1, 1]", Some("e.npy")),
        tensor("gone", "sbuf", "i32", "[1, 1]", Some("gone.npy")),
        tensor("load", "sbuf", "f32", "[4, 6]", None),
        tensor("kept", "sbuf", "f32", "[4, 6]", None),
        tensor("bytes", "hbm", "u8", "[4, 24]", None),
        load("e", "load", "dge = \"hwdge\"\n"),
        load("gone", "kept", ""),
        "[[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"load\", dtype = \"u8\", ap = [[24, 4], [1, 24]] }\ndst = \"bytes\"\n".into(),
    ]
    .concat();
    let files = [
        ("e.npy", i32_array(&[1, 1], &[2])),
        ("gone.npy", i32_array(&[1, 1], &[3])),
    ];
    let block: Vec<f32> = (48..72).map(|i| i as f32).collect();
    let hardware = [
        Generation::Cayman,
        Generation::Mariana,
        Generation::Maverick,
    ];
    let mechanisms = [Mechanism::Auto, Mechanism::Dge, Mechanism::Reference];
    let words = |v: &[f32]| v.iter().map(|x| u64::from(x.to_bits())).collect::<Vec<_>>();
    check_with(
        &hardware,
        &mechanisms,
        &text,
        &files,
        ("load", 4),
        &words(&block),
    );
    check_with(&hardware, &mechanisms, &text, &files, ("kept", 4), &[0; 24]);
    let bytes: Vec<u64> = block
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .map(u64::from)
        .collect();
    check_with(&hardware, &mechanisms, &text, &files, ("bytes", 1), &bytes);
    // sunda has no hardware DGE: refused before anything runs
    let sunda = Overrides {
        generation: Some(Generation::Sunda),
        ..Overrides::default()
    };
    let e = prepared(&text, &files, sunda).unwrap_err();
    assert!(
        e.to_string()
            .contains("dge_mode: hwdge: sunda has no hardware DGE"),
        "{e}"
    );
}

#[test]
fn a_kv_cache_write_of_several_rows_per_token_index() {
    // NKI's decode KV-cache update: v_cache (B * Smax, d) = (16, 4); token t's S = 3 new
    // rows go to rows tok[t]..tok[t] + 3: v_cache.ap([[1, B], [d, S], [1, d]],
    // vector_offset = tok), B = 2. Lowering takes it (some index fits); the run checks
    // the indices it reads.
    let text = |tok: &str| {
        format!(
            "{}{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"new\"\ndst = {{ tensor = \"v_cache\", ap = [[1, 2], [4, 3], [1, 4]], vector_offset = \"tok\" }}\n",
            iota("new", "[2, 3, 4]"),
            tensor("tok", "sbuf", "i32", "[2, 1]", Some(tok)),
            tensor("v_cache", "hbm", "f32", "[16, 4]", None),
        )
    };
    let files = [("tok.npy", i32_array(&[2, 1], &[5, 13]))];
    let mut want = vec![0.0f32; 64];
    for (t, row) in [5usize, 13].into_iter().enumerate() {
        for r in 0..3 {
            for c in 0..4 {
                want[(row + r) * 4 + c] = (t * 12 + r * 4 + c) as f32;
            }
        }
    }
    check(&text("tok.npy"), &files, "v_cache", &want);
    // token 1 at row 14: its rows 14..17 run past the cache's 16: the run fails, named
    let files = [("tok.npy", i32_array(&[2, 1], &[5, 14]))];
    fails_when_run(
        &text("tok.npy"),
        &files,
        "dst: index 14 at position 1 (below its bound 16) takes the walk out of its tensor",
    );
}

#[test]
fn int64_and_hbm_resident_scalar_offsets() {
    // a = table[r64:r64 + 3, :] with an i64 scalar in HBM (NKI: int64 for an HBM
    // pattern); b = table[r32:r32 + 2, 1:3] with an i32 scalar in HBM; c = table[s64, :]
    // with an i64 scalar in SBUF, still on the HBM source
    let text = format!(
        r#"{}{}{}{}{}{}{}
[[op]]
op = "dma_copy"
src = {{ tensor = "table", ap = [[4, 3], [1, 4]], scalar_offset = "r64" }}
dst = "a"
[[op]]
op = "dma_copy"
src = {{ tensor = "table", ap = [[4, 2], [1, 2]], offset = 1, scalar_offset = "r32" }}
dst = "b"
[[op]]
op = "dma_copy"
src = {{ tensor = "table", ap = [[4, 1], [1, 4]], scalar_offset = "s64" }}
dst = "c"
"#,
        iota("table", "[40, 4]"),
        tensor("r64", "hbm", "i64", "[1, 1]", Some("r64.npy")),
        tensor("r32", "hbm", "i32", "[1, 1]", Some("r32.npy")),
        tensor("s64", "sbuf", "i64", "[1, 1]", Some("s64.npy")),
        tensor("a", "sbuf", "f32", "[3, 4]", None),
        tensor("b", "hbm", "f32", "[2, 2]", None),
        tensor("c", "sbuf", "f32", "[1, 4]", None),
    );
    let files = [
        ("r64.npy", i64_array(&[1, 1], &[33])),
        ("r32.npy", i32_array(&[1, 1], &[38])),
        ("s64.npy", i64_array(&[1, 1], &[39])),
    ];
    let table = arange(160);
    let rows = |r: usize, n: usize, cols: std::ops::Range<usize>| -> Vec<f32> {
        (r..r + n)
            .flat_map(|i| table[i * 4 + cols.start..i * 4 + cols.end].to_vec())
            .collect()
    };
    check(&text, &files, "a", &rows(33, 3, 0..4));
    check(&text, &files, "b", &rows(38, 2, 1..3));
    check(&text, &files, "c", &rows(39, 1, 0..4));
    // one row further and the block leaves the table: a run-time error, nothing written
    let files = [
        ("r64.npy", i64_array(&[1, 1], &[38])),
        files[1].clone(),
        files[2].clone(),
    ];
    fails_when_run(&text, &files, "scalar_offset 38");
}

#[test]
fn an_int64_scalar_offset_on_an_sbuf_side_is_refused() {
    // NKI: "on an SBUF or PSUM operand the offset must be nl.int32"
    let text = format!(
        r#"{}{}{}
[[op]]
op = "dma_copy"
src = "x"
dst = {{ tensor = "tile", ap = [[4, 2], [1, 4]], scalar_offset = "k" }}
"#,
        tensor("x", "hbm", "f32", "[2, 4]", None),
        tensor("k", "hbm", "i64", "[1, 1]", None),
        tensor("tile", "sbuf", "f32", "[8, 4]", None),
    );
    let e = prepared(&text, &[], Overrides::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "op 0 (dma_copy src=x dst=tile dst.scalar_offset=k): dma_copy: dst: scalar_offset k is i64 but tile is in sbuf; on an SBUF or PSUM operand the scalar offset must be i32 (i64 is for HBM access patterns)"
    );
}

#[test]
fn a_5d_strided_copy() {
    // dst = np.transpose(src) for src [2, 3, 2, 2, 3]
    let text = format!(
        "{}{}[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"src\", ap = [[1, 3], [3, 2], [6, 2], [12, 3], [36, 2]] }}\ndst = \"dst\"\n",
        iota("src", "[2, 3, 2, 2, 3]"),
        tensor("dst", "hbm", "f32", "[3, 2, 2, 3, 2]", None),
    );
    let mut want = Vec::new();
    for e in 0..3 {
        for d in 0..2 {
            for c in 0..2 {
                for b in 0..3 {
                    for a in 0..2 {
                        want.push((a * 36 + b * 12 + c * 6 + d * 3 + e) as f32);
                    }
                }
            }
        }
    }
    check(&text, &[], "dst", &want);
}

#[test]
fn embedding_update_with_partition_major_sbuf_data() {
    // table[idx[i], :] += data[i, :] for idx < 4, data [S, C] over S partitions
    let idx = [2, 7, 2, 0];
    let text = format!(
        "{}{}{}[[op]]\nop = \"embedding_update\"\ntable = \"table\"\nindex = \"idx\"\ndata = \"data\"\nreduce = \"add\"\n",
        iota("table", "[4, 2]"),
        tensor("idx", "sbuf", "u32", "[1, 4]", Some("idx.npy")),
        "[[tensor]]\nname = \"data\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [4, 2]\ninit = \"iota\"\npartition = 3\n",
    );
    let mut want = arange(8);
    for (i, &r) in idx.iter().enumerate() {
        if r < 4 {
            want[r * 2] += (i * 2) as f32;
            want[r * 2 + 1] += (i * 2 + 1) as f32;
        }
    }
    let files = [(
        "idx.npy",
        super::exec::tests::u32_array(&[1, 4], &idx.map(|i| i as u32)),
    )];
    check(&text, &files, "table", &want);
}

#[test]
fn repeated_destinations_last_wins_for_a_copy_and_fail_for_a_compute_op() {
    // a plain scatter under unique_indices: row 2 gets src row 3 (the last), with a warning
    let idx = [2, 0, 5, 2];
    let op = |compute: &str| {
        format!(
            "{}{}{}[[op]]\nop = \"dma_scatter\"\nsrc = \"src\"\nindex = \"idx\"\ndst = \"dst\"\ncompute = \"{compute}\"\n",
            iota("src", "[4, 2]"),
            tensor("idx", "sbuf", "i32", "[4, 1]", Some("idx.npy")),
            tensor("dst", "hbm", "f32", "[6, 2]", None),
        )
    };
    let files = [("idx.npy", i32_array(&[4, 1], &idx))];
    let want = [2., 3., 0., 0., 6., 7., 0., 0., 0., 0., 4., 5.];
    check(&op("none"), &files, "dst", &want);
    for m in [Mechanism::Dge, Mechanism::Reference] {
        let over = Overrides {
            mechanism: Some(m),
            ..Overrides::default()
        };
        let p = prepared(&op("none"), &files, over).unwrap();
        let exec = p.execute().unwrap();
        let report = super::exec::Report::of_run(&p, &exec);
        assert_eq!(
            report.ops[0].warnings,
            ["dst indices repeat (2 at positions 0 and 3) under unique_indices = true: this plain copy lands the last index's row; on hardware the winner depends on queue timing"],
            "{}",
            m.name()
        );
        assert!(report
            .table()
            .contains("warning: op 0 (dma_scatter): dst indices repeat"));
        // with a compute op the same indices fail, naming both positions
        let p = prepared(&op("add"), &files, over).unwrap();
        let e = p.execute().unwrap_err();
        assert!(
            e.to_string().ends_with("dst index 2 repeats at positions 0 and 3; duplicate destinations need non_unique_dst_idx (in a scenario, unique_indices = false)"),
            "{}: {e}",
            m.name()
        );
    }
}

#[test]
fn a_cast_from_f32_to_bf16_rounds_to_nearest_even() {
    // tile = x.astype(bfloat16): ties go to the even neighbour, NaNs stay NaN (quiet,
    // with their sign and top payload bits), values past bf16's range become inf
    let x: Vec<f32> = [
        0x3f80_8000u32, // 1 + 2^-8: a tie, down to 1
        0x3f81_8000,    // 1 + 3 * 2^-8: a tie, up to 1 + 2^-6
        0xbf80_8000,    // -(1 + 2^-8): a tie, to -1
        0x3f80_8001,    // just past a tie: up
        0x3f80_7fff,    // just below a tie: down
        0x4049_0fdb,    // pi
        0x7fc0_0000,    // NaN
        0xff81_2345,    // a negative signalling NaN with a payload
        0x7f80_0000,    // inf
        0xff80_0000,    // -inf
        0x8000_0000,    // -0.0
        0x7f7f_ffff,    // f32 max: rounds to inf
        0x0000_0001,    // the smallest denormal
        0x477f_e000,    // 65504
        0x3eaa_aaab,    // 1/3
        0x4f00_0000,    // 2^31
    ]
    .iter()
    .map(|&b| f32::from_bits(b))
    .chain((0..16).map(|i| i as f32 * 0.3 - 2.0))
    .collect();
    let x_npy = NpyArray {
        descr: "<f4".into(),
        shape: vec![4, 8],
        data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let text = format!(
        "{}{}[[op]]\nop = \"dma_copy\"\nsrc = \"x\"\ndst = \"tile\"\n",
        tensor("x", "hbm", "f32", "[4, 8]", Some("x.npy")),
        tensor("tile", "sbuf", "bf16", "[4, 8]", None),
    );
    let want: Vec<u64> = x
        .iter()
        .map(|&v| u64::from(half::bf16::from_f32(v).to_bits()))
        .collect();
    // the rules above, spelled out for the named values
    let named = [
        0x3f80, 0x3f82, 0xbf80, 0x3f81, 0x3f80, 0x4049, 0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x8000,
        0x7f80, 0x0000,
    ];
    for (k, &b) in named.iter().enumerate() {
        assert_eq!(want[k], b, "value {k}");
    }
    let mechanisms = [Mechanism::Auto, Mechanism::Dge, Mechanism::Reference];
    let files = [("x.npy", x_npy)];
    check_with(
        &Generation::ALL,
        &mechanisms,
        &text,
        &files,
        ("tile", 2),
        &want,
    );
}

/// `np.take(src, idx, axis=0).transpose(axes)` for an iota `src` of `shape` (its first
/// dim gathered, its last moved first, the gathered one last), as u16 words, an index
/// `>= shape[0]` leaving its elements 0 (`oob = "skip"` into zeros).
fn gather_transposed(shape: &[u64], idx: &[u32]) -> Vec<u64> {
    let (n, k) = (shape[0], shape[shape.len() - 1]);
    let j: u64 = shape[1..shape.len() - 1].iter().product();
    let mut out = vec![0u64; (k * j) as usize * idx.len()];
    for kk in 0..k {
        for jj in 0..j {
            for (i, &r) in idx.iter().enumerate() {
                if u64::from(r) < n {
                    let at = (kk * j + jj) as usize * idx.len() + i;
                    out[at] = u64::from(r) * j * k + jj * k + kk;
                }
            }
        }
    }
    out
}

/// An N-D `dma_gather_transpose` of a u16 iota `src` in HBM by `idx` into `dst`, as
/// scenario text.
fn transpose_text(src: &str, idx: usize, dst: (&str, &str), axes: &str, oob: &str) -> String {
    format!(
        "[[tensor]]\nname = \"src\"\nspace = \"hbm\"\ndtype = \"u16\"\nshape = {src}\ninit = \"iota\"\n{}{}\
         [[op]]\nop = \"dma_gather_transpose\"\nsrc = \"src\"\nindex = \"idx\"\ndst = \"dst\"\naxes = {axes}\noob = \"{oob}\"\n",
        tensor("idx", "sbuf", "u32", &format!("[1, {idx}]"), Some("idx.npy")),
        tensor("dst", dst.0, "u16", dst.1, None),
    )
}

#[test]
fn gather_transposes_in_3d_and_reduced_4d_with_an_oob_skip() {
    // dst = src[idx].transpose(axes); index 9 is past the 6 rows and skipped
    let idx = [5u32, 0, 9, 2, 5];
    let files = [("idx.npy", super::exec::tests::u32_array(&[1, 5], &idx))];
    let trn2_on = [
        Generation::Cayman,
        Generation::Mariana,
        Generation::Maverick,
    ];
    let mechanisms = [Mechanism::Auto, Mechanism::Dge, Mechanism::Reference];
    let cases = [
        ("[6, 3, 4]", "[4, 3, 5]", "[2, 1, 0]"),
        ("[6, 1, 3, 4]", "[4, 1, 3, 5]", "[3, 1, 2, 0]"),
        ("[6, 3, 1, 4]", "[4, 3, 1, 5]", "[3, 1, 2, 0]"),
    ];
    for (src, dst, axes) in cases {
        let shape: Vec<u64> = src
            .trim_matches(['[', ']'])
            .split(", ")
            .map(|d| d.parse().unwrap())
            .collect();
        let want = gather_transposed(&shape, &idx);
        for space in ["sbuf", "hbm"] {
            let text = transpose_text(src, 5, (space, dst), axes, "skip");
            check_with(&trn2_on, &mechanisms, &text, &files, ("dst", 2), &want);
        }
    }
    // 2-D by an (I, 1) index tile (NKI's shape) is the same lowering; by a [1, I]
    // vector it is DMA_INDIRECT's GATHER_TRANSPOSE: both give src[idx].T
    let want = gather_transposed(&[6, 4], &idx);
    let column = [("idx.npy", super::exec::tests::u32_array(&[5, 1], &idx))];
    let by_column = transpose_text("[6, 4]", 5, ("sbuf", "[4, 5]"), "[1, 0]", "skip")
        .replace("shape = [1, 5]", "shape = [5, 1]");
    check_with(
        &trn2_on,
        &mechanisms,
        &by_column,
        &column,
        ("dst", 2),
        &want,
    );
    let by_vector = transpose_text("[6, 4]", 5, ("sbuf", "[4, 5]"), "[1, 0]", "skip");
    check_with(&trn2_on, &mechanisms, &by_vector, &files, ("dst", 2), &want);
    // the expectation spelled out for one element: dst[1][2][3] = src[2][2][1]
    let want = gather_transposed(&[6, 3, 4], &idx);
    assert_eq!(want[(3 + 2) * 5 + 3], 2 * 12 + 2 * 4 + 1);
    // oob = "error": the op fails naming the index
    let text = transpose_text("[6, 3, 4]", 5, ("sbuf", "[4, 3, 5]"), "[2, 1, 0]", "error");
    let rule = "src index 9 at position 2 of idx is out of bounds for dim 0 of src (size 6)";
    fails_when_run(&text, &files, rule);
}

#[test]
fn gather_transposes_nki_does_not_document_are_refused() {
    let files = [("idx.npy", super::exec::tests::u32_array(&[1, 2], &[0, 1]))];
    let refused = |src: &str, dst: (&str, &str), axes: &str, rule: &str| {
        let text = transpose_text(src, 2, dst, axes, "error");
        let e = prepared(&text, &files, Overrides::default()).unwrap_err();
        assert!(e.to_string().contains(rule), "{src} {axes}: {e}");
    };
    refused(
        "[4, 2, 3, 5]",
        ("hbm", "[5, 2, 3, 2]"),
        "[3, 1, 2, 0]",
        "dma_gather_transpose: src: src has shape [4, 2, 3, 5]; NKI: when src is 4-D, src.shape[1] or src.shape[2] must be 1",
    );
    refused(
        "[4, 3, 5]",
        ("hbm", "[3, 5, 2]"),
        "[1, 2, 0]",
        "dma_gather_transpose: axes: [1, 2, 0] is not a permutation NKI's dma_transpose documents: [1, 0] (2-D), [2, 1, 0] (3-D) or [3, 1, 2, 0] (4-D)",
    );
    refused(
        "[4, 15]",
        ("hbm", "[15, 2]"),
        "[2, 1, 0]",
        "src has shape [4, 15] (2 dims) but axes [2, 1, 0] permutes 3 dims",
    );
    refused(
        "[4, 3, 5]",
        ("hbm", "[5, 3, 3]"),
        "[2, 1, 0]",
        "dst has shape [5, 3, 3]; src [4, 3, 5] gathered by 2 indices and transposed is [5, 3, 2]",
    );
    refused(
        "[4, 3, 129]",
        ("hbm", "[129, 3, 2]"),
        "[2, 1, 0]",
        "NKI: src.shape[-1] must be <= 128",
    );
    // NKI moves 2-byte elements only
    let text = transpose_text("[4, 3, 5]", 2, ("hbm", "[5, 3, 2]"), "[2, 1, 0]", "error")
        .replace("u16", "f32");
    let e = prepared(&text, &files, Overrides::default()).unwrap_err();
    let rule = "dma_gather_transpose: src.dtype = f32: NKI: an indirect dma_transpose moves 2-byte elements";
    assert!(e.to_string().contains(rule), "{e}");
}

#[test]
fn row_shorthands_on_one_partition_tensors_with_i32_index_tiles() {
    // rows 3, 1, 7 of an [8, 4] table into a [1, 3, 4] SBUF tensor, by a (3, 1) i32 tile
    let (idx, rows) = ([3, 1, 7], [3usize, 1, 7]);
    let gather = format!(
        "{}{}{}[[op]]\nop = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\n",
        iota("tab", "[8, 4]"),
        tensor("idx", "sbuf", "i32", "[3, 1]", Some("idx.npy")),
        tensor("out", "sbuf", "f32", "[1, 3, 4]", None),
    );
    let files = [("idx.npy", i32_array(&[3, 1], &idx))];
    let want: Vec<f32> = rows
        .iter()
        .flat_map(|&r| arange(32)[r * 4..r * 4 + 4].to_vec())
        .collect();
    check(&gather, &files, "out", &want);
    // the rows of a [1, 3, 4] SBUF tensor scattered-added into rows 3, 1, 7 (np.add.at)
    let scatter = |op: &str, reduce: &str| {
        format!(
            "{}{}{}[[op]]\nop = \"{op}\"\n{reduce}index = \"idx\"\n",
            tensor("data", "sbuf", "f32", "[1, 3, 4]", Some("data.npy")),
            tensor("idx", "sbuf", "i32", "[1, 3]", Some("idx.npy")),
            iota("tab", "[8, 4]"),
        )
    };
    let data = NpyArray {
        descr: "<f4".into(),
        shape: vec![1, 3, 4],
        data: (0..12)
            .flat_map(|x| (x as f32 * 100.0).to_le_bytes())
            .collect(),
    };
    let files = [("idx.npy", i32_array(&[1, 3], &idx)), ("data.npy", data)];
    let mut want = arange(32);
    for (k, &r) in rows.iter().enumerate() {
        for c in 0..4 {
            want[r * 4 + c] += (k * 4 + c) as f32 * 100.0;
        }
    }
    let add = "src = \"data\"\ndst = \"tab\"\ncompute = \"add\"\n";
    check(&scatter("dma_scatter", add), &files, "tab", &want);
    let update = "data = \"data\"\ntable = \"tab\"\nreduce = \"add\"\n";
    check(&scatter("embedding_update", update), &files, "tab", &want);
    // data rows in HBM (0xca stages them on core: the access-pattern form instead)
    let hbm = scatter("embedding_update", update).replace(
        "name = \"data\"\nspace = \"sbuf\"\ndtype = \"f32\"\nshape = [1, 3, 4]",
        "name = \"data\"\nspace = \"hbm\"\ndtype = \"f32\"\nshape = [3, 4]",
    );
    let data = files[1].1.clone();
    let files = [
        ("idx.npy", u32_array(&[1, 3], &[3, 1, 7])),
        (
            "data.npy",
            NpyArray {
                shape: vec![3, 4],
                ..data
            },
        ),
    ];
    check(
        &hbm.replace("dtype = \"i32\"", "dtype = \"u32\""),
        &files,
        "tab",
        &want,
    );
}

/// A `dma_scatter` of `n` rows of 2 f32 (iota) by the u32 or i32 `[1, n]` vector
/// `idx.npy` into a `[rows, 2]` HBM table, with `compute`.
fn long_scatter(n: usize, rows: usize, dtype: &str, compute: &str) -> String {
    format!(
        "{}{}{}[[op]]\nop = \"dma_scatter\"\nsrc = \"src\"\nindex = \"idx\"\ndst = \"tab\"\ncompute = \"{compute}\"\n",
        iota("src", &format!("[{n}, 2]")),
        tensor("idx", "sbuf", dtype, &format!("[1, {n}]"), Some("idx.npy")),
        tensor("tab", "hbm", "f32", &format!("[{rows}, 2]"), None),
    )
}

/// `idx` as a `[1, n]` `.npy` of `dtype` (u32 or i32).
fn vector(dtype: &str, idx: &[u32]) -> NpyArray {
    match dtype {
        "i32" => i32_array(
            &[1, idx.len() as u64],
            &idx.iter().map(|&i| i as i32).collect::<Vec<_>>(),
        ),
        _ => u32_array(&[1, idx.len() as u64], idx),
    }
}

#[test]
fn row_ops_past_4096_indices_keep_their_promises_across_instructions() {
    // 4097 distinct indices: a plain scatter under unique_indices runs (as two requests)
    let n = 4097;
    let reversed: Vec<u32> = (0..n as u32).rev().collect();
    let mut want = vec![0f32; 2 * n];
    for (k, &r) in reversed.iter().enumerate() {
        want[2 * r as usize..2 * r as usize + 2]
            .copy_from_slice(&[2. * k as f32, 2. * k as f32 + 1.]);
    }
    for dtype in ["u32", "i32"] {
        let files = [("idx.npy", vector(dtype, &reversed))];
        check(&long_scatter(n, n, dtype, "none"), &files, "tab", &want);
        check(&long_scatter(n, n, dtype, "add"), &files, "tab", &want);
    }
    // a repeat across the split: position 4096 names row 0 again
    let mut repeat: Vec<u32> = (0..n as u32).collect();
    repeat[4096] = 0;
    for dtype in ["u32", "i32"] {
        let files = [("idx.npy", vector(dtype, &repeat))];
        // with a compute op it fails before anything is written, naming both positions
        let rule = "dst index 0 repeats at positions 0 and 4096; duplicate destinations need non_unique_dst_idx";
        fails_when_run(&long_scatter(n, n, dtype, "add"), &files, rule);
        // a plain copy lands the last row, with the warning at the op's positions
        let mut want: Vec<f32> = arange(2 * n);
        want[..2].copy_from_slice(&[8192., 8193.]);
        want[8192..].copy_from_slice(&[0., 0.]);
        check(&long_scatter(n, n, dtype, "none"), &files, "tab", &want);
        let over = Overrides {
            mechanism: Some(Mechanism::Dge),
            ..Overrides::default()
        };
        let p = prepared(&long_scatter(n, n, dtype, "none"), &files, over).unwrap();
        let exec = p.execute().unwrap();
        let warnings = super::exec::Report::of_run(&p, &exec).ops[0]
            .warnings
            .clone();
        assert_eq!(warnings.len(), 1, "{dtype}: {warnings:?}");
        assert!(
            warnings[0].starts_with("dst indices repeat (0 at positions 0 and 4096)"),
            "{dtype}: {warnings:?}"
        );
    }
}

#[test]
fn a_failing_request_of_a_split_op_undoes_the_op() {
    // 4097 rows gathered into a table that holds ones: index 10 at position 4096 fails
    // the second instruction, and the first one's rows are undone
    let n = 4097;
    let mut idx = vec![0u32; n];
    idx[n - 1] = 10;
    let ones = NpyArray {
        descr: "<f4".into(),
        shape: vec![n as u64, 4],
        data: (0..n * 4).flat_map(|_| 1f32.to_le_bytes()).collect(),
    };
    let text = format!(
        "{}{}{}[[op]]\nop = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\n",
        iota("tab", "[10, 4]"),
        tensor("idx", "sbuf", "u32", &format!("[1, {n}]"), Some("idx.npy")),
        tensor("out", "hbm", "f32", &format!("[{n}, 4]"), Some("ones.npy")),
    );
    let files = [
        ("idx.npy", u32_array(&[1, n as u64], &idx)),
        ("ones.npy", ones),
    ];
    for m in [Mechanism::Pool, Mechanism::Dge, Mechanism::Reference] {
        let over = Overrides {
            mechanism: Some(m),
            ..Overrides::default()
        };
        let p = prepared(&text, &files, over).unwrap();
        let mut fabric = p.initial_fabric().unwrap();
        let mut rt = crate::runtime::Runtime::new(p.generation, m).unwrap();
        let e = super::exec::run_op(&mut rt, &mut fabric, &p.ops[0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("failed and the op was undone (nothing it wrote stays): src index 10 at position 4096"), "{}: {e}", m.name());
        let out = p.tensors[2].read(&fabric).unwrap();
        assert!(
            out.chunks(4).all(|c| c == 1f32.to_le_bytes()),
            "{}: the first 4096 rows were written",
            m.name()
        );
    }
}

#[test]
fn a_split_ops_first_failing_position_wins_as_in_one_request() {
    // an index past the table at position 10 comes before a repeat at 3000/3001: the
    // out-of-bounds index is the error whether the op is one request or three
    for n in [4096usize, 8193] {
        let mut idx: Vec<u32> = (0..n as u32).collect();
        idx[10] = n as u32;
        idx[3001] = idx[3000];
        let files = [("idx.npy", vector("u32", &idx))];
        fails_when_run(
            &long_scatter(n, n, "u32", "add"),
            &files,
            &format!("dst index {n} at position 10 is out of bounds"),
        );
    }
}

#[test]
fn index_positions_past_4096_are_the_ops() {
    // a gather of 4097 rows whose last index is out of bounds: position 4096 is named
    let n = 4097;
    let mut idx = vec![0u32; n];
    idx[n - 1] = 8;
    let text = |oob: &str| {
        format!(
            "{}{}{}[[op]]\nop = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\noob = \"{oob}\"\n",
            iota("tab", "[8, 2]"),
            tensor("idx", "sbuf", "u32", &format!("[1, {n}]"), Some("idx.npy")),
            tensor("out", "hbm", "f32", &format!("[{n}, 2]"), None),
        )
    };
    let files = [("idx.npy", u32_array(&[1, n as u64], &idx))];
    fails_when_run(
        &text("error"),
        &files,
        "src index 8 at position 4096 is out of bounds (bound 8)",
    );
    // under skip the report names the same position
    for m in [Mechanism::Dge, Mechanism::Reference] {
        let over = Overrides {
            mechanism: Some(m),
            ..Overrides::default()
        };
        let exec = prepared(&text("skip"), &files, over)
            .unwrap()
            .execute()
            .unwrap();
        let skipped: Vec<u32> = exec.reports[0]
            .steps
            .iter()
            .flat_map(|s| &s.outcome.skipped)
            .map(|s| s.position)
            .collect();
        assert_eq!(skipped, [4096], "{}", m.name());
    }
}
