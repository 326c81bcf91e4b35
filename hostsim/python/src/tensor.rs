//! `Tensor` (one tensor of a `Core`) and `Ap` (NKI's `tensor.ap(...)` over one): what an
//! op argument names, turned into the scenario's tensor name or `.ap()` table.

use dma::{Dtype, Space};
use hostsim::nki::slicing::{self, Entry};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PySlice, PyTuple};
use serde_json::{json, Map, Value};

use crate::convert;
use crate::core::Core;
use crate::errors::{self, InvalidInput};

/// A tensor of a Core: its name, space, dtype and shape, and its contents on the Core's
/// fabric (`numpy()`). Made by `Core.hbm`, `Core.sbuf` and `Core.psum`.
#[pyclass(module = "hostsim", frozen)]
pub struct Tensor {
    pub core: Py<Core>,
    pub index: usize,
    #[pyo3(get)]
    pub name: String,
    pub space: Space,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// The fabric address of element 0 (what an `isa` instruction's address fields hold).
    #[pyo3(get)]
    pub addr: u64,
    /// Where element 0 is, as `hostsim isa decode` writes an address: `hbm:0x..`, or
    /// `sbuf:P:0x..` / `psum:P:0x..` (an ADDR4 field's value).
    #[pyo3(get)]
    pub location: String,
}

