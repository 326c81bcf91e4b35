"""The Python package against numpy, the CLI and itself across mechanisms.

Run with `pytest hostsim/python/tests` after `pip install .` at the repository root. The
save/run checks call the `hostsim` CLI: `$HOSTSIM_BIN` if set, else `cargo run --release
-p hostsim --` from the repository root.
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import hostsim

ROOT = Path(__file__).resolve().parents[3]
RNG = np.random.default_rng(7)


def cli(*args, stdin=None):
    """Runs the hostsim CLI and returns its stdout."""
    binary = os.environ.get("HOSTSIM_BIN")
    cmd = [binary] if binary else ["cargo", "run", "--release", "-q", "-p", "hostsim", "--"]
    done = subprocess.run(cmd + list(args), cwd=ROOT, input=stdin, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def snapshot(tensors):
    return [t.numpy().tobytes() for t in tensors]


# --- the NKI idioms -------------------------------------------------------------------


def embedding_lookup(mechanism):
    """A (128, 1) int32 index tile picks rows of an HBM table into a [128, D] SBUF tile;
    out-of-range and negative indices are skipped."""
    rng = np.random.default_rng(3)
    core = hostsim.Core("cayman", mechanism=mechanism)
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    ids = rng.integers(0, 1000, size=(128, 1)).astype(np.int32)
    ids[5, 0], ids[77, 0] = 1000, -3
    t = core.hbm(table)
    i = core.sbuf(ids)
    out = core.sbuf(shape=(128, 64), dtype=np.float32)
    core.dma_copy(dst=out, src=t.ap([[64, 128], [1, 64]], vector_offset=i, indirect_dim=0), oob_mode="skip")
    want = np.zeros((128, 64), np.float32)
    ok = (ids[:, 0] >= 0) & (ids[:, 0] < 1000)
    want[ok] = table[ids[ok, 0]]
    return core, out.numpy(), want


def test_embedding_lookup_matches_numpy_on_every_mechanism():
    results = []
    for mechanism in ["auto", "dge", "reference"]:
        core, got, want = embedding_lookup(mechanism)
        assert np.array_equal(got, want)
        assert core.report["ops"][0]["oob_skipped"] == 2
        results.append(got.tobytes())
    assert len(set(results)) == 1
    with pytest.raises(hostsim.InvalidInput, match="pool mechanism is not available"):
        embedding_lookup("pool")


def scatter_add(core, op):
    """Scatter-add of 64 rows into a 16-row table with duplicate indices."""
    rng = np.random.default_rng(11)
    table = rng.standard_normal((16, 8)).astype(np.float32)
    rows = rng.standard_normal((64, 8)).astype(np.float32)
    ids = rng.integers(0, 16, size=(64, 1)).astype(np.int32)
    t, d, i = core.hbm(table), core.sbuf(rows), core.sbuf(ids)
    dst = t.ap([[8, 64], [1, 8]], vector_offset=i)
    if op == "dma_copy":
        core.dma_copy(dst=dst, src=d, dst_rmw_op=np.add, unique_indices=False)
    else:
        core.dma_compute(dst=dst, srcs=[dst, d], reduce_op=np.add, unique_indices=False)
    want = table.copy()
    np.add.at(want, ids[:, 0], rows)
    return t.numpy(), want


def test_nki_defaults_given_explicitly_change_nothing():
    # a gather read-modify-write with NKI's defaults spelt out: unique_indices=True (NKI
    # requires it there) and oob_mode="error"
    rng = np.random.default_rng(5)
    table = rng.standard_normal((100, 16)).astype(np.float32)
    ids = (np.arange(128, dtype=np.int32) % 100).reshape(128, 1)
    results = []
    for explicit in [False, True]:
        core = hostsim.Core("cayman")
        x, i = core.hbm(table), core.sbuf(ids)
        acc = core.sbuf(np.ones((128, 16), np.float32))
        src = x.ap([[16, 128], [1, 16]], vector_offset=i)
        kwargs = dict(unique_indices=True, oob_mode="error") if explicit else {}
        core.dma_compute(dst=acc, srcs=[acc, src], reduce_op=np.add, **kwargs)
        results.append(acc.numpy())
    assert np.array_equal(results[0], results[1])
    assert np.array_equal(results[0], np.float32(1) + table[ids[:, 0]])


def test_scatter_add_with_duplicates_is_np_add_at_in_f32():
    seen = set()
    for mechanism in ["auto", "dge", "reference"]:
        for op in ["dma_copy", "dma_compute"]:
            got, want = scatter_add(hostsim.Core("trn2", mechanism=mechanism, queues=4), op)
            assert np.array_equal(got, want)
            seen.add(got.tobytes())
    assert len(seen) == 1


def test_a_5d_copy_is_a_numpy_transpose():
    core = hostsim.Core("cayman")
    a = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.int32).reshape(2, 3, 4, 5, 6)
    src = core.hbm(a)
    dst = core.hbm(shape=(6, 5, 4, 3, 2), dtype=np.int32)
    # dst[i0..i4] = a[i4, i3, i2, i1, i0]: walk src with its steps reversed
    core.dma_copy(dst=dst, src=src.ap([[1, 6], [6, 5], [30, 4], [120, 3], [360, 2]]))
    assert np.array_equal(dst.numpy(), a.transpose(4, 3, 2, 1, 0))


def test_an_index_tile_column_picks_each_tiles_rows_as_nki_prefill_kernels_do():
    """i_sb is (128, NT): tile t's indices are its column t, read as
    i_sb.ap([[NT, 128], [1, 1]], offset=t); results equal numpy's take on every route."""
    nt = 3
    table = RNG.standard_normal((500, 16)).astype(np.float32)
    ids = RNG.integers(-2, 502, size=(128, nt)).astype(np.int32)
    results = []
    for mechanism in ["auto", "dge", "reference"]:
        core = hostsim.Core("cayman", mechanism=mechanism)
        t, i = core.hbm(table), core.sbuf(ids)
        outs = [core.sbuf(shape=(128, 16), dtype=np.float32) for _ in range(nt)]
        for c, out in enumerate(outs):
            view = i.ap([[nt, 128], [1, 1]], offset=c)
            core.dma_copy(dst=out, src=t.ap([[16, 128], [1, 16]], vector_offset=view), oob_mode="skip")
        for c, out in enumerate(outs):
            want = np.zeros((128, 16), np.float32)
            ok = (ids[:, c] >= 0) & (ids[:, c] < 500)
            want[ok] = table[ids[ok, c]]
            np.testing.assert_array_equal(out.numpy(), want)
        results.append([o.numpy().tobytes() for o in outs])
    assert results[0] == results[1] == results[2]
    with pytest.raises(hostsim.InvalidInput, match="its ap visits 64 elements, but the side's ap\\[0\\] has num 128"):
        core.dma_copy(dst=outs[0], src=t.ap([[16, 128], [1, 16]], vector_offset=i.ap([[nt, 64], [1, 1]])))
    with pytest.raises(hostsim.InvalidInput, match="an .ap\\(\\) of one is not supported by the transpose"):
        core.dma_transpose(dst=outs[0], src=t.ap([[16, 128], [1, 16]], vector_offset=i.ap([[nt, 128], [1, 1]])))


