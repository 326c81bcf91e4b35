//! `Ap`: an access pattern over one tensor of a Core, made as NKI makes one: by slicing
//! (`t[2:6, ::2]`), by NKI's view methods (`permute`, `reshape`, `select`, ...) or
//! explicitly (`t.ap(...)`). Each is a [`View`] (the view algebra is
//! [`hostsim::nki::view`]'s) with the tensor's run-time offsets, and reaches the scenario
//! as one `.ap()` table ([`Ap::table`]).

use dma::{Dtype, Space};
use hostsim::nki::view::{self, Entry, View};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyInt, PyMemoryView, PySlice, PyString, PyTuple};
use pyo3::PyTypeInfo;
use serde_json::{json, Map, Value};

use crate::convert;
use crate::errors::{self, InvalidInput};
use crate::tensor::Tensor;

/// An access pattern over a tensor, a `dma_copy` side: a view of it (slicing or NKI's
/// view methods) or an explicit `Tensor.ap(...)`.
#[pyclass(module = "hostsim", frozen)]
pub struct Ap {
    pub tensor: Py<Tensor>,
    view: View,
    offsets: Offsets,
}

/// The arguments of an `.ap(...)` call, as given.
struct ApArgs<'a, 'py> {
    pattern: &'a Bound<'py, PyAny>,
    offset: Option<&'a Bound<'py, PyAny>>,
    vector_offset: Option<&'a Bound<'py, PyAny>>,
    indirect_dim: Option<&'a Bound<'py, PyAny>>,
    scalar_offset: Option<&'a Bound<'py, PyAny>>,
}

/// What an `.ap()` says besides its pattern: the tensor's shape as reshaped and the
/// dtype its elements are counted in (where not the tensor's own), and the run-time
/// offsets.
#[derive(Clone, Debug, Default)]
pub struct Offsets {
    /// The shape of `t.reshape(shape).ap(...)` (in elements of `dtype`).
    pub shape: Option<Vec<u64>>,
    /// The dtype the view's elements are (`view(dtype)`), where not the tensor's.
    pub dtype: Option<Dtype>,
    /// The index tile's name, or an `.ap()` table of one.
    pub vector: Option<Value>,
    /// The 1x1 tensor's name.
    pub scalar: Option<String>,
    pub indirect_dim: Option<u32>,
}

impl Ap {
    /// The whole tensor `t`.
    pub fn whole(t: &Bound<'_, Tensor>) -> Ap {
        let this = t.get();
        Ap::new(
            t,
            View::whole(&this.shape, this.space != Space::Hbm),
            Offsets::default(),
        )
    }

    /// `view` of `t` with `offsets`.
    pub fn new(t: &Bound<'_, Tensor>, view: View, offsets: Offsets) -> Ap {
        Ap {
            tensor: t.clone().unbind(),
            view,
            offsets,
        }
    }

    /// `t.ap(...)` with `args`, on the tensor as `seen` (its shape and dtype) says.
    fn explicit(t: &Bound<'_, Tensor>, seen: Offsets, args: ApArgs) -> PyResult<Ap> {
        let bad = |arg, value, rule| errors::bad_arg("ap", arg, value, rule);
        let pattern = args.pattern;
        let rule = "must be a list of 1 to 5 [step, num] pairs of integers, outermost first";
        let pairs: Vec<[i64; 2]> = pattern
            .extract()
            .map_err(|_| bad("pattern", pattern, rule))?;
        let pairs: Vec<(i64, u64)> = pairs
            .iter()
            .map(|&[step, num]| u64::try_from(num).map(|num| (step, num)))
            .collect::<Result<_, _>>()
            .map_err(|_| bad("pattern", pattern, "each num must be at least 1"))?;
        let rule = "must be an element offset, an integer 0 ..= 2^64 - 1";
        let offset: u64 = errors::extract("ap", "offset", args.offset, rule)?.unwrap_or(0);
        let rule = "must be a dim of the tensor, an integer from 0";
        let indirect_dim = errors::extract("ap", "indirect_dim", args.indirect_dim, rule)?;
        let this = t.get();
        let view = View::of_pattern(&pairs, offset, this.space != Space::Hbm)
            .map_err(|rule| errors::bad_arg("ap", "pattern", pattern, &rule))?;
        let mut offsets = Offsets {
            indirect_dim,
            ..seen
        };
        if let Some(value) = args.vector_offset {
            offsets.vector = Some(this.index_view(value)?);
        }
        if let Some(value) = args.scalar_offset {
            let rule = "must be a Tensor (a 1x1 int32 or int64 tensor)";
            let s = value
                .cast::<Tensor>()
                .map_err(|_| bad("scalar_offset", value, rule))?;
            this.same_core(s.get(), ("ap", "scalar_offset"))?;
            offsets.scalar = Some(s.get().name.clone());
        }
        Ok(Ap::new(t, view, offsets))
    }

