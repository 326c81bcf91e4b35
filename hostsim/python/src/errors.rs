//! The package's two exceptions and the mapping of a `hostsim` error onto them, by the
//! CLI's exit status (`hostsim::scenario::exit_code`).

use hostsim::Error;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    hostsim,
    InvalidInput,
    PyValueError,
    "Input that breaks a rule, caught before anything ran (the CLI's exit status 2); the message is the CLI's. No tensor has changed."
);

create_exception!(
    hostsim,
    Fault,
    PyRuntimeError,
    "An op that failed while it ran (the CLI's exit status 1): a hard out-of-bounds index, an index off the fabric, duplicate destinations under a compute op. Attributes: op (its kind), op_index, position, value, bound (None where the fault has none). No tensor has changed."
);

/// [`InvalidInput`] for an argument Python gave that is not of the kind `rule` says: the
/// call, the argument, its value and the rule (PyO3's own conversion error names none of
/// them).
pub fn bad_arg(call: &str, arg: &str, value: &Bound<'_, PyAny>, rule: &str) -> PyErr {
    let shown = value
        .repr()
        .map_or_else(|_| "?".to_string(), |r| r.to_string());
    InvalidInput::new_err(format!("{call}: {arg} = {shown}: {rule}"))
}

/// `value` (if given) as a `T`, else [`bad_arg`].
pub fn extract<'py, T: FromPyObjectOwned<'py>>(
    call: &str,
    arg: &str,
    value: Option<&Bound<'py, PyAny>>,
    rule: &str,
) -> PyResult<Option<T>> {
    value
        .map(|v| v.extract().map_err(|_| bad_arg(call, arg, v, rule)))
        .transpose()
}

/// `e` as the exception of its class, with `Fault`'s attributes.
pub fn raise(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    exception(py, e, message)
}

/// [`raise`] for an error of the Python call `call`, which ran as the scenario op `kind`:
/// where the two differ (`dma_compute` is a `dma_copy` with `compute`, `dma_transpose` a
/// `dma_gather_transpose`) the message says so first, since it names the op's fields.
pub fn raise_in(py: Python<'_>, e: Error, call: &str, kind: &str) -> PyErr {
    let message = match call == kind {
        true => e.to_string(),
        false => format!("{call} (run as the scenario's {kind}): {e}"),
    };
    exception(py, e, message)
}

/// The exception of `e`'s exit status, carrying `message`.
fn exception(py: Python<'_>, e: Error, message: String) -> PyErr {
    if hostsim::scenario::exit_code(&e) != 1 {
        return InvalidInput::new_err(message);
    }
    let err = Fault::new_err(message);
    match fault_attributes(err.value(py), &e) {
        Ok(()) => err,
        Err(failed) => failed,
    }
}

/// Sets `Fault`'s attributes on `value` from `e`.
fn fault_attributes(
    value: &Bound<'_, pyo3::exceptions::PyBaseException>,
    e: &Error,
) -> PyResult<()> {
    let (op, op_index) = match e {
        Error::ScenarioOpFault { index, op, .. } => (Some(*op), Some(*index)),
        _ => (None, None),
    };
    let at = e.index_fault();
    value.setattr("op", op)?;
    value.setattr("op_index", op_index)?;
    value.setattr("position", at.position)?;
    value.setattr("value", at.value)?;
    value.setattr("bound", at.bound)
}