def test_slices_are_the_aps_numpy_slicing_names_on_every_route():
    """t[...] is the .ap() NKI builds for it: copies out of and into slices equal numpy's
    slicing, on HBM tensors and partition-major SBUF tiles, on every mechanism."""
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    tile = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    cases = [
        (lambda t, s: t[1], lambda: x[1]),
        (lambda t, s: t[1:3, ::2, 1:4], lambda: x[1:3, ::2, 1:4]),
        (lambda t, s: t[::-1, 2], lambda: x[::-1, 2]),
        (lambda t, s: t[hostsim.ds(1, 2), ..., -1], lambda: x[1:3, :, -1]),
        (lambda t, s: s[2:10:3, 1:5], lambda: tile[2:10:3, 1:5]),
        (lambda t, s: s[:, 3], lambda: tile[:, 3]),
        (lambda t, s: s[7], lambda: tile[7]),
    ]
    for mechanism in ["auto", "dge", "reference"]:
        for k, (view, want) in enumerate(cases):
            core = hostsim.Core("cayman", mechanism=mechanism)
            t, s = core.hbm(x), core.sbuf(tile)
            w = want()
            out = core.hbm(shape=w.shape, dtype=np.float32)
            core.dma_copy(dst=out, src=view(t, s))
            np.testing.assert_array_equal(out.numpy(), w, err_msg=f"case {k} {mechanism}")
    # a slice as the destination: a column block of an SBUF tile written from HBM
    core = hostsim.Core("mariana")
    s = core.sbuf(np.zeros((16, 8), np.float32))
    src = core.hbm(np.ones((16, 3), np.float32))
    core.dma_copy(dst=s[:, 2:5], src=src)
    want = np.zeros((16, 8), np.float32)
    want[:, 2:5] = 1
    np.testing.assert_array_equal(s.numpy(), want)
    # a column of an index tile as a vector_offset: NKI's i_sb[:, t]
    table = core.hbm(np.arange(40, dtype=np.float32).reshape(10, 4))
    i_sb = core.sbuf(np.array([[3, 9], [0, 1], [7, 2]], np.int32))
    out = core.sbuf(shape=(3, 4), dtype=np.float32)
    core.dma_copy(dst=out, src=table.ap([[4, 3], [1, 4]], vector_offset=i_sb[:, 1]))
    np.testing.assert_array_equal(out.numpy(), np.arange(40, dtype=np.float32).reshape(10, 4)[[9, 1, 2]])
    for key, message in [
        ((slice(None), 9), "index 9 is out of range for dim 1 of size 8"),
        ((slice(3, 3),), "dim 0's range is empty"),
        ((0, 0, 0), "slicing: key = \\(0, 0, 0\\): 3 entries for a view of 2 dims"),
        (("a",), "each entry must be an int, a slice or one ..."),
        ((True,), "a bool is no index"),
    ]:
        with pytest.raises(hostsim.InvalidInput, match=message):
            s[key]


def test_nki_views_are_the_aps_numpy_views_name_on_every_route():
    """NKI's view methods (permute, reshape, reshape_dim, flatten_dims, expand_dim,
    squeeze_dim, broadcast, select, slice, and chains of them with slicing) copy what
    numpy's views of the same calls hold, as sources and destinations, on HBM tensors and
    partition-major SBUF tiles, on every mechanism."""
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    tile = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    cases = [
        (lambda t, s, p: t.permute((2, 0, 1)), lambda: x.transpose(2, 0, 1)),
        (lambda t, s, p: t.reshape((24, 5)), lambda: x.reshape(24, 5)),
        (lambda t, s, p: t.reshape((4, -1)).permute((1, 0)), lambda: x.reshape(4, 30).T),
        (lambda t, s, p: t.reshape_dim(1, (2, 3)), lambda: x.reshape(4, 2, 3, 5)),
        (lambda t, s, p: t.flatten_dims(1, 2), lambda: x.reshape(4, 30)),
        (lambda t, s, p: t.expand_dim(1).broadcast(1, 3), lambda: np.broadcast_to(x[:, None], (4, 3, 6, 5))),
        (lambda t, s, p: t.select(1, 2), lambda: x[:, 2]),
        (lambda t, s, p: t.select(-1, p), lambda: x[:, :, 3]),
        (lambda t, s, p: t.slice(2, 1, 4), lambda: x[:, :, 1:4]),
        (lambda t, s, p: t[1:3].permute((1, 0, 2)), lambda: x[1:3].transpose(1, 0, 2)),
        (lambda t, s, p: t.permute((1, 0, 2))[2, ::2], lambda: x.transpose(1, 0, 2)[2, ::2]),
        (lambda t, s, p: t[:1].squeeze_dim(0), lambda: x[0]),
        (lambda t, s, p: s.reshape((16, 2, 4)).permute((0, 2, 1)), lambda: tile.reshape(16, 2, 4).transpose(0, 2, 1)),
        (lambda t, s, p: s.select(1, p), lambda: tile[:, 3]),
        (lambda t, s, p: s[3:9].reshape_dim(1, (4, 2))[:, 1], lambda: tile[3:9].reshape(6, 4, 2)[:, 1]),
    ]
    for mechanism in ["auto", "dge", "reference"]:
        for k, (view, want) in enumerate(cases):
            core = hostsim.Core("cayman", mechanism=mechanism)
            t, s = core.hbm(x), core.sbuf(tile)
            p = core.sbuf(np.array([[3]], np.int32))
            w = np.ascontiguousarray(want())
            out = core.hbm(shape=w.shape, dtype=np.float32)
            v = view(t, s, p)
            assert list(v.shape) == list(w.shape), f"case {k}"
            core.dma_copy(dst=out, src=v)
            np.testing.assert_array_equal(out.numpy(), w, err_msg=f"case {k} {mechanism}")
            # the same view as a destination puts the elements back where numpy's view is
            back = core.hbm(w)
            blank = core.hbm(np.zeros_like(x)) if v.tensor.space == "hbm" else core.sbuf(np.zeros_like(tile))
            if k == 5:
                continue  # a broadcast destination writes one element many times
            core.dma_copy(dst=view(blank, blank, p), src=back)
            expect = np.zeros_like(x if v.tensor.space == "hbm" else tile)
            np.copyto(view_of(expect, k), w)
            np.testing.assert_array_equal(blank.numpy(), expect, err_msg=f"dst case {k} {mechanism}")


def test_numpy_integers_go_wherever_an_int_does():
    """Indices, dims, axes and shapes computed with numpy (np.int64 / np.int32 scalars,
    integer arrays as shapes) give the views Python ints give."""
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    core = hostsim.Core("cayman")
    t = core.hbm(x)
    i64, i32 = np.int64, np.int32
    pairs = [
        (t.select(i64(1), i32(2)), t.select(1, 2)),
        (t.permute((i64(2), i64(0), i64(1))), t.permute((2, 0, 1))),
        (t.reshape(np.array([24, 5])), t.reshape((24, 5))),
        (t.reshape((i32(4), i64(-1))), t.reshape((4, -1))),
        (t.slice(i64(2), i64(1), i64(4)), t.slice(2, 1, 4)),
        (t[i64(1), i32(2):i32(5)], t[1, 2:5]),
        (t.expand_dim(i64(1)).broadcast(i64(1), i64(3)), t.expand_dim(1).broadcast(1, 3)),
        (t.select(np.array(1), np.array(2, np.int32)), t.select(1, 2)),
        (t.reshape((np.array(24), 5)), t.reshape((24, 5))),
    ]
    for k, (got, want) in enumerate(pairs):
        assert got.get_pattern() == want.get_pattern(), f"case {k}"
        assert (got.offset, list(got.shape)) == (want.offset, list(want.shape)), f"case {k}"
    out = core.hbm(shape=(6, 5), dtype=np.float32)
    core.dma_copy(dst=out, src=t.select(0, np.int64(3)))
    np.testing.assert_array_equal(out.numpy(), x[3])
    with pytest.raises(hostsim.InvalidInput, match="must be an int"):
        t.select(0, np.float64(1.0))
    with pytest.raises(hostsim.InvalidInput, match="must be an int in -2\\^63"):
        t.select(0, np.uint64(2**63))
    with pytest.raises(hostsim.InvalidInput, match="must be an int"):
        t.select(0, np.array([1]))
    for not_int in (np.array(1.5), np.array(True), np.float64(1.0)):
        with pytest.raises(hostsim.InvalidInput, match="index = .*: must be an int or a 1x1"):
            t.select(0, not_int)
    for text in (b"x", bytearray(b"x"), "x", memoryview(b"\x18\x05")):
        with pytest.raises(hostsim.InvalidInput, match="must be a tuple or list of ints"):
            t.reshape(text)