    /// Whether it has a `vector_offset`.
    pub fn indexed(&self) -> bool {
        self.offsets.vector.is_some()
    }

    /// The view's `.ap()`: its offset and `[step, num]` pairs; `what` names it in errors
    /// (the op argument it is given as).
    fn pattern(&self, what: &str) -> PyResult<(u64, Vec<[i64; 2]>)> {
        let name = &self.tensor.get().name;
        let (offset, dims) = self.view.pattern().map_err(|rule| {
            InvalidInput::new_err(format!("{what}: the view of {name} is no .ap(): {rule}"))
        })?;
        Ok((
            offset,
            dims.iter().map(|d| [d.step, i64::from(d.num)]).collect(),
        ))
    }

    /// The scenario's `.ap()` table: `{ tensor, ap, offset }` and the offsets given;
    /// `what` names the view in errors (the op argument it is given as).
    pub fn table(&self, what: &str) -> PyResult<Map<String, Value>> {
        let name = &self.tensor.get().name;
        let (offset, pattern) = self.pattern(what)?;
        let mut table = Map::new();
        table.insert("tensor".into(), json!(name));
        if let Some(dtype) = self.offsets.dtype {
            table.insert("dtype".into(), json!(dtype.name()));
        }
        if let Some(shape) = &self.offsets.shape {
            table.insert("shape".into(), json!(shape));
        }
        table.insert("ap".into(), json!(pattern));
        table.insert("offset".into(), json!(offset));
        let o = &self.offsets;
        if let Some(v) = &o.vector {
            table.insert("vector_offset".into(), v.clone());
        }
        if let Some(s) = &o.scalar {
            table.insert("scalar_offset".into(), json!(s));
        }
        if let Some(d) = o.indirect_dim {
            table.insert("indirect_dim".into(), json!(d));
        }
        Ok(table)
    }

    /// The view `f` makes of this one, for the view method `call` (its argument `arg` =
    /// `value` named in errors). An `.ap()` with a `vector_offset` ends the chain.
    fn derive(
        &self,
        py: Python<'_>,
        (call, arg, value): (&str, &str, &Bound<'_, PyAny>),
        f: impl FnOnce(&View) -> Result<View, String>,
    ) -> PyResult<Ap> {
        if self.indexed() {
            let rule =
                "the view has a vector_offset; apply view methods before .ap(vector_offset=...)";
            return Err(errors::bad_arg(call, arg, value, rule));
        }
        let view = f(&self.view).map_err(|rule| errors::bad_arg(call, arg, value, &rule))?;
        Ok(Ap {
            tensor: self.tensor.clone_ref(py),
            view,
            offsets: self.offsets.clone(),
        })
    }
}

/// `value` as an int, for argument `arg` of `call`.
fn int(call: &str, arg: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    let rule = match value.extract::<i64>() {
        _ if value.is_instance_of::<PyBool>() => "must be an int, not a bool",
        Ok(v) => return Ok(v),
        Err(_) if is_int(value) => "must be an int in -2^63 ..= 2^63 - 1",
        Err(_) => "must be an int",
    };
    Err(errors::bad_arg(call, arg, value, rule))
}

/// Whether `value` is an integer: a Python int (not a bool) or a scalar with `__index__`,
/// as numpy's integer scalars (an array, which has a length, is not one).
fn is_int(value: &Bound<'_, PyAny>) -> bool {
    // an `__index__` that answers, of something with no length: a numpy integer, or a 0-d
    // integer array (whose `__len__` raises TypeError), never a sequence
    let lengthless = || {
        let py = value.py();
        value
            .len()
            .is_err_and(|e| e.is_instance_of::<pyo3::exceptions::PyTypeError>(py))
    };
    let index = || value.call_method0("__index__").is_ok() && lengthless();
    !value.is_instance_of::<PyBool>() && (value.is_instance_of::<PyInt>() || index())
}

/// `value` as ints: a tuple or list of them (or one int).
fn ints(call: &str, arg: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if is_int(value) {
        return Ok(vec![int(call, arg, value)?]);
    }
    let rule = "must be a tuple or list of ints";
    // text and bytes are sequences, but not of sizes
    let text = [
        PyString::is_type_of,
        PyBytes::is_type_of,
        PyByteArray::is_type_of,
        PyMemoryView::is_type_of,
    ];
    if text.iter().any(|is| is(value)) {
        return Err(errors::bad_arg(call, arg, value, rule));
    }
    let items: Vec<Bound<'_, PyAny>> = value
        .extract()
        .map_err(|_| errors::bad_arg(call, arg, value, rule))?;
    items.iter().map(|v| int(call, arg, v)).collect()
}

#[pymethods]
impl Ap {
    /// The tensor it walks.
    #[getter]
    fn tensor(&self, py: Python<'_>) -> Py<Tensor> {
        self.tensor.clone_ref(py)
    }

