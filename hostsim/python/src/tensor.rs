//! `Tensor`: one tensor of a `Core`, what an op argument names (turned into the
//! scenario's tensor name), and the start of its views ([`Ap`]: slicing, NKI's view
//! methods, `.ap()`).

use dma::{Dtype, Space};
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use serde_json::{json, Value};

use crate::ap::Ap;

/// The methods a Tensor answers as its whole view (an [`Ap`]) does: `.ap()` and NKI's
/// view methods.
const VIEW_METHODS: [&str; 12] = [
    "ap",
    "view",
    "reinterpret_cast",
    "slice",
    "select",
    "permute",
    "reshape",
    "reshape_dim",
    "flatten_dims",
    "expand_dim",
    "squeeze_dim",
    "broadcast",
];
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
        Ap::whole(slf).__getitem__(key)
    }

    /// Its attributes and the view methods it answers ([`VIEW_METHODS`]).
    fn __dir__(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        let mut names: Vec<String> = slf.get_type().dir()?.extract()?;
        names.extend(VIEW_METHODS.iter().map(|m| m.to_string()));
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// NKI's `.ap()` and view methods (`t.permute(...)`, `t.reshape(...)`, ...
    /// [`VIEW_METHODS`]): the whole tensor's [`Ap`]'s.
    fn __getattr__<'py>(slf: &Bound<'py, Self>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        if !VIEW_METHODS.contains(&name) {
            return Err(PyAttributeError::new_err(format!(
                "'Tensor' object has no attribute '{name}'"
            )));
        }
        Bound::new(slf.py(), Ap::whole(slf))?
            .into_any()
            .getattr(name)
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
    pub fn index_view(&self, value: &Bound<'_, PyAny>) -> PyResult<Value> {
        if let Ok(t) = value.cast::<Tensor>() {
            self.same_core(t.get(), ("ap", "vector_offset"))?;
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
        self.same_core(ap.tensor.get(), ("ap", "vector_offset"))?;
        Ok(Value::Object(ap.table("ap: vector_offset")?))
    }

    /// Refuses `other` (given as `field` of `call`) unless it belongs to this tensor's Core.
    pub fn same_core(&self, other: &Tensor, (call, field): (&str, &str)) -> PyResult<()> {
        match self.core.is(&other.core) {
            true => Ok(()),
            false => Err(InvalidInput::new_err(format!(
                "{call}: {field} = {:?}: it is a tensor of another Core (this view is of {:?} of this Core)",
                other.name, self.name
            ))),
        }
    }
}

/// The error for a tensor of another Core.
pub fn foreign(field: &str, name: &str) -> PyErr {
    InvalidInput::new_err(format!(
        "{field} = {name:?}: the tensor belongs to another Core"
    ))
}