def view_of(a, k):
    """numpy's writable view of `a` for case `k` of the views test (its source views)."""
    return [
        lambda: a.transpose(2, 0, 1),
        lambda: a.reshape(24, 5),
        lambda: a.reshape(4, 30).T,
        lambda: a.reshape(4, 2, 3, 5),
        lambda: a.reshape(4, 30),
        None,
        lambda: a[:, 2],
        lambda: a[:, :, 3],
        lambda: a[:, :, 1:4],
        lambda: a[1:3].transpose(1, 0, 2),
        lambda: a.transpose(1, 0, 2)[2, ::2],
        lambda: a[0],
        lambda: a.reshape(16, 2, 4).transpose(0, 2, 1),
        lambda: a[:, 3],
        lambda: a[3:9].reshape(6, 4, 2)[:, 1],
    ][k]()


def test_an_ap_of_a_reshaped_tensor_indexes_the_reshaped_dims_as_moe_kernels_do():
    """nki-library's MoE weight loads: w.reshape((E * Q, 2, N, I)).ap(..., vector_offset=
    rows, indirect_dim=0) picks rows of the reshaped tensor (its dim 0's stride and bound),
    and a scalar_offset's indirect_dim is a dim of the reshaped shape too; on every route."""
    rng = np.random.default_rng(5)
    E, Q, N, I, P = 3, 4, 2, 5, 6
    w = rng.standard_normal((E, Q, 2, N, I)).astype(np.float32)
    rows = np.array([[0], [11], [5], [12], [-1], [7]], np.int32)  # 12 and -1 are out of range
    flat = w.reshape(E * Q, 2, N, I)
    want = np.zeros((P, 2, N, I), np.float32)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < E * Q)
    want[ok] = flat[rows[ok, 0]]
    for mechanism in ["auto", "dge", "reference"]:
        core = hostsim.Core("cayman", mechanism=mechanism)
        t, idx = core.hbm(w), core.sbuf(rows)
        out = core.sbuf(shape=(P, 2, N, I), dtype=np.float32)
        view = t.reshape((E * Q, 2, N, I))
        src = view.ap([[2 * N * I, P], [N * I, 2], [I, N], [1, I]], vector_offset=idx, indirect_dim=0)
        core.dma_copy(dst=out, src=src, oob_mode="skip")
        np.testing.assert_array_equal(out.numpy(), want, err_msg=mechanism)
        # one expert's block by a run-time expert number: indirect_dim 0 of [E, Q * 2 * N * I]
        e = core.sbuf(np.array([[2]], np.int32))
        block = core.hbm(shape=(Q * 2 * N * I,), dtype=np.float32)
        by_expert = t.reshape((E, -1)).ap([[1, Q * 2 * N * I]], scalar_offset=e, indirect_dim=0)
        core.dma_copy(dst=block, src=by_expert)
        np.testing.assert_array_equal(block.numpy(), w[2].reshape(-1), err_msg=mechanism)
        # a run-time select of a dim no tensor dim strides like (half an expert): the
        # tensor seen with its dim Q split in two (as NKI reshapes it), indirect_dim 1
        one = core.sbuf(np.array([[1]], np.int32))
        v = t.reshape((E, Q * 2 * N * I)).reshape_dim(1, (2, -1)).select(1, one)
        assert v.get_pattern() == [[Q * 2 * N * I, E], [1, Q * N * I]]
        got = core.hbm(shape=(E, Q * N * I), dtype=np.float32)
        core.dma_copy(dst=got, src=v)
        np.testing.assert_array_equal(got.numpy(), w.reshape(E, 2, -1)[:, 1], err_msg=mechanism)
    with pytest.raises(hostsim.InvalidInput, match="a reshape of a whole one"):
        t[1:].ap([[1, 4]])
    with pytest.raises(hostsim.InvalidInput, match="a reshape of a whole one"):
        t.permute((1, 0, 2, 3, 4)).ap([[1, 4]])


def test_a_scalar_offset_out_of_bounds_skips_the_copy_under_oob_skip():
    """nki-library's MoE weight load: w.ap(..., scalar_offset=block_expert, indirect_dim=0)
    with oob_mode=skip moves nothing for an expert number past the experts (an inactive
    block), counted as one skip; under oob_mode=error the same copy fails and changes
    nothing; an expert in range loads its weights; on every route."""
    E, P, F = 3, 4, 6
    w = np.arange(E * P * F, dtype=np.float32).reshape(E, P, F)
    for mechanism in ["auto", "dge", "reference"]:
        core = hostsim.Core("cayman", mechanism=mechanism)
        t = core.hbm(w)
        dst = core.sbuf(np.full((P, F), 7, np.float32))
        for expert, want in [(1, w[1]), (E, None), (-1, None)]:
            e = core.sbuf(np.array([[expert]], np.int32))
            src = t.ap([[F, P], [1, F]], scalar_offset=e, indirect_dim=0)
            before = dst.numpy()
            skipped = core.report["total"]["oob_skipped"]
            core.dma_copy(dst=dst, src=src, oob_mode="skip")
            got = dst.numpy()
            if want is None:
                np.testing.assert_array_equal(got, before, err_msg=f"{mechanism} {expert}")
                assert core.report["total"]["oob_skipped"] == skipped + 1
                with pytest.raises(hostsim.Fault, match="scalar_offset"):
                    core.dma_copy(dst=dst, src=src)
                np.testing.assert_array_equal(dst.numpy(), before)
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{mechanism} {expert}")
    with pytest.raises(hostsim.InvalidInput, match="applies to a side with a vector_offset or a scalar_offset"):
        core.dma_copy(dst=dst, src=t[0], oob_mode="skip")


def test_a_view_as_another_dtype_moves_the_same_bytes():
    """NKI's view(dtype) / TensorView.reinterpret_cast / .ap(..., dtype=): the tensor's
    bytes counted as elements of another dtype (the last dim scaled), as numpy's view
    does; on every route."""
    import ml_dtypes

    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    cases = [
        (lambda t: t.view(np.uint8), x.view(np.uint8)),
        (lambda t: t[:, 2:6].reinterpret_cast(np.uint16), x[:, 2:6].view(np.uint16)),
        (lambda t: t.ap([[16, 4], [1, 16]], dtype=ml_dtypes.bfloat16), x.view(ml_dtypes.bfloat16)),
        (lambda t: t.view(np.uint8).reshape((4, 8, 4))[:, :, 0], x.view(np.uint8).reshape(4, 8, 4)[:, :, 0]),
        (lambda t: t.view(np.int16).view(np.float32)[1:3], x[1:3]),
    ]
    for mechanism in ["auto", "dge", "reference"]:
        for k, (view, want) in enumerate(cases):
            core = hostsim.Core("cayman", mechanism=mechanism)
            t = core.hbm(x)
            out = core.hbm(shape=want.shape, dtype=want.dtype)
            core.dma_copy(dst=out, src=view(t))
            np.testing.assert_array_equal(out.numpy().view(np.uint8), np.ascontiguousarray(want).view(np.uint8), err_msg=f"case {k} {mechanism}")
        # an SBUF tile's rows as bytes, written back through the view
        tile = core.sbuf(np.zeros((4, 8), np.float32))
        core.dma_copy(dst=tile.view(np.uint8), src=core.hbm(x.view(np.uint8)))
        np.testing.assert_array_equal(tile.numpy(), x, err_msg=mechanism)
    t = core.hbm(x)
    for make, message in [
        (lambda: t.permute((1, 0)).view(np.uint8), "view: dtype = .*needs it contiguous \\(stride 1\\)"),
        (lambda: t[:, 1:2].view(np.int64), "the offset \\(1 elements of 4 bytes\\) is no whole number of elements of 8 bytes"),
        (lambda: t.view(np.float64), "dtype float64: the fabric holds"),
        (lambda: tile[:, 0].view(np.uint8), "the partition dim"),
    ]:
        with pytest.raises(hostsim.InvalidInput, match=message):
            make()