    /// The view's shape (one size per dim of its pattern).
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.view.shape()
    }

    /// The element its first position is.
    #[getter]
    fn offset(&self) -> i128 {
        self.view.offset()
    }

    /// The pattern's `[step, num]` pairs, outermost first (a view of no dims: `[[1, 1]]`).
    fn get_pattern(&self) -> PyResult<Vec<[i64; 2]>> {
        Ok(self.pattern("get_pattern")?.1)
    }

    /// ap(pattern, offset=0, vector_offset=None, indirect_dim=None, scalar_offset=None, dtype=None)
    /// --
    ///
    /// NKI's access pattern over the tensor (`t.ap(...)`), or over the tensor as this
    /// view reshapes it (`t.reshape(shape).ap(...)`: the view must be a reshape of the
    /// whole tensor; `indirect_dim`, its stride and its bound are of its shape).
    /// `pattern` is 1 to 5 `[step, num]` pairs, outermost first, in elements (on
    /// SBUF/PSUM the first pair steps partitions); the element at position `(i0, ..)` is
    /// `offset + sum(i_k * step_k)`. `vector_offset` is an index tile (`[1, N]` or
    /// `(N, 1)`, uint32 or int32, in SBUF), or an `.ap()` of one picking N elements
    /// (`i.ap([[W, N], [1, 1]], offset=c)`: column `c` of an `(N, W)` tile), whose value
    /// replaces dim `indirect_dim`'s term (default dim 0) by `index * prod(shape[d+1:])`;
    /// `scalar_offset` a 1x1 int32 or int64 tensor in SBUF or HBM whose value times the
    /// same stride is added when the op runs (int64 only on an HBM tensor's pattern: on
    /// SBUF/PSUM the offset must be int32, as NKI says). `dtype` counts the tensor's
    /// bytes as elements of that dtype (`view(dtype)`, then the `.ap()`).
    #[pyo3(signature = (pattern, offset=None, vector_offset=None, indirect_dim=None, scalar_offset=None, dtype=None))]
    fn ap(
        &self,
        pattern: &Bound<'_, PyAny>,
        offset: Option<&Bound<'_, PyAny>>,
        vector_offset: Option<&Bound<'_, PyAny>>,
        indirect_dim: Option<&Bound<'_, PyAny>>,
        scalar_offset: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ap> {
        let py = pattern.py();
        if let Some(d) = dtype {
            return self.view(d)?.ap(
                pattern,
                offset,
                vector_offset,
                indirect_dim,
                scalar_offset,
                None,
            );
        }
        let t = self.tensor.bind(py);
        let shape = self.view.shape();
        let whole = View::whole(&shape, self.view.on_core());
        let plain = self.offsets.vector.is_none() && self.offsets.scalar.is_none();
        if self.view != whole || !plain {
            return Err(InvalidInput::new_err(format!(
                "ap: an .ap() is of a tensor or of a reshape of a whole one (t.reshape(shape).ap(...)); {} is not (pattern {:?} from element {}{})",
                self.__repr__(),
                self.view.dims().iter().map(|d| [d.stride, d.size as i64]).collect::<Vec<_>>(),
                self.view.offset(),
                if plain { "" } else { ", with run-time offsets" }
            )));
        }
        let seen = Offsets {
            shape: (Some(&shape) != self.tensor_shape().as_ref()).then_some(shape),
            dtype: self.offsets.dtype,
            ..Offsets::default()
        };
        let args = ApArgs {
            pattern,
            offset,
            vector_offset,
            indirect_dim,
            scalar_offset,
        };
        Ap::explicit(t, seen, args)
    }

    /// Slicing the view: ints and slices per dim, as `Tensor[...]`.
    pub fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let shape = self.view.shape();
        self.derive(key.py(), ("slicing", "key", key), |v| {
            v.index(&entries(key, &shape)?)
        })
    }

