"""Type hints for hostsim (the extension module hostsim._native, re-exported)."""

from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Sequence, SupportsIndex, Tuple, Union

import numpy as np
import numpy.typing as npt

DTypeLike = npt.DTypeLike
# an int, or a numpy integer scalar (anything with __index__ that is no array)
Int = SupportsIndex
# a compute op: "add" | "multiply" | "max" | "min", or np.add, np.multiply, np.maximum, np.minimum
ComputeOp = Union[str, Callable[..., Any]]

class InvalidInput(ValueError):
    """Input that breaks a rule, caught before anything ran (the CLI's exit status 2)."""

class Fault(RuntimeError):
    """An op that failed while it ran (the CLI's exit status 1); no tensor has changed."""

    op: Optional[str]
    """The op's kind (dma_copy, isa, ...)."""
    op_index: Optional[int]
    """The op's index among the Core's ops."""
    position: Optional[int]
    """The failing index's position in its index tile (within its instruction)."""
    value: Optional[int]
    """The failing index's value (a negative int32 shown negative)."""
    bound: Optional[int]
    """The bound it broke (the indexed dim's size, or the bound register), if any."""

class _Views:
    """NKI's view methods (NkiTensor's), which Tensor and Ap both have: each an .ap() over
    the same tensor, no data moved. Dims may be negative (from the end); on SBUF/PSUM dim 0,
    the partition dim, stays the first dim of every view (nothing moves, splits, merges,
    broadcasts or drops it)."""

    def ap(
        self,
        pattern: Sequence[Sequence[int]],
        offset: int = 0,
        vector_offset: Optional[Union[Tensor, Ap]] = None,
        indirect_dim: Optional[int] = None,
        scalar_offset: Optional[Tensor] = None,
        dtype: Optional[DTypeLike] = None,
    ) -> Ap:
        """NKI's access pattern over the tensor, or over the tensor as a view of the whole
        of it reshapes it (t.reshape(s).ap(...): indirect_dim, its stride and its bound are
        of that shape): 1 to 5 [step, num] pairs, outermost first, in elements (on
        SBUF/PSUM the first pair steps partitions); an index tile `vector_offset` ([1, N]
        or (N, 1), uint32/int32, SBUF), or an .ap() of one picking N of its elements
        (i_sb.ap([[NT, 128], [1, 1]], offset=t): a column), replaces dim `indirect_dim`'s
        term (default 0); `scalar_offset` is a 1x1 int32 or int64 tensor in SBUF or HBM
        added at run time (int64 only on an HBM tensor's pattern; on SBUF/PSUM it must be
        int32). `dtype` counts the tensor's bytes as elements of that dtype (view(dtype)
        first)."""
    def slice(self, dim: Int, start: Int, end: Int, step: Int = 1) -> Ap:
        """Dim `dim` cut to start:end:step (numpy's meaning; end is clamped)."""
    def select(self, dim: Int, index: Union[Int, Tensor]) -> Ap:
        """Dim `dim` picked at `index`: an int, or a 1x1 int32/int64 Tensor read when the op
        runs (the .ap()'s scalar_offset; its indirect_dim is the tensor dim the picked dim
        steps, of the tensor with a dim split if none does; the value is checked against
        the tensor, not the dim, as NKI's is). On
        SBUF/PSUM picking a partition keeps dim 0 at size 1."""
    def permute(self, dims: Sequence[Int]) -> Ap:
        """The dims in the order `dims` gives (dims[j] becomes dim j)."""
    def reshape(self, shape: Union[Int, Sequence[Int]]) -> Ap:
        """The same elements in the same row-major order as `shape` (one size may be -1),
        where strides can say it: each group of dims merged must be contiguous (numpy's
        no-copy rule). On SBUF/PSUM shape[0] keeps the partition dim's size."""
    def reshape_dim(self, dim: Int, shape: Sequence[Int]) -> Ap:
        """Dim `dim` split into dims of `shape` (one size may be -1)."""
    def flatten_dims(self, start_dim: Int, end_dim: Int) -> Ap:
        """Dims start_dim..end_dim (both included), contiguous (dims of size 1 aside),
        merged into one."""
    def expand_dim(self, dim: Int) -> Ap:
        """A dim of size 1 inserted at `dim`."""
    def squeeze_dim(self, dim: Int) -> Ap:
        """Dim `dim`, of size 1, dropped."""
    def broadcast(self, dim: Int, size: Int) -> Ap:
        """Dim `dim`, of size 1, repeated `size` times (stride 0)."""
    def view(self, dtype: DTypeLike) -> Ap:
        """The view's bytes as elements of `dtype` (numpy's view(dtype)): the last dim, which
        must be contiguous, scaled by the size ratio; strides and offset counted in the new
        elements, each a whole number of them."""
    def reinterpret_cast(self, dtype: DTypeLike) -> Ap:
        """nki-library's TensorView.reinterpret_cast: view(dtype)."""

