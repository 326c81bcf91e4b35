//! Values between Python and the runtime: numpy arrays in (their bytes read once through
//! the `numpy` crate, no intermediate copy) and out (a byte vector handed to numpy
//! without a copy, then viewed as the tensor's dtype and shape; bf16 as
//! `ml_dtypes.bfloat16`), and JSON-shaped values both ways through Python's `json`.

use dma::Dtype;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use serde::Serialize;

use crate::errors::InvalidInput;

/// numpy's names of the fabric dtypes (`dtype.name`), in [`Dtype`] order of the table.
const NAMES: [(&str, Dtype); 10] = [
    ("uint8", Dtype::U8),
    ("int8", Dtype::I8),
    ("uint16", Dtype::U16),
    ("int16", Dtype::I16),
    ("uint32", Dtype::U32),
    ("int32", Dtype::I32),
    ("int64", Dtype::I64),
    ("float16", Dtype::F16),
    ("bfloat16", Dtype::Bf16),
    ("float32", Dtype::F32),
];

/// The fabric dtype of a numpy dtype (anything `numpy.dtype()` takes, in numpy's meaning:
/// `"i8"` is int64), else of a name numpy does not know: `"bfloat16"` (with no need of
/// ml_dtypes) or a scenario's (`"bf16"`, `"f32"`).
pub fn dtype(py: Python<'_>, d: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    const RULE: &str = "the fabric holds uint8 int8 uint16 int16 uint32 int32 int64 float16 bfloat16 (ml_dtypes) float32";
    let np = py.import("numpy")?;
    let name: String = match np.getattr("dtype")?.call1((d,)) {
        Ok(numpy) => numpy.getattr("name")?.extract()?,
        Err(_) => {
            let named = d.extract::<String>().ok().and_then(|name| {
                let found = NAMES.iter().find(|(n, _)| *n == name).map(|&(_, t)| t);
                found.or_else(|| Dtype::from_name(&name).ok())
            });
            return named.ok_or_else(|| {
                InvalidInput::new_err(format!(
                    "dtype {}: {RULE}",
                    d.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                ))
            });
        }
    };
    let found = NAMES.iter().find(|(n, _)| *n == name);
    found
        .map(|&(_, t)| t)
        .ok_or_else(|| InvalidInput::new_err(format!("dtype {name}: {RULE}")))
}

/// The numpy dtype of `d` (little-endian; bf16 is `ml_dtypes.bfloat16`).
pub fn numpy_dtype<'py>(py: Python<'py>, d: Dtype) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let spec = match d {
        Dtype::Bf16 => py.import("ml_dtypes")?.getattr("bfloat16")?,
        _ => hostsim::npy::storage_descr(d).into_pyobject(py)?.into_any(),
    };
    np.getattr("dtype")?.call1((spec,))
}

/// An array's fabric dtype, shape and bytes (row-major, little-endian).
pub fn from_numpy(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
) -> PyResult<(Dtype, Vec<u64>, Vec<u8>)> {
    let np = py.import("numpy")?;
    let array = np.getattr("asarray")?.call1((array,))?;
    let d = dtype(py, &array.getattr("dtype")?)?;
    // (numpy's ascontiguousarray below would make a 0-d array a [1] one)
    if array.getattr("ndim")?.extract::<usize>()? == 0 {
        return Err(InvalidInput::new_err(format!(
            "array {}: a 0-d array is no tensor (a tensor has at least one dim): give np.array([x]) or reshape it",
            array.repr()?
        )));
    }
    // C order and little-endian: a no-op (no copy) for the usual array
    let array = np
        .getattr("ascontiguousarray")?
        .call1((array, numpy_dtype(py, d)?))?;
    let shape: Vec<u64> = array.getattr("shape")?.extract()?;
    let flat = array
        .call_method1("reshape", (-1,))?
        .call_method1("view", ("u1",))?;
    let bytes: PyReadonlyArray1<'_, u8> = flat.extract()?;
    let bytes = bytes
        .as_slice()
        .map_err(|e| InvalidInput::new_err(e.to_string()))?;
    Ok((d, shape, bytes.to_vec()))
}

/// `bytes` as a numpy array of `d` and `shape` (the vector becomes the array's buffer).
pub fn to_numpy<'py>(
    py: Python<'py>,
    d: Dtype,
    shape: &[u64],
    bytes: Vec<u8>,
) -> PyResult<Bound<'py, PyAny>> {
    let flat = PyArray1::from_vec(py, bytes);
    let typed = flat.call_method1("view", (numpy_dtype(py, d)?,))?;
    typed.call_method1("reshape", (shape.to_vec(),))
}

/// A serializable value (a report, an explanation) as Python dicts and lists.
pub fn to_python<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| InvalidInput::new_err(format!("cannot be given to Python: {e}")))?;
    py.import("json")?.getattr("loads")?.call1((text,))
}

/// A JSON-shaped Python value (dicts, lists, tuples, strings, numbers, None).
pub fn from_python(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = py
        .import("json")?
        .getattr("dumps")?
        .call1((value,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| InvalidInput::new_err(e.to_string()))
}