def test_dge_mode_says_who_makes_the_descriptors():
    """NKI's dge_mode: the report's dge (hostsim's choice, swdge, hwdge, none), no DGE
    time for descriptors the runtime prebuilt, and each mode's rules, refused by name."""
    core = hostsim.Core("cayman")
    a = core.hbm(np.arange(256, dtype=np.float32).reshape(4, 64))
    b = core.hbm(shape=(4, 64), dtype=np.float32)
    for mode in [None, hostsim.dge_mode.swdge, hostsim.dge_mode.hwdge, hostsim.dge_mode.none, "unknown"]:
        core.dma_copy(dst=b, src=a, dge_mode=mode)
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    core.dma_compute(dst=b, srcs=[b, a], reduce_op=np.add, dge_mode="swdge")
    ops = core.report["ops"]
    assert [o["dge"] for o in ops] == ["hardware", "software", "hardware", "none", "hardware", "software"]
    assert ops[3]["estimated_ns"] < ops[0]["estimated_ns"] == ops[1]["estimated_ns"]
    i = core.sbuf(np.zeros((4, 1), np.int32))
    p = core.sbuf(np.zeros((1, 1), np.int32))
    for call, message in [
        (lambda: core.dma_copy(dst=b, src=a.ap([[64, 4], [1, 64]], vector_offset=i), dge_mode="hwdge"), "dge_mode: hwdge: a gather or scatter"),
        (lambda: core.dma_copy(dst=b, src=a.ap([[64, 4], [1, 64]], scalar_offset=p, indirect_dim=0), dge_mode="none"), "dge_mode: none: the Neuron Runtime builds the descriptors before the kernel runs"),
        (lambda: core.dma_copy(dst=b, src=a, dge_mode="fast"), "dma_copy: dge_mode = 'fast': must be"),
    ]:
        with pytest.raises(hostsim.InvalidInput, match=message):
            call()
    sunda = hostsim.Core("sunda")
    x, y = sunda.hbm(np.ones(8, np.float32)), sunda.hbm(np.zeros(8, np.float32))
    for call, message in [
        (lambda: sunda.dma_copy(dst=y, src=x, dge_mode="hwdge"), "dma_copy: dge_mode: hwdge: sunda has no hardware DGE"),
    ]:
        with pytest.raises(hostsim.InvalidInput, match=message):
            call()
    # a run-time start address is the hardware DGE's to make
    core.dma_copy(dst=b, src=a.ap([[64, 4], [1, 64]], scalar_offset=p, indirect_dim=0), dge_mode="hwdge")
    assert core.report["ops"][-1]["dge"] == "hardware"


def test_name_labels_an_op_in_the_report_explain_and_a_saved_scenario(tmp_path):
    """NKI's name= on every op: the report's and explain's label of the op, kept by
    save_scenario; nothing else changes."""
    core = hostsim.Core("cayman")
    a = core.hbm(np.ones((4, 8), np.float32))
    b = core.hbm(shape=(4, 8), dtype=np.float32)
    core.dma_copy(dst=b, src=a, name="load_a")
    core.dma_copy(dst=b, src=a)
    core.dma_transpose(dst=core.hbm(shape=(8, 4), dtype=np.float32), src=a, name="a_t")
    ops = core.report["ops"]
    assert [o.get("name") for o in ops] == ["load_a", None, "a_t"]
    assert [o.get("name") for o in core.explain()["ops"]] == ["load_a", None, "a_t"]
    core.save_scenario(tmp_path / "named")
    text = (tmp_path / "named" / "scenario.toml").read_text()
    assert 'name = "load_a"' in text and 'name = "a_t"' in text
    with pytest.raises(hostsim.InvalidInput, match="dma_copy: name = 5: must be a str"):
        core.dma_copy(dst=b, src=a, name=5)