    /// slice(dim, start, end, step=1)
    /// --
    ///
    /// Dim `dim` cut to `start:end:step` (numpy's meaning; `end` past the dim is clamped).
    #[pyo3(signature = (dim, start, end, step=None))]
    fn slice(
        &self,
        dim: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        end: &Bound<'_, PyAny>,
        step: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ap> {
        let py = dim.py();
        let d = self.dim("slice", dim)?;
        let size = self.view.shape()[d];
        let (s, e) = (int("slice", "start", start)?, int("slice", "end", end)?);
        let step = match step {
            Some(v) if int("slice", "step", v)? == 0 => {
                return Err(errors::bad_arg("slice", "step", v, "must not be 0"))
            }
            Some(v) => int("slice", "step", v)?,
            None => 1,
        };
        let cut = PySlice::new(py, s as isize, e as isize, step as isize);
        self.derive(py, ("slice", "start", start), |v| {
            v.pick(d, entry(cut.as_any(), size)?)
        })
    }

    /// select(dim, index)
    /// --
    ///
    /// Dim `dim` picked at `index`: an int (negative from the end), or a 1x1 int32/int64
    /// Tensor read when the op runs (the `.ap()`'s `scalar_offset`, scaled by the stride
    /// of the tensor dim the picked dim steps; that dim is its `indirect_dim`). On
    /// SBUF/PSUM picking a partition keeps dim 0 at size 1.
    fn select(&self, dim: &Bound<'_, PyAny>, index: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let py = dim.py();
        let d = self.dim("select", dim)?;
        let Ok(scalar) = index.cast::<Tensor>() else {
            if !is_int(index) {
                let rule = "must be an int or a 1x1 int32/int64 Tensor (a run-time pick)";
                return Err(errors::bad_arg("select", "index", index, rule));
            }
            int("select", "index", index)?;
            let size = self.view.shape()[d];
            return self.derive(py, ("select", "index", index), |v| {
                v.pick(d, entry(index, size)?)
            });
        };
        let base = self.tensor.get();
        base.same_core(scalar.get(), ("select", "index"))?;
        if self.offsets.scalar.is_some() {
            let rule = "the view already has a run-time select; an .ap() has one scalar_offset";
            return Err(errors::bad_arg("select", "index", index, rule));
        }
        let whole = self.tensor_shape();
        let seen = self.offsets.shape.clone().or_else(|| whole.clone());
        let seen = seen.unwrap_or_else(|| base.shape.clone());
        let mut picked = None;
        let mut ap = self.derive(py, ("select", "dim", dim), |v| {
            let (view, d, shape) = v.select_dynamic(d as i64, &seen)?;
            picked = Some((d, shape));
            Ok(view)
        })?;
        let (d, shape) = picked.unwrap_or_default();
        ap.offsets.scalar = Some(scalar.get().name.clone());
        ap.offsets.indirect_dim = Some(d);
        ap.offsets.shape = (Some(&shape) != whole.as_ref()).then_some(shape);
        Ok(ap)
    }

    /// view(dtype)
    /// --
    ///
    /// The view's bytes as elements of `dtype` (NKI's `view(dtype)`, a reinterpret
    /// cast): the last dim (contiguous) scaled by the size ratio, the other strides and
    /// the offset counted in the new elements; no data moves.
    fn view(&self, dtype: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let py = dtype.py();
        let to = convert::dtype(py, dtype)?;
        let from = self.dtype();
        let dynamic = self.offsets.vector.is_some() || self.offsets.scalar.is_some();
        if dynamic && from.size() != to.size() {
            let rule = "a view with run-time offsets keeps its element size (they count the tensor's elements)";
            return Err(errors::bad_arg("view", "dtype", dtype, rule));
        }
        let sizes = (from.size() as u64, to.size() as u64);
        let mut ap = self.derive(py, ("view", "dtype", dtype), |v| {
            v.reinterpret(sizes.0, sizes.1)
        })?;
        let tensor = self.tensor.get().dtype;
        ap.offsets.dtype = (to != tensor).then_some(to);
        // the reshape it is an `.ap()` of counts the new elements too
        if let Some(shape) = &ap.offsets.shape {
            let rule = format!("the tensor seen as {shape:?} {from} has no whole number of {to} elements in its last dim");
            let scaled = view::reinterpreted_shape(shape, sizes.0, sizes.1);
            ap.offsets.shape =
                Some(scaled.ok_or_else(|| errors::bad_arg("view", "dtype", dtype, &rule))?);
        }
        Ok(ap)
    }

    /// reinterpret_cast(dtype)
    /// --
    ///
    /// nki-library's `TensorView.reinterpret_cast`: `view(dtype)`.
    fn reinterpret_cast(&self, dtype: &Bound<'_, PyAny>) -> PyResult<Ap> {
        self.view(dtype)
    }

    /// permute(dims)
    /// --
    ///
    /// The dims in the order `dims` gives (`dims[j]` becomes dim `j`); on SBUF/PSUM dim 0
    /// stays first.
    fn permute(&self, dims: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let order = ints("permute", "dims", dims)?;
        self.derive(dims.py(), ("permute", "dims", dims), |v| v.permute(&order))
    }

    /// reshape(shape)
    /// --
    ///
    /// The same elements in the same row-major order as `shape` (one size may be -1),
    /// where strides can say it (each group of dims merged must be contiguous); on
    /// SBUF/PSUM `shape[0]` is the partition dim's size, kept.
    fn reshape(&self, shape: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let sizes = ints("reshape", "shape", shape)?;
        self.derive(shape.py(), ("reshape", "shape", shape), |v| {
            v.reshape(&sizes)
        })
    }

    /// reshape_dim(dim, shape)
    /// --
    ///
    /// Dim `dim` split into dims of `shape` (one size may be -1).
    fn reshape_dim(&self, dim: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let d = self.dim("reshape_dim", dim)? as i64;
        let sizes = ints("reshape_dim", "shape", shape)?;
        self.derive(shape.py(), ("reshape_dim", "shape", shape), |v| {
            v.reshape_dim(d, &sizes)
        })
    }

    /// flatten_dims(start_dim, end_dim)
    /// --
    ///
    /// Dims `start_dim` to `end_dim` (both included) merged into one; they must be
    /// contiguous.
    fn flatten_dims(
        &self,
        start_dim: &Bound<'_, PyAny>,
        end_dim: &Bound<'_, PyAny>,
    ) -> PyResult<Ap> {
        let s = self.dim_of("flatten_dims", "start_dim", start_dim)? as i64;
        let e = self.dim_of("flatten_dims", "end_dim", end_dim)? as i64;
        self.derive(
            start_dim.py(),
            ("flatten_dims", "start_dim", start_dim),
            |v| v.flatten_dims(s, e),
        )
    }

    /// expand_dim(dim)
    /// --
    ///
    /// A dim of size 1 inserted at `dim`.
    fn expand_dim(&self, dim: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let d = int("expand_dim", "dim", dim)?;
        self.derive(dim.py(), ("expand_dim", "dim", dim), |v| v.expand_dim(d))
    }

    /// squeeze_dim(dim)
    /// --
    ///
    /// Dim `dim`, of size 1, dropped.
    fn squeeze_dim(&self, dim: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let d = int("squeeze_dim", "dim", dim)?;
        self.derive(dim.py(), ("squeeze_dim", "dim", dim), |v| v.squeeze_dim(d))
    }

    /// broadcast(dim, size)
    /// --
    ///
    /// Dim `dim`, of size 1, repeated `size` times (stride 0).
    fn broadcast(&self, dim: &Bound<'_, PyAny>, size: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let d = self.dim("broadcast", dim)? as i64;
        let n = int("broadcast", "size", size)?;
        let n = u64::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| errors::bad_arg("broadcast", "size", size, "must be at least 1"))?;
        self.derive(dim.py(), ("broadcast", "dim", dim), |v| v.broadcast(d, n))
    }

