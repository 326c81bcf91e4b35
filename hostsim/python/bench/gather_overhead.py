"""The cost of a 128-row gather called from Python, as a ratio to the same op in the
CLI's in-process runtime, both measured in this run.

    python hostsim/python/bench/gather_overhead.py [--calls N] [--repeat R]

The op: a (128, 1) int32 index tile picks 128 rows of 64 float32 from a [1000, 64] HBM
table into a [128, 64] SBUF tile (NKI's embedding-lookup idiom), on cayman's DGE route.

- Python: `Core.dma_copy` called N times (each call parses, lowers, runs and records the
  op); seconds per call.
- CLI in-process runtime (the baseline): a scenario of the same tensors and the same op N
  times, run by `hostsim.run` (the CLI's code path); its report's `wall_seconds` is the
  execution of the ops alone (no parsing, lowering or file I/O); seconds per op.

Each is the median of R repeats. Prints one line per measure and the ratio.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import hostsim

ROWS, WIDTH, TABLE = 128, 64, 1000


def inputs():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((TABLE, WIDTH)).astype(np.float32)
    ids = rng.integers(0, TABLE, size=(ROWS, 1)).astype(np.int32)
    return table, ids


def python_seconds(calls):
    """Seconds per `Core.dma_copy` call."""
    table, ids = inputs()
    core = hostsim.Core("cayman")
    t, i = core.hbm(table), core.sbuf(ids)
    out = core.sbuf(shape=(ROWS, WIDTH), dtype=np.float32)
    src = t.ap([[WIDTH, ROWS], [1, WIDTH]], vector_offset=i)
    start = time.perf_counter()
    for _ in range(calls):
        core.dma_copy(dst=out, src=src)
    elapsed = time.perf_counter() - start
    assert np.array_equal(out.numpy(), table[ids[:, 0]])
    return elapsed / calls


def runtime_seconds(calls):
    """Seconds per op of the CLI's in-process runtime on the same op."""
    table, ids = inputs()
    core = hostsim.Core("cayman")
    t, i = core.hbm(table, name="table"), core.sbuf(ids, name="ids")
    core.sbuf(shape=(ROWS, WIDTH), dtype=np.float32, name="out")
    op = (
        '[[op]]\nop = "dma_copy"\ndst = "out"\n'
        f'src = {{ tensor = "table", ap = [[{WIDTH}, {ROWS}], [1, {WIDTH}]], vector_offset = "ids" }}\n'
    )
    with tempfile.TemporaryDirectory() as d:
        core.save_scenario(d)
        path = Path(d) / "scenario.toml"
        path.write_text(path.read_text() + op * calls)
        arrays, report = hostsim.run(str(path))
    assert np.array_equal(arrays["out"], table[ids[:, 0]])
    assert len(report["ops"]) == calls
    return report["total"]["wall_seconds"] / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    py = statistics.median(python_seconds(args.calls) for _ in range(args.repeat))
    rt = statistics.median(runtime_seconds(args.calls) for _ in range(args.repeat))
    print(f"python Core.dma_copy      {py * 1e6:9.1f} us per call")
    print(f"CLI in-process runtime    {rt * 1e6:9.1f} us per op")
    print(f"ratio                     {py / rt:9.2f} x (target: at most 2)")


if __name__ == "__main__":
    main()