class Tensor(_Views):
    """A tensor of a Core, made by Core.hbm / Core.sbuf / Core.psum."""

    name: str
    """Its name (its .npy file in save_scenario)."""
    space: str
    """"hbm", "sbuf" or "psum"."""
    shape: List[int]
    """Its shape; on sbuf/psum shape[0] is the partition count."""
    dtype: np.dtype
    """Its numpy dtype (bfloat16 is ml_dtypes.bfloat16)."""
    addr: int
    """The fabric address of element 0."""
    location: str
    """Element 0's place as `hostsim isa decode` writes it: hbm:0x.., sbuf:P:0x.., psum:P:0x.."""
    def numpy(self) -> np.ndarray:
        """Its current contents (a copy) as an array of its dtype and shape."""
    def __getitem__(self, key: Any) -> Ap:
        """NKI's slicing as the .ap() it stands for: t[2:6, ::2], t[i], i_sb[:, t],
        t[ds(s, n), ..., -1] (ints and slices per dim, one ... or missing trailing dims
        taking the rest, numpy's meaning; on SBUF/PSUM the partition dim stays the first pair)."""

class Ap(_Views):
    """An access pattern over a tensor, a dma_copy / dma_compute side: a view (slicing or
    a view method) or an explicit .ap(). View methods apply to it as to a Tensor, except
    after a vector_offset (which ends the chain)."""

    tensor: Tensor
    shape: List[int]
    """The view's shape: one size per dim (a view of no dims, one element, is [] and its
    pattern [[1, 1]])."""
    offset: int
    """The element its first position is."""
    def get_pattern(self) -> List[List[int]]:
        """Its .ap() pairs [step, num], outermost first (at most 5)."""
    def __getitem__(self, key: Any) -> Ap:
        """Slicing the view, as Tensor[...]."""

Side = Union[Tensor, Ap]