    fn __repr__(&self) -> String {
        match self.table("repr") {
            Ok(table) => format!("Ap({})", Value::Object(table)),
            Err(_) => format!(
                "Ap({:?}, shape={:?}, offset={})",
                self.tensor.get().name,
                self.view.shape(),
                self.view.offset()
            ),
        }
    }
}

impl Ap {
    /// The dtype its elements are.
    fn dtype(&self) -> Dtype {
        self.offsets.dtype.unwrap_or(self.tensor.get().dtype)
    }

    /// The tensor's shape in elements of the view's dtype (its last dim scaled), if whole.
    fn tensor_shape(&self) -> Option<Vec<u64>> {
        let t = self.tensor.get();
        let (from, to) = (t.dtype.size() as u64, self.dtype().size() as u64);
        view::reinterpreted_shape(&t.shape, from, to)
    }

    /// `dim` (an int, negative from the end) as a dim of the view, for `call`.
    fn dim(&self, call: &str, dim: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.dim_of(call, "dim", dim)
    }

    /// [`Ap::dim`] for the argument `arg`.
    fn dim_of(&self, call: &str, arg: &str, dim: &Bound<'_, PyAny>) -> PyResult<usize> {
        let d = int(call, arg, dim)?;
        self.view
            .axis(d, 0)
            .map_err(|rule| errors::bad_arg(call, arg, dim, &rule))
    }
}