#[pymethods]
impl Tensor {
    /// The tensor's current contents as a numpy array of its dtype and shape (a copy;
    /// bf16 as `ml_dtypes.bfloat16`).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let bytes = self.core.borrow(py).session.read(self.index);
        let bytes = bytes.map_err(|e| errors::raise(py, e))?;
        convert::to_numpy(py, self.dtype, &self.shape, bytes)
    }

    /// `"hbm"`, `"sbuf"` or `"psum"`.
    #[getter]
    fn space(&self) -> &'static str {
        self.space.name()
    }

    /// The shape (on SBUF/PSUM `shape[0]` is the partition count).
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.shape.clone()
    }

    /// The numpy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::numpy_dtype(py, self.dtype)
    }

    /// NKI's slicing as the `.ap()` it stands for: `t[2:6, ::2]`, `t[i]`, `i_sb[:, t]`,
    /// `t[hostsim.ds(s, n), ..., -1]` (ints and slices, one per dim, one `...` or missing
    /// trailing dims taking the rest; numpy's meaning). On SBUF/PSUM the partition dim stays the
    /// first pair.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Ap> {
        let this = slf.get();
        let bad = |rule: String| errors::bad_arg("Tensor[...]", "key", key, &rule);
        let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![key.clone()],
        };
        // `...` stands for as many whole dims as the other entries leave
        let ellipsis = items.iter().position(|i| i.is(key.py().Ellipsis()));
        let whole = (this.shape.len() + 1).saturating_sub(items.len());
        let mut entries = Vec::with_capacity(this.shape.len());
        for (k, item) in items.iter().enumerate() {
            if Some(k) == ellipsis {
                for _ in 0..whole {
                    let dim = this.shape.get(entries.len()).copied().unwrap_or(0);
                    entries.push(Entry::Range {
                        start: 0,
                        step: 1,
                        count: dim,
                    });
                }
                continue;
            }
            let dim = this.shape.get(entries.len()).copied().unwrap_or(0);
            entries.push(slice_entry(item, dim).map_err(&bad)?);
        }
        let on_core = this.space != Space::Hbm;
        let (offset, dims) = slicing::pattern(&this.shape, on_core, &entries).map_err(&bad)?;
        let pattern: Vec<[i64; 2]> = dims.iter().map(|d| [d.step, i64::from(d.num)]).collect();
        Ok(Ap {
            tensor: slf.clone().unbind(),
            table: ap_table(&this.name, &pattern, offset),
        })
    }

    /// ap(pattern, offset=0, vector_offset=None, indirect_dim=None, scalar_offset=None)
    /// --
    ///
    /// NKI's access pattern over this tensor: `pattern` is 1 to 5 `[step, num]` pairs,
    /// outermost first, in elements (on SBUF/PSUM the first pair steps partitions); the
    /// element at position `(i0, ..)` is `offset + sum(i_k * step_k)`. `vector_offset`
    /// is an index tile (`[1, N]` or `(N, 1)`, uint32 or int32, in SBUF), or an `.ap()` of
    /// one picking N elements (`i.ap([[W, N], [1, 1]], offset=c)`: column `c` of an
    /// `(N, W)` tile), whose value replaces dim `indirect_dim`'s term (default dim 0) by
    /// `index * prod(shape[d+1:])`;
    /// `scalar_offset` a 1x1 int32 or int64 tensor in SBUF or HBM whose value times the
    /// same stride is added when the op runs (int64 only on an HBM tensor's pattern: on
    /// SBUF/PSUM the offset must be int32, as NKI says).
    #[pyo3(signature = (pattern, offset=None, vector_offset=None, indirect_dim=None, scalar_offset=None))]
    fn ap(
        slf: &Bound<'_, Self>,
        pattern: &Bound<'_, PyAny>,
        offset: Option<&Bound<'_, PyAny>>,
        vector_offset: Option<&Bound<'_, PyAny>>,
        indirect_dim: Option<&Bound<'_, PyAny>>,
        scalar_offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Ap> {
        let bad = |arg, value, rule| errors::bad_arg("ap", arg, value, rule);
        let pattern: Vec<[i64; 2]> = pattern.extract().map_err(|_| {
            bad(
                "pattern",
                pattern,
                "must be a list of 1 to 5 [step, num] pairs of integers, outermost first",
            )
        })?;
        let offset: u64 = offset.map_or(Ok(0), |o| {
            o.extract().map_err(|_| {
                bad(
                    "offset",
                    o,
                    "must be an element offset, an integer 0 ..= 2^64 - 1",
                )
            })
        })?;
        let indirect_dim = indirect_dim
            .map(|d| {
                d.extract::<u32>().map_err(|_| {
                    bad(
                        "indirect_dim",
                        d,
                        "must be a dim of the tensor, an integer from 0",
                    )
                })
            })
            .transpose()?;
        let this = slf.get();
        let mut table = ap_table(&this.name, &pattern, offset);
        if let Some(value) = vector_offset {
            table.insert("vector_offset".into(), this.index_view(value)?);
        }
        if let Some(value) = scalar_offset {
            let rule = "must be a Tensor (a 1x1 int32 or int64 tensor)";
            let t = value
                .cast::<Tensor>()
                .map_err(|_| bad("scalar_offset", value, rule))?;
            this.same_core(t.get(), "scalar_offset")?;
            table.insert("scalar_offset".into(), json!(t.get().name));
        }
        if let Some(d) = indirect_dim {
            table.insert("indirect_dim".into(), json!(d));
        }
        Ok(Ap {
            tensor: slf.clone().unbind(),
            table,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Tensor({:?}, {}, {}, {:?})",
            self.name,
            self.space.name(),
            self.dtype,
            self.shape
        )
    }
}

impl Tensor {
    /// A `vector_offset`: a whole index tile (its name) or an `.ap()` of one (its table;
    /// the scenario refuses one with offsets of its own).
    fn index_view(&self, value: &Bound<'_, PyAny>) -> PyResult<Value> {
        if let Ok(t) = value.cast::<Tensor>() {
            self.same_core(t.get(), "vector_offset")?;
            return Ok(json!(t.get().name));
        }
        let Ok(ap) = value.cast::<Ap>() else {
            return Err(errors::bad_arg(
                "ap",
                "vector_offset",
                value,
                "must be a Tensor (a [1, N] or (N, 1) index tile) or an .ap() of one (e.g. a column: idx.ap([[W, N], [1, 1]], offset=c))",
            ));
        };
        let ap = ap.get();
        self.same_core(ap.tensor.get(), "vector_offset")?;
        Ok(Value::Object(ap.table.clone()))
    }

    /// Refuses `other` (given as `field`) unless it belongs to this tensor's Core.
    pub fn same_core(&self, other: &Tensor, field: &str) -> PyResult<()> {
        match self.core.is(&other.core) {
            true => Ok(()),
            false => Err(InvalidInput::new_err(format!(
                "ap: {field} = {:?}: it belongs to another Core than {:?}, the tensor of this .ap()",
                other.name, self.name
            ))),
        }
    }
}

/// The scenario's `.ap()` table `{ tensor, ap, offset }` (no offsets yet).
fn ap_table(tensor: &str, pattern: &[[i64; 2]], offset: u64) -> Map<String, Value> {
    let mut table = Map::new();
    table.insert("tensor".into(), json!(tensor));
    table.insert("ap".into(), json!(pattern));
    table.insert("offset".into(), json!(offset));
    table
}

/// One entry of a slice key for a dim of size `dim`: an int (negative from the end) or a
/// slice, resolved as numpy resolves it.
fn slice_entry(item: &Bound<'_, PyAny>, dim: u64) -> Result<Entry, String> {
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

/// The error for a tensor of another Core.
pub fn foreign(field: &str, name: &str) -> PyErr {
    InvalidInput::new_err(format!(
        "{field} = {name:?}: the tensor belongs to another Core"
    ))
}

/// An access pattern over a tensor (`Tensor.ap(...)`), a `dma_copy` side.
#[pyclass(module = "hostsim", frozen)]
pub struct Ap {
    pub tensor: Py<Tensor>,
    /// The scenario's `.ap()` table.
    pub table: Map<String, Value>,
}

#[pymethods]
impl Ap {
    /// The tensor it walks.
    #[getter]
    fn tensor(&self, py: Python<'_>) -> Py<Tensor> {
        self.tensor.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!("Ap({})", Value::Object(self.table.clone()))
    }
}