class Core:
    """One simulated core; ops run when called, in order, as `hostsim run` runs them."""

    generation: str
    mechanism: str
    queues: int
    report: Dict[str, Any]
    """The report.json structure of the ops run so far."""
    def __init__(self, generation: str = "cayman", mechanism: str = "auto", queues: int = 16) -> None:
        """generation: sunda | cayman | mariana | maverick, v2..v5, trn1..trn3;
        mechanism: auto | pool | dge | reference; queues: 1..16 DMA queues."""
    def hbm(
        self,
        array: Optional[npt.ArrayLike] = None,
        *,
        shape: Optional[Sequence[int]] = None,
        dtype: Optional[DTypeLike] = None,
        name: Optional[str] = None,
    ) -> Tensor:
        """An HBM tensor: a copy of `array`, or zeros of `shape` and `dtype` (float32)."""
    def sbuf(
        self,
        array: Optional[npt.ArrayLike] = None,
        partition: Optional[int] = None,
        *,
        shape: Optional[Sequence[int]] = None,
        dtype: Optional[DTypeLike] = None,
        name: Optional[str] = None,
    ) -> Tensor:
        """An SBUF tensor, partition-major: shape[0] partitions from `partition` (0)."""
    def psum(
        self,
        array: Optional[npt.ArrayLike] = None,
        partition: Optional[int] = None,
        *,
        shape: Optional[Sequence[int]] = None,
        dtype: Optional[DTypeLike] = None,
        name: Optional[str] = None,
    ) -> Tensor:
        """A PSUM tensor, laid out as sbuf lays one out."""
    def dma_copy(
        self,
        dst: Side,
        src: Side,
        dst_rmw_op: Optional[ComputeOp] = None,
        oob_mode: Optional[str] = None,
        unique_indices: Optional[bool] = None,
        dge_mode: Optional[str] = None,
        name: Optional[str] = None,
    ) -> None:
        """Element k of src's walk to element k of dst's (cast through float32);
        dst_rmw_op makes it dst = op(dst, src); oob_mode "error" (default) | "skip" for a
        side with a vector_offset or scalar_offset; unique_indices (default True) for an
        indexed dst; dge_mode (hostsim.dge_mode.unknown | swdge | hwdge | none) who makes
        the descriptors; name (every op takes it) labels the op in the report and explain."""
    def dma_compute(
        self,
        dst: Side,
        srcs: Sequence[Side],
        reduce_op: ComputeOp,
        scales: Optional[Sequence[float]] = None,
        unique_indices: Optional[bool] = None,
        oob_mode: Optional[str] = None,
        dge_mode: Optional[str] = None,
        name: Optional[str] = None,
    ) -> None:
        """dst = reduce_op(dst, other), one of the two srcs being dst itself."""
    def dma_transpose(
        self,
        dst: Union[Tensor, Ap],
        src: Union[Tensor, Ap],
        axes: Optional[Sequence[int]] = None,
        oob_mode: Optional[str] = None,
        name: Optional[str] = None,
    ) -> None:
        """dst = src.transpose(axes), axes (1, 0), (2, 1, 0) or (3, 1, 2, 0) (default:
        the one of src's rank). Direct: src and dst Tensors or slices, no oob_mode.
        Indirect: src = t.ap([[D, N], [1, D]], vector_offset=idx) (D =
        prod(t.shape[1:])), dst = t[idx].transpose(axes) (a whole Tensor), (2, 1, 0) for a
        3-D t or (3, 1, 2, 0) for a 4-D t whose shape[1] or shape[2] is 1; t may be a
        reshape of a tensor (k.reshape(s).ap(...): the shape gathered and permuted)."""
    def nc_n_gather(self, dst: Tensor, data: Tensor, indices: Tensor, name: Optional[str] = None) -> None:
        """dst[p, m] = data[p, indices[p, m]] within each partition (0 past the row)."""
    def local_gather(
        self,
        dst: Tensor,
        src_buffer: Tensor,
        index: Tensor,
        num_elem_per_idx: int = 1,
        num_valid_indices: Optional[int] = None,
        name: Optional[str] = None,
    ) -> None:
        """Per core of 16 partitions, runs of num_elem_per_idx elements at the uint16
        element offsets `index` (read partition-first)."""
    def embedding_update(
        self,
        table: Tensor,
        index: Tensor,
        data: Tensor,
        reduce: Optional[ComputeOp] = None,
        name: Optional[str] = None,
    ) -> None:
        """table[index[i]] = reduce(table[index[i]], data[i]) in index order (add by
        default; max, min); indices past the table are skipped."""
    def isa(
        self,
        hex_or_fields: Union[str, Dict[str, Any]],
        bounds: Optional[Sequence[Any]] = None,
        shapes: Optional[Sequence[Any]] = None,
        name: Optional[str] = None,
    ) -> None:
        """One raw instruction (hex, or fields by name), with bound registers
        [(reg, bound)] and shape registers [(reg, (x, y, z, w))]."""
    def descriptors(self) -> np.ndarray:
        """Every DGE descriptor so far: a structured array (op_index, replay, queue,
        position, src, dst, bytes, op, dtype, flags)."""
    def explain(self) -> Dict[str, Any]:
        """The `hostsim explain --json` object of the ops so far."""
    def save_scenario(self, dir: Union[str, PathLike]) -> None:
        """dir/scenario.toml + .npy files + report.json that `hostsim run` reproduces."""

class dge_mode:
    """NKI's nisa.dge_mode: who makes a DMA's descriptors."""

    unknown: str
    swdge: str
    hwdge: str
    none: str

def ds(start: int, size: int) -> slice:
    """NKI's nl.ds: the slice start:start + size."""

def run(
    path: Union[str, PathLike],
    generation: Optional[str] = None,
    mechanism: Optional[str] = None,
    queues: Optional[int] = None,
) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Runs a scenario file as `hostsim run` does: (arrays by tensor name, report)."""
