"""hostsim: a model of an ML accelerator core's indirection engine, with NKI's names.

A ``Core`` is one simulated core (HBM, SBUF and PSUM) on which ops run when called, by
the runtime the ``hostsim`` command line uses: ``dma_copy`` / ``dma_compute`` over NKI
access patterns (``Tensor.ap``, slicing or NKI's view methods: ``t[2:6, ::2]`` and
``t.reshape((4, -1)).permute((1, 0))`` are the ``.ap()`` they stand for), ``dma_transpose``, ``nc_n_gather``, ``local_gather``,
``embedding_update`` and raw ``isa`` instructions. Arrays go in and out as numpy arrays
(bfloat16 as ``ml_dtypes.bfloat16``). ``run(path)`` runs a scenario file.

Errors: ``InvalidInput`` (a ``ValueError``) for input that breaks a rule, ``Fault`` (a
``RuntimeError``) for an op that failed while running; after either, no tensor has
changed.
"""

from ._native import Ap, Core, Fault, InvalidInput, Tensor, run

__all__ = ["Ap", "Core", "Fault", "InvalidInput", "Tensor", "dge_mode", "ds", "run"]


def ds(start, size):
    """NKI's ``nl.ds``: the slice ``start:start + size``, for ``t[ds(s, n), :]``."""
    return slice(start, start + size)


class dge_mode:
    """NKI's ``nisa.dge_mode``: who makes a DMA's descriptors (``dma_copy(...,
    dge_mode=hostsim.dge_mode.hwdge)``)."""

    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"