def test_views_say_which_rule_they_break_and_change_nothing():
    core = hostsim.Core("cayman")
    t = core.hbm(np.zeros((4, 6, 5), np.float32))
    s = core.sbuf(np.zeros((16, 8), np.float32))
    p = core.sbuf(np.array([[1]], np.int32))
    i = core.sbuf(np.zeros((4, 1), np.int32))
    for make, message in [
        (lambda: t.permute((1, 0, 2)).reshape(-1), "reshape: shape = -1: the dims are not contiguous"),
        (lambda: t.reshape((7, -1)), "cannot hold the 120 elements"),
        (lambda: s.permute((1, 0)), "moves dim 0, the partition dim"),
        (lambda: s.reshape((8, 16)), "give dim 0 8 elements, and dim 0 is the partition dim of 16"),
        (lambda: s.broadcast(1, 2), "broadcast repeats a dim of size 1"),
        (lambda: t.squeeze_dim(0), "dim 0 has size 4; only a dim of size 1 is squeezed"),
        (lambda: t.select(3, 0), "dim 3 is out of range for a view of 3 dims"),
        (lambda: t.select(0, p).select(0, p), "already has a run-time select"),
        (lambda: t[:, :, ::2].select(2, p), "steps 2 elements, and no dim of the tensor \\(shape \\[4, 6, 5\\]\\) has or splits into"),
        (lambda: t.ap([[30, 4], [1, 30]], vector_offset=i).permute((1, 0)), "apply view methods before"),
        (lambda: t.expand_dim(0).expand_dim(0).expand_dim(0).get_pattern(), "the view has 6 dims"),
        (lambda: core.dma_copy(dst=t, src=t.reshape((1, 2, 1, 2, 1, 30))), "^src: the view of t0 is no .ap\\(\\): the view has 6 dims"),
        # each rule names the argument that breaks it
        (lambda: t.permute([True, False, 2]), "permute: dims = True: must be an int, not a bool"),
        (lambda: t.reshape((2**63, 1)), "reshape: shape = 9223372036854775808: must be an int in -2\\^63"),
        (lambda: t.select(0, slice(0, 2)), "select: index = slice\\(0, 2, None\\): must be an int or a 1x1"),
        (lambda: t.slice(1, 0, 3, 0), "slice: step = 0: must not be 0"),
        (lambda: t.flatten_dims(0, 7), "flatten_dims: end_dim = 7: dim 7 is out of range"),
        (lambda: t.reshape_dim(9, (2, 2)), "reshape_dim: dim = 9: dim 9 is out of range"),
        (lambda: t[0:1].broadcast(0, 0), "broadcast: size = 0: must be at least 1"),
        (lambda: t.select(0, hostsim.Core().sbuf(np.ones((1, 1), np.int32))), "^select: index = .*another Core"),
        (lambda: s.reshape((4, 5)), "reshape: shape = \\(4, 5\\): the sizes \\[4, 5\\] do not hold the view's 128 elements"),
    ]:
        with pytest.raises(hostsim.InvalidInput, match=message):
            make()
    assert t.reshape((2, 2, 30)).reshape_dim(2, (6, 5)).flatten_dims(0, 1).get_pattern() == [[30, 4], [5, 6], [1, 5]]
    # dims of size 1 merge with any (numpy's no-copy rule, as reshape has it); a -1 may
    # stand for the partition count; the view methods show in dir()
    x = core.hbm(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert x[:, 1:2].flatten_dims(0, 1).get_pattern() == x[:, 1:2].reshape(3).get_pattern() == [[4, 3]]
    assert s.reshape((-1, 2, 4)).shape == [16, 2, 4]
    assert {"permute", "reshape", "ap", "select"} <= set(dir(t))
    assert not t.numpy().any() and not s.numpy().any()


def test_kv_cache_writes_by_token_index_and_by_scalar_position():
    """NKI's decode KV-cache updates: S new rows per token into a (B * Smax, d) cache by
    a token-index tile, and S new columns at a run-time position of a (B, d, Smax) cache
    by a scalar_offset on its last dim (indirect_dim past the pattern's pairs)."""
    b, smax, d, s = 2, 8, 4, 3
    core = hostsim.Core("cayman")
    v_new = RNG.standard_normal((b, s, d)).astype(np.float32)
    cache = core.hbm(np.zeros((b * smax, d), np.float32))
    tok = core.sbuf(np.array([[2], [11]], np.int32))
    core.dma_copy(dst=cache.ap([[1, b], [d, s], [1, d]], vector_offset=tok), src=core.hbm(v_new))
    want = np.zeros((b * smax, d), np.float32)
    want[2:5], want[11:14] = v_new[0], v_new[1]
    np.testing.assert_array_equal(cache.numpy(), want)
    with pytest.raises(hostsim.Fault, match="index 14 at position 1 \\(below its bound 16\\) takes the walk out") as f:
        bad = core.sbuf(np.array([[2], [14]], np.int32))
        core.dma_copy(dst=cache.ap([[1, b], [d, s], [1, d]], vector_offset=bad), src=core.hbm(v_new))
    assert (f.value.position, f.value.value, f.value.bound) == (1, 14, 16)
    np.testing.assert_array_equal(cache.numpy(), want)
    k_cache = core.hbm(np.zeros((b, d, smax), np.float32))
    k_new = RNG.standard_normal((d, s)).astype(np.float32)
    p = core.sbuf(np.array([[5]], np.int32))
    dst = k_cache.ap([[smax, d], [1, s]], offset=1 * d * smax, scalar_offset=p, indirect_dim=2)
    core.dma_copy(dst=dst, src=core.hbm(k_new))
    want = np.zeros((b, d, smax), np.float32)
    want[1, :, 5:8] = k_new
    np.testing.assert_array_equal(k_cache.numpy(), want)


def test_a_window_and_a_scalar_offset():
    core = hostsim.Core("cayman")
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    src = core.hbm(a)
    win = core.hbm(shape=(4, 8), dtype=np.float32)
    core.dma_copy(dst=win, src=src.ap([[32, 4], [1, 8]], offset=3 * 32 + 5))
    assert np.array_equal(win.numpy(), a[3:7, 5:13])
    k = core.sbuf(np.array([[9]], dtype=np.int32))
    row = core.hbm(shape=(1, 32), dtype=np.float32)
    core.dma_copy(dst=row, src=src.ap([[32, 1], [1, 32]], scalar_offset=k))
    assert np.array_equal(row.numpy(), a[9:10])


def test_a_scalar_offset_shifts_the_rows_an_index_tile_picks():
    core = hostsim.Core("cayman")
    a = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    t = core.hbm(a)
    ids = np.array([[3], [1], [7], [0]], dtype=np.int32)
    out = core.sbuf(shape=(4, 8), dtype=np.float32)
    k = core.sbuf(np.array([[2]], dtype=np.int32))
    core.dma_copy(dst=out, src=t.ap([[8, 4], [1, 8]], vector_offset=core.sbuf(ids), scalar_offset=k))
    assert np.array_equal(out.numpy(), a[ids[:, 0] + 2])
    # 7 + 3 leaves the table: a fault naming that index, nothing written
    k3 = core.sbuf(np.array([[3]], dtype=np.int32))
    before = snapshot([out])
    with pytest.raises(hostsim.Fault) as e:
        core.dma_copy(dst=out, src=t.ap([[8, 4], [1, 8]], vector_offset=core.sbuf(ids), scalar_offset=k3), oob_mode="skip")
    assert (e.value.position, e.value.value) == (2, 7)
    assert snapshot([out]) == before


def test_an_int64_scalar_offset_in_hbm_and_its_sbuf_rule():
    core = hostsim.Core("cayman")
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    src = core.hbm(a)
    k = core.hbm(np.array([[13]], dtype=np.int64))
    assert k.dtype == np.dtype(np.int64)
    blk = core.sbuf(shape=(2, 32), dtype=np.float32)
    core.dma_copy(dst=blk, src=src.ap([[32, 2], [1, 32]], scalar_offset=k))
    assert np.array_equal(blk.numpy(), a[13:15])
    # on an SBUF side the offset must be int32
    with pytest.raises(hostsim.InvalidInput, match="scalar offset must be i32"):
        core.dma_copy(dst=blk.ap([[32, 1], [1, 32]], scalar_offset=k), src=src.ap([[32, 1], [1, 32]]))


def test_a_cast_f32_to_bf16_rounds_like_ml_dtypes():
    core = hostsim.Core("cayman")
    a = (RNG.standard_normal((4, 33)) * 1000).astype(np.float32)
    src = core.hbm(a)
    dst = core.hbm(shape=(4, 33), dtype=ml_dtypes.bfloat16)
    core.dma_copy(dst=dst, src=src)
    got = dst.numpy()
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(got.view(np.uint16), a.astype(ml_dtypes.bfloat16).view(np.uint16))
    back = core.hbm(shape=(4, 33), dtype=np.float32)
    core.dma_copy(dst=back, src=dst)
    assert np.array_equal(back.numpy(), got.astype(np.float32))


def test_bf16_arrays_go_in_and_out_bit_for_bit():
    core = hostsim.Core("mariana")
    bits = RNG.integers(0, 0x7F80, size=(3, 7), dtype=np.uint16)
    t = core.sbuf(bits.view(ml_dtypes.bfloat16), partition=5)
    assert t.shape == [3, 7] and t.space == "sbuf" and t.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(t.numpy().view(np.uint16), bits)


def test_nc_n_gather_reads_zero_past_the_row_on_every_route():
    data = RNG.standard_normal((8, 40)).astype(np.float32)
    idx = RNG.integers(0, 48, size=(8, 12)).astype(np.uint32)
    want = np.where(idx < 40, np.take_along_axis(data, np.minimum(idx, 39).astype(np.int64), 1), 0)
    seen = set()
    for gen, mechanisms in [("sunda", ["auto", "pool", "reference"]), ("cayman", ["auto", "dge", "reference"])]:
        for m in mechanisms:
            core = hostsim.Core(gen, mechanism=m)
            d, i = core.sbuf(data), core.sbuf(idx)
            out = core.sbuf(shape=(8, 12), dtype=np.float32)
            core.nc_n_gather(dst=out, data=d, indices=i)
            assert np.array_equal(out.numpy(), want), (gen, m)
            seen.add(out.numpy().tobytes())
    assert len(seen) == 1


def test_local_gather_copies_runs_at_element_offsets():
    src = np.arange(16 * 8, dtype=np.uint16).reshape(16, 8)
    index = np.zeros((16, 2), dtype=np.uint16)
    index[0, 0], index[1, 0], index[0, 1] = 3, 7, 5
    per, valid = 2, 3
    # a core's 16 x K block is read partition-first; each index picks a run of `per`
    offsets = index.T.reshape(-1)[:valid]
    padded = np.concatenate([src, np.zeros((16, per), np.uint16)], axis=1)
    want = np.concatenate([padded[:, o : o + per] for o in offsets], axis=1)
    seen = set()
    for gen, mechanisms in [("sunda", ["auto", "pool", "reference"]), ("cayman", ["auto", "dge", "reference"])]:
        for m in mechanisms:
            core = hostsim.Core(gen, mechanism=m)
            s, i = core.sbuf(src), core.sbuf(index)
            out = core.sbuf(shape=(16, per * valid), dtype=np.uint16)
            core.local_gather(dst=out, src_buffer=s, index=i, num_elem_per_idx=per, num_valid_indices=valid)
            assert np.array_equal(out.numpy(), want), (gen, m)
            seen.add(out.numpy().tobytes())
    assert len(seen) == 1


def test_embedding_update_reduces_in_index_order_on_every_route():
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([[3, 12, 3, 0, 9, 3]], dtype=np.uint32)
    data = RNG.standard_normal((1, 6, 4)).astype(np.float32)
    want = table.copy()
    for k, r in enumerate(ids[0]):
        if r < 10:
            want[r] = np.float32(want[r] + data[0, k])
    seen = set()
    for gen, mechanisms in [("sunda", ["auto", "pool", "reference"]), ("cayman", ["auto", "dge", "reference"])]:
        for m in mechanisms:
            core = hostsim.Core(gen, mechanism=m)
            t, i, d = core.hbm(table), core.sbuf(ids), core.sbuf(data, partition=2)
            core.embedding_update(table=t, index=i, data=d, reduce=np.add)
            assert np.array_equal(t.numpy(), want), (gen, m)
            assert core.report["ops"][0]["oob_skipped"] == 1
            seen.add(t.numpy().tobytes())
    assert len(seen) == 1
    core = hostsim.Core("cayman")
    t, i, d = core.hbm(table), core.sbuf(ids), core.sbuf(data, partition=2)
    core.embedding_update(table=t, index=i, data=d, reduce="max")
    want = table.copy()
    for k, r in enumerate(ids[0]):
        if r < 10:
            want[r] = np.maximum(want[r], data[0, k])
    assert np.array_equal(t.numpy(), want)


def test_dma_transpose_in_3d_and_4d_is_numpy_take_then_transpose():
    core = hostsim.Core("trn2")
    a = np.arange(6 * 3 * 4, dtype=np.uint16).reshape(6, 3, 4)
    ids = np.array([[5, 0, 2, 5]], dtype=np.uint32)
    s, i = core.hbm(a), core.sbuf(ids)
    d = core.sbuf(shape=(4, 3, 4), dtype=np.uint16)
    core.dma_transpose(dst=d, src=s.ap([[12, 4], [1, 12]], vector_offset=i), axes=(2, 1, 0))
    assert np.array_equal(d.numpy(), a[ids[0]].transpose(2, 1, 0))
    b = a.reshape(6, 3, 1, 4)
    s4 = core.hbm(b)
    d4 = core.hbm(shape=(4, 3, 1, 4), dtype=np.uint16)
    core.dma_transpose(dst=d4, src=s4.ap([[12, 4], [1, 12]], vector_offset=i), axes=(3, 1, 2, 0))
    assert np.array_equal(d4.numpy(), b[ids[0]].transpose(3, 1, 2, 0))
    with pytest.raises(hostsim.InvalidInput, match="not a permutation NKI's dma_transpose documents"):
        core.dma_transpose(dst=d, src=s.ap([[12, 4], [1, 12]], vector_offset=i), axes=(2, 0, 1))
    # attention_tkg's k_prior.reshape(4-D).ap(...): the rows and the axes are of the
    # reshaped tensor, on every route
    k = np.arange(10 * 16, dtype=np.uint16).reshape(10, 16)
    rows = np.array([[3], [0], [9], [4]], np.uint32)
    want = k.reshape(10, 1, 2, 8)[rows[:, 0]].transpose(3, 1, 2, 0)
    for mechanism in ["auto", "dge", "reference"]:
        c = hostsim.Core("trn2", mechanism=mechanism)
        kt, it = c.hbm(k), c.sbuf(rows)
        out = c.sbuf(shape=(8, 1, 2, 4), dtype=np.uint16)
        c.dma_transpose(dst=out, src=kt.reshape((10, 1, 2, 8)).ap([[16, 4], [1, 16]], vector_offset=it), axes=(3, 1, 2, 0))
        np.testing.assert_array_equal(out.numpy(), want, err_msg=mechanism)
    with pytest.raises(hostsim.InvalidInput, match="dst = .*: an indirect dma_transpose writes a whole Tensor"):
        c.dma_transpose(dst=out[:, 0], src=kt.ap([[16, 4], [1, 16]], vector_offset=it))


def test_a_direct_dma_transpose_is_numpys_transpose_on_every_route():
    x2 = RNG.standard_normal((16, 128)).astype(ml_dtypes.bfloat16)
    x3 = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    for mechanism in ["auto", "dge", "reference"]:
        core = hostsim.Core("mariana", mechanism=mechanism)
        # NKI's hwdge form: a [16, 128] bf16 tile in HBM into SBUF
        a = core.hbm(x2)
        at = core.sbuf(shape=(128, 16), dtype=ml_dtypes.bfloat16)
        core.dma_transpose(dst=at, src=a)
        assert at.numpy().tobytes() == x2.T.tobytes()
        # SBUF to SBUF, and a slice of a 3-D HBM tensor by (2, 1, 0)
        back = core.sbuf(shape=(16, 128), dtype=ml_dtypes.bfloat16)
        core.dma_transpose(dst=back, src=at, axes=(1, 0))
        assert back.numpy().tobytes() == x2.tobytes()
        b = core.hbm(x3)
        bt = core.hbm(shape=(5, 4, 2), dtype=np.float32)
        core.dma_transpose(dst=bt, src=b[1:3])
        np.testing.assert_array_equal(bt.numpy(), x3[1:3].transpose(2, 1, 0))
    with pytest.raises(hostsim.InvalidInput, match="oob_mode = 'skip': \"skip\" applies to an indirect dma_transpose"):
        core.dma_transpose(dst=bt, src=b[1:3], oob_mode="skip")
    with pytest.raises(hostsim.InvalidInput, match="src h? ?.*transposed by \\[2, 1, 0\\] is \\[5, 4, 3\\]"):
        core.dma_transpose(dst=bt, src=b)


def test_dma_transpose_gathers_rows_into_columns():
    core = hostsim.Core("trn2")
    a = np.arange(24, dtype=np.uint16).reshape(6, 4)
    ids = np.array([[5, 0, 2]], dtype=np.uint32)
    s, i = core.hbm(a), core.sbuf(ids)
    d = core.sbuf(shape=(4, 3), dtype=np.uint16, partition=4)
    core.dma_transpose(dst=d, src=s.ap([[4, 3], [1, 4]], vector_offset=i), axes=(1, 0))
    assert np.array_equal(d.numpy(), a[ids[0]].T)
    with pytest.raises(hostsim.InvalidInput, match="whole rows picked by the index tile"):
        core.dma_transpose(dst=d, src=s.ap([[4, 3], [1, 2]], vector_offset=i))
    f = core.hbm(a.astype(np.float32))
    with pytest.raises(hostsim.InvalidInput, match="moves 2-byte elements"):
        core.dma_transpose(dst=core.sbuf(shape=(4, 3), dtype=np.float32), src=f.ap([[4, 3], [1, 4]], vector_offset=i))
    with pytest.raises(hostsim.InvalidInput, match="needs trn2"):
        c = hostsim.Core("trn1")
        s1, i1 = c.hbm(a), c.sbuf(ids)
        c.dma_transpose(dst=c.sbuf(shape=(4, 3), dtype=np.uint16), src=s1.ap([[4, 3], [1, 4]], vector_offset=i1))


# --- isa, report, descriptors, explain ---------------------------------------------------


def gather_fields(table, idx, out, n):
    """A DMA_INDIRECT row gather of `n` rows of 4 f32 (the fields `hostsim isa decode`
    prints), reading bound register 0."""
    return {
        "opcode": "DMA_INDIRECT", "struct": "DMA_INDIRECT1D", "header.inst_flags.tile": False,
        "flags.indirect_mode": "src", "flags.idx_bound_is_err": True, "flags.non_unique_dst_idx": False,
        "flags.gather_dim": "x", "flags.scatter_dim": "x",
        "src_idx_bound_reg.bc_enabled": True, "src_idx_bound_reg.bc_reg": 0,
        "src_idx_bound_reg.bc_disable_oob_error_notif": False,
        "dst_idx_bound_reg.bc_enabled": False, "dst_idx_bound_reg.bc_reg": 0,
        "dst_idx_bound_reg.bc_disable_oob_error_notif": False,
        "compute_op": "none", "src_start_addr": hex(table.addr), "dst_start_addr": hex(out.addr),
        "src_idx_start_addr": idx.location, "dst_idx_start_addr": idx.location,
        "src_num_elem": n, "dst_num_elem": n, "src_elem_size": 16, "dst_elem_size": 16,
        "src_step_elem": 0, "dst_step_elem": 1, "dtype": "f32",
        "shape_reg.present": False, "shape_reg.reg": 0, "eng_mask": "0xffff", "reshape_kind": "rows",
    }


def test_isa_runs_a_raw_instruction_given_as_fields_or_hex():
    table = RNG.standard_normal((100, 4)).astype(np.float32)
    ids = np.array([[7, 99, 0, 42, 7, 1, 2, 3]], dtype=np.uint32)
    seen = set()
    for gen, mechanisms in [("sunda", ["auto", "pool", "reference"]), ("cayman", ["auto", "dge", "reference"])]:
        for m in mechanisms:
            core = hostsim.Core(gen, mechanism=m)
            t, i, out = core.hbm(table), core.sbuf(ids), core.hbm(shape=(8, 4), dtype=np.float32)
            fields = gather_fields(t, i, out, 8)
            core.isa(fields, bounds=[(0, 100)])
            assert np.array_equal(out.numpy(), table[ids[0]]), (gen, m)
            assert core.report["ops"][0]["bytes"] == 8 * 16
            seen.add(out.numpy().tobytes())
            hex_text = cli("isa", "encode", "--format", "json", stdin=json.dumps(fields)).splitlines()[0]
            core.isa(hex_text, bounds=[{"reg": 0, "bound": 100}])
            # the bound register is the rule: index 42 fails under a bound of 40
            before = snapshot([out])
            with pytest.raises(hostsim.Fault) as e:
                core.isa(hex_text, bounds=[(0, 40)])
            assert (e.value.op, e.value.op_index, e.value.position, e.value.value, e.value.bound) == ("isa", 2, 1, 99, 40)
            assert snapshot([out]) == before
    assert len(seen) == 1
    # register settings as (reg, value) pairs or as the scenario's tables, alike
    for shapes in [[(8, (16, 4, 2, 1))], [{"reg": 8, "xyzw": [16, 4, 2, 1]}]]:
        core = hostsim.Core("cayman")
        t, i, out = core.hbm(table), core.sbuf(ids), core.hbm(shape=(8, 4), dtype=np.float32)
        core.isa(gather_fields(t, i, out, 8), bounds=[(0, 100)], shapes=shapes)
        assert np.array_equal(out.numpy(), table[ids[0]])
    with pytest.raises(hostsim.InvalidInput, match="xyzw"):
        core.isa(gather_fields(t, i, out, 8), bounds=[(0, 100)], shapes=[(8, (16, 4, 2))])
    core = hostsim.Core("cayman")
    with pytest.raises(hostsim.InvalidInput, match="instruction is 1 bytes"):
        core.isa("b8")
    with pytest.raises(hostsim.InvalidInput, match="has no field bogus"):
        core.isa({"opcode": "DMA_INDIRECT", "struct": "DMA_INDIRECT1D", "bogus": 1})
    assert core.report["ops"] == []


def test_descriptors_agree_with_the_report():
    core, _, _ = embedding_lookup("dge")
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    s = core.hbm(a)
    core.dma_copy(dst=core.hbm(shape=(8, 8), dtype=np.float32), src=s.ap([[1, 8], [8, 8]]))
    d = core.descriptors()
    report = core.report
    assert len(d) == report["total"]["descriptors"]
    assert int(d["bytes"].sum()) == report["total"]["bytes"]
    for k, op in enumerate(report["ops"]):
        assert (d["op_index"] == k).sum() == op["descriptors"]
    assert set(d["op"]) == {"copy"} and set(d["dtype"]) == {"f32"}
    assert d["queue"].max() < core.queues
    assert hostsim.Core("sunda").descriptors().shape == (0,)


def test_explain_is_the_cli_explain_of_the_saved_session():
    core, _, _ = embedding_lookup("auto")
    explained = core.explain()
    assert [o["op"] for o in explained["ops"]] == ["dma_copy"]
    assert explained["ops"][0]["descriptors"] == core.report["total"]["descriptors"]
    with tempfile.TemporaryDirectory() as d:
        core.save_scenario(d)
        cli_explained = json.loads(cli("explain", f"{d}/scenario.toml", "--json"))
    assert cli_explained == explained


# --- errors ----------------------------------------------------------------------------


def test_invalid_input_changes_nothing():
    core, _, _ = embedding_lookup("auto")
    a = core.hbm(np.arange(16, dtype=np.float32).reshape(4, 4), name="a")
    b = core.hbm(shape=(4, 4), dtype=np.float32, name="b")
    before, ops = snapshot([a, b]), len(core.report["ops"])
    cases = [
        (lambda: core.dma_copy(dst=b, src=a, dst_rmw_op="mul"), "dma_copy: dst_rmw_op = 'mul': must be np.add"),
        (lambda: core.dma_copy(dst=b, src=a, oob_mode="skip"), "oob = skip: applies to a side with a vector_offset or a scalar_offset"),
        (lambda: core.dma_copy(dst=b, src=a.ap([[1, 20]])), "outside the 16 elements of a"),
        (lambda: core.dma_copy(dst=b, src=hostsim.Core().hbm(np.zeros(1, np.float32))), "belongs to another Core"),
        (lambda: core.hbm(np.zeros(3)), "dtype float64"),
        (lambda: core.hbm(np.float32(3)), "a 0-d array is no tensor"),
        (lambda: core.hbm(np.zeros(3, np.float32), name="a"), "already taken by tensor"),
        (lambda: core.sbuf(shape=(129, 4)), "partitions 0..=128 do not fit sbuf"),
        (lambda: core.hbm(), "give an array, or a shape"),
    ]
    # arguments of the wrong kind name the call, the argument and the rule
    cases += [
        (lambda: core.dma_copy(dst=b, src=a, dst_rmw_op=max), "dma_copy: dst_rmw_op = <built-in function max>: must be np.add"),
        (lambda: core.dma_copy(dst=b, src=a, dst_rmw_op=5), "dst_rmw_op = 5: must be np.add"),
        (lambda: core.dma_compute(dst=b, srcs=[b, a], reduce_op=None), "dma_compute: reduce_op = None"),
        (lambda: core.dma_compute(dst=b, srcs=[b, a], reduce_op="none"), "reduce_op = 'none': must reduce"),
        (lambda: a.ap("abc"), "ap: pattern = 'abc': must be a list of 1 to 5 \\[step, num\\] pairs"),
        (lambda: a.ap([[1, 2, 3]]), "ap: pattern = \\[\\[1, 2, 3\\]\\]"),
        (lambda: a.ap([[1, 4]], offset=-1), "ap: offset = -1"),
        (lambda: a.ap([[1, 4]], indirect_dim=-1), "ap: indirect_dim = -1"),
        (lambda: hostsim.Core(queues=-1), "Core: queues = -1"),
        (lambda: core.hbm(shape=(-4, 4)), "hbm: shape = \\(-4, 4\\): must be a sequence of dims"),
        (lambda: core.hbm(shape=(2**64, 4)), "hbm: shape = \\(18446744073709551616, 4\\)"),
        (lambda: core.sbuf(np.zeros((1, 4), np.float32), partition=-1), "sbuf: partition = -1: must be the first partition"),
        (lambda: core.psum(shape=(1, 4), partition="0"), "psum: partition = '0'"),
        (lambda: a.ap([[1, 4]], vector_offset=5), "ap: vector_offset = 5: must be a Tensor .* or an .ap\\(\\) of one"),
        (lambda: core.dma_copy(dst=b, src=a.ap([[4, 4], [1, 4]], vector_offset=b.ap([[1, 4]]))), "vector_offset b has dtype f32; index tiles are u32 or i32"),
        (lambda: core.dma_compute(dst=b, srcs=b, reduce_op=np.add), "dma_compute: srcs = Tensor\\(\"b\".*: must be a list of two sources"),
        (lambda: core.dma_compute(dst=b, srcs=[b, a], reduce_op=np.add, scales=[1.0]), "dma_compute: scales = \\[1.0\\]: must be None or one 1.0 per source"),
        (lambda: core.dma_compute(dst=b, srcs=[a, a], reduce_op=np.add), "one of them dst itself .* dma_copy a into dst first, then dma_compute\\(dst, \\[dst, b\\]\\)"),
        (lambda: core.dma_copy(dst=b, src=a, oob_mode="SKIP"), "dma_copy: oob_mode = 'SKIP': must be \"error\" or \"skip\""),
        (lambda: core.dma_copy(dst=b, src=a, unique_indices=1.5), "dma_copy: unique_indices = 1.5: must be True or False"),
        (lambda: core.dma_copy(dst=b, src=a, unique_indices=False), "unique_indices = false: applies to an indexed destination"),
        (lambda: core.dma_transpose(dst=b, src=5), "src: must be a Tensor of this Core"),
        (lambda: hostsim.Core().hbm(np.zeros((4, 4), np.float32)).ap([[4, 4], [1, 4]], vector_offset=a), "ap: vector_offset = \"a\": it is a tensor of another Core"),
        (lambda: core.local_gather(b, b, b, num_elem_per_idx=1.0), "local_gather: num_elem_per_idx = 1.0"),
        (lambda: core.local_gather(b, b, b, num_elem_per_idx=-1), "local_gather: num_elem_per_idx = -1"),
        (lambda: hostsim.Core(generation=3), "Core: generation = 3"),
        (lambda: core.hbm(shape=(2, 2), name=5), "hbm: name = 5: must be a str"),
        (lambda: hostsim.run("examples/embedding/scenario.toml", queues="4"), "run: queues = '4'"),
        (lambda: core.dma_compute(dst=b, srcs=[np.zeros(4), b], reduce_op="add"), "dma_compute: srcs\\[0\\]: must be a Tensor"),
        (lambda: core.dma_compute(dst=b, srcs=[b, a.ap([[1, 20]])], reduce_op=np.add), "^dma_compute \\(run as the scenario's dma_copy\\): op \\d+ \\(dma_copy.*outside the 16 elements of a"),
    ]
    for call, message in cases:
        with pytest.raises(hostsim.InvalidInput, match=message):
            call()
    assert issubclass(hostsim.InvalidInput, ValueError)
    assert snapshot([a, b]) == before and len(core.report["ops"]) == ops
    with pytest.raises(hostsim.InvalidInput, match="unknown generation"):
        hostsim.Core("trn9")
    with pytest.raises(hostsim.InvalidInput, match="queues = 0"):
        hostsim.Core("v3", queues=0)


def test_a_hard_oob_index_is_a_fault_naming_op_position_value_and_bound():
    core = hostsim.Core("cayman")
    table = core.hbm(RNG.standard_normal((50, 8)).astype(np.float32))
    ids = np.arange(16, dtype=np.int32).reshape(16, 1)
    ids[9, 0] = -1
    i = core.sbuf(ids)
    out = core.sbuf(RNG.standard_normal((16, 8)).astype(np.float32))
    before = snapshot([table, i, out])
    with pytest.raises(hostsim.Fault) as e:
        core.dma_copy(dst=out, src=table.ap([[8, 16], [1, 8]], vector_offset=i))
    f = e.value
    assert isinstance(f, RuntimeError)
    assert (f.op, f.op_index, f.position, f.value, f.bound) == ("dma_copy", 0, 9, -1, 50)
    assert "index -1 at position 9" in str(f)
    assert snapshot([table, i, out]) == before and core.report["ops"] == []


def test_duplicates_under_a_compute_op_are_a_fault_and_change_nothing():
    core = hostsim.Core("cayman")
    t = core.hbm(np.zeros((4, 2), np.float32))
    i = core.sbuf(np.array([[1], [2], [1]], dtype=np.uint32))
    d = core.sbuf(np.ones((3, 2), np.float32))
    with pytest.raises(hostsim.Fault) as e:
        core.dma_copy(dst=t.ap([[2, 3], [1, 2]], vector_offset=i), src=d, dst_rmw_op="add")
    assert (e.value.op, e.value.position, e.value.value, e.value.bound) == ("dma_copy", 2, 1, None)
    assert not t.numpy().any()


# --- scenarios ---------------------------------------------------------------------------


def test_save_scenario_and_the_cli_reproduce_the_session_byte_for_byte():
    core = hostsim.Core("cayman", queues=4)
    table = core.hbm(RNG.standard_normal((100, 16)).astype(np.float32), name="table")
    ids = core.sbuf(RNG.integers(0, 110, size=(32, 1)).astype(np.int32), name="ids")
    rows = core.sbuf(shape=(32, 16), dtype=np.float32, name="rows")
    half = core.hbm(shape=(32, 16), dtype=ml_dtypes.bfloat16, name="half")
    core.dma_copy(dst=rows, src=table.ap([[16, 32], [1, 16]], vector_offset=ids), oob_mode="skip")
    core.dma_copy(dst=table.ap([[16, 32], [1, 16]], vector_offset=ids), src=rows, dst_rmw_op=np.add, oob_mode="skip", unique_indices=False)
    core.dma_copy(dst=half, src=rows)
    tensors = {t.name: t for t in [table, ids, rows, half]}
    with tempfile.TemporaryDirectory() as d:
        core.save_scenario(d)
        cli("run", f"{d}/scenario.toml", "--out", f"{d}/out", "--queues", "4")
        report = json.loads(Path(f"{d}/out/report.json").read_text())
        for name, t in tensors.items():
            saved = np.load(f"{d}/out/{name}.npy")
            assert saved.tobytes() == t.numpy().tobytes(), name
        arrays, run_report = hostsim.run(f"{d}/scenario.toml", queues=4)
    for name, t in tensors.items():
        assert arrays[name].dtype == t.numpy().dtype
        assert arrays[name].tobytes() == t.numpy().tobytes(), name
    mine = core.report
    for r in [report, run_report]:
        assert r["ops"] == mine["ops"]


def test_run_a_shipped_example_as_the_cli_does():
    path = ROOT / "examples" / "embedding" / "scenario.toml"
    arrays, report = hostsim.run(str(path))
    assert sorted(arrays) == ["ids", "out", "table"]
    assert [o["op"] for o in report["ops"]] == ["dma_gather", "dma_scatter"]
    with tempfile.TemporaryDirectory() as d:
        cli("run", str(path), "--out", d)
        for name, a in arrays.items():
            assert np.load(f"{d}/{name}.npy").tobytes() == a.tobytes(), name
        assert json.loads(Path(f"{d}/report.json").read_text())["ops"] == report["ops"]
    with pytest.raises(hostsim.InvalidInput, match="cannot be read"):
        hostsim.run(str(ROOT / "examples" / "nope.toml"))
    with pytest.raises(hostsim.InvalidInput, match="--mechanism bogus"):
        hostsim.run(str(path), mechanism="bogus")


def test_dtypes_by_name_and_by_numpy():
    """A dtype is numpy's (an object or anything numpy.dtype() reads), numpy's name of a
    fabric dtype ("bfloat16" needs no ml_dtypes import) or a scenario's ("bf16"); any
    other is refused as InvalidInput naming it."""
    core = hostsim.Core("cayman")
    for spec, want in [
        ("bfloat16", ml_dtypes.bfloat16),
        ("bf16", ml_dtypes.bfloat16),
        (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
        ("f32", np.float32),
        ("<f4", np.float32),
        (np.int32, np.int32),
        ("i32", np.int32),
        ("i8", np.int64),  # numpy's meaning first: "i8" is int64
    ]:
        assert core.sbuf(shape=(2, 4), dtype=spec).dtype == np.dtype(want), spec
    for spec in ["complex64", "nonsense", np.float64, "u8", "f16"]:  # uint64, float128
        with pytest.raises(hostsim.InvalidInput, match="the fabric holds"):
            core.sbuf(shape=(2, 4), dtype=spec)


def test_a_sum_into_a_third_tensor_is_a_copy_then_a_read_modify_write():
    """The workaround the refusal of dst = a + b (dst apart) names: dma_copy(dst, a), then
    dma_compute(dst, [dst, b]); with dst float32 the values are float32(a) + float32(b)
    rounded once, as NKI's DMA computes them."""
    core = hostsim.Core("cayman")
    a_np = RNG.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    b_np = RNG.standard_normal((4, 8)).astype(np.float32)
    a, b = core.sbuf(a_np), core.hbm(b_np)
    dst = core.hbm(shape=(4, 8), dtype=np.float32)
    core.dma_copy(dst=dst, src=a)
    core.dma_compute(dst=dst, srcs=[dst, b], reduce_op=np.add)
    want = a_np.astype(np.float32) + b_np
    assert dst.numpy().tobytes() == want.tobytes()
