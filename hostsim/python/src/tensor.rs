//! `Tensor`: one tensor of a `Core`, what an op argument names (turned into the
//! scenario's tensor name), and the start of its views ([`Ap`]: slicing, NKI's view
//! methods, `.ap()`).

use dma::{Dtype, Space};
use hostsim::nki::view::View;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use serde_json::{json, Value};

use crate::ap::{Ap, Offsets};

/// The view methods a Tensor answers as its whole view (an [`Ap`]) does.
const VIEW_METHODS: [&str; 9] = [
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
        let rule = "must be a list of 1 to 5 [step, num] pairs of integers, outermost first";
        let pairs: Vec<[i64; 2]> = pattern
            .extract()
            .map_err(|_| bad("pattern", pattern, rule))?;
        let pairs: Vec<(i64, u64)> = pairs
            .iter()
            .map(|&[step, num]| u64::try_from(num).map(|num| (step, num)))
            .collect::<Result<_, _>>()
            .map_err(|_| bad("pattern", pattern, "each num must be at least 1"))?;
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
        let view = View::of_pattern(&pairs, offset, this.space != Space::Hbm)
            .map_err(|rule| errors::bad_arg("ap", "pattern", pattern, &rule))?;
        let mut offsets = Offsets {
            indirect_dim,
            ..Offsets::default()
        };
        if let Some(value) = vector_offset {
            offsets.vector = Some(this.index_view(value)?);
        }
        if let Some(value) = scalar_offset {
            let rule = "must be a Tensor (a 1x1 int32 or int64 tensor)";
            let t = value
                .cast::<Tensor>()
                .map_err(|_| bad("scalar_offset", value, rule))?;
            this.same_core(t.get(), "scalar_offset")?;
            offsets.scalar = Some(t.get().name.clone());
        }
        Ok(Ap::new(slf, view, offsets))
    }

    /// NKI's view methods (`t.permute(...)`, `t.reshape(...)`, ... [`VIEW_METHODS`]): the
    /// whole tensor's [`Ap`]'s.
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
        Ok(Value::Object(ap.table()?))
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

/// The error for a tensor of another Core.
pub fn foreign(field: &str, name: &str) -> PyErr {
    InvalidInput::new_err(format!(
        "{field} = {name:?}: the tensor belongs to another Core"
    ))
}