/// A slicing key (`t[...]`) as one entry per dim of a view of `shape`: ints and slices,
/// one `...` standing for as many whole dims as the others leave.
fn entries(key: &Bound<'_, PyAny>, shape: &[u64]) -> Result<Vec<Entry>, String> {
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let ellipsis = items.iter().position(|i| i.is(key.py().Ellipsis()));
    let whole = (shape.len() + 1).saturating_sub(items.len());
    let mut entries = Vec::with_capacity(shape.len());
    for (k, item) in items.iter().enumerate() {
        let size = |n: usize| shape.get(n).copied().unwrap_or(0);
        if Some(k) == ellipsis {
            for _ in 0..whole {
                let count = size(entries.len());
                entries.push(Entry::Range {
                    start: 0,
                    step: 1,
                    count,
                });
            }
            continue;
        }
        entries.push(entry(item, size(entries.len()))?);
    }
    Ok(entries)
}

/// One entry of a slice key for a dim of size `dim`: an int (negative from the end) or a
/// slice, resolved as numpy resolves it.
fn entry(item: &Bound<'_, PyAny>, dim: u64) -> Result<Entry, String> {
    if let Ok(s) = item.cast::<PySlice>() {
        let len = isize::try_from(dim).map_err(|_| format!("a dim of {dim} is too long"))?;
        let i = s.indices(len).map_err(|e| e.to_string())?;
        let step = i64::try_from(i.step).unwrap_or(1);
        return Ok(Entry::Range {
            start: i.start.max(0) as u64,
            step,
            count: i.slicelength as u64,
        });
    }
    if item.is_instance_of::<PyBool>() {
        return Err("a bool is no index (numpy reads it as a mask)".into());
    }
    let i: i64 = item
        .extract()
        .map_err(|_| "each entry must be an int, a slice or one ...".to_string())?;
    let at = if i < 0 { i + dim as i64 } else { i };
    match u64::try_from(at) {
        Ok(at) => Ok(Entry::Index(at)),
        Err(_) => Err(format!("index {i} is out of range for a dim of size {dim}")),
    }
}
