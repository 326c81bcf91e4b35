//! # `hostsim._native`: the extension module of the Python package `hostsim`
//!
//! PyO3 bindings over the runtime the `hostsim` CLI runs, with no behaviour of their own:
//!
//! - [`core::Core`] is a [`hostsim::scenario::session::Session`]: tensors added from numpy
//!   arrays, and each NKI-named op turned into the scenario's `[[op]]` table (NKI's
//!   argument names mapped to the schema's fields) and run at once as `hostsim run`
//!   runs it;
//! - [`tensor::Tensor`] is one of its tensors and [`ap::Ap`] an access pattern over one
//!   (a slice, an NKI view such as `t.permute(...)`, or `t.ap(...)`): a `dma_copy`
//!   side's `.ap()` table;
//! - [`convert`] moves arrays in and out through the `numpy` crate and JSON-shaped
//!   values (reports, explanations) through Python's `json`;
//! - [`errors`] raises `InvalidInput` (a `ValueError`: the CLI's exit status 2) or
//!   `Fault` (a `RuntimeError`: exit status 1) with the CLI's message;
//! - [`run`] runs a scenario file through the CLI's code path.
//!
//! The package's `__init__.py` re-exports this module; `__init__.pyi` types it.

pub mod ap;
pub mod convert;
pub mod core;
pub mod errors;
pub mod tensor;

use std::path::PathBuf;

use hostsim::scenario::{self, commands::Settings, Report};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// run(path, generation=None, mechanism=None, queues=None)
/// --
///
/// Runs the scenario file at `path` as `hostsim run` does (the generation, mechanism
/// and queue count as its `--generation`, `--mechanism` and `--queues` override them)
/// and returns `(arrays, report)`: every tensor's final contents by name, and the
/// report.json structure as a dict.
#[pyfunction]
#[pyo3(signature = (path, generation=None, mechanism=None, queues=None))]
pub fn run<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    generation: Option<&Bound<'py, PyAny>>,
    mechanism: Option<&Bound<'py, PyAny>>,
    queues: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyAny>)> {
    let path_rule = "must be the scenario file's path (a str or os.PathLike)";
    let path: PathBuf = errors::extract("run", "path", Some(path), path_rule)?.unwrap_or_default();
    let name_rule = "must be a str";
    let generation = errors::extract("run", "generation", generation, name_rule)?;
    let mechanism = errors::extract("run", "mechanism", mechanism, name_rule)?;
    let queues_rule = "must be the DMA queues to use, 1 ..= 16";
    let queues = errors::extract("run", "queues", queues, queues_rule)?;
    let settings = Settings {
        generation,
        mechanism,
        queues,
        sanitize: false,
    };
    let raise = |e| errors::raise(py, e);
    let over = settings.overrides().map_err(raise)?;
    let p = scenario::prepare(&scenario::load(&path).map_err(raise)?, over).map_err(raise)?;
    let exec = p.execute().map_err(raise)?;
    let arrays = PyDict::new(py);
    for t in &p.tensors {
        let bytes = t.read(&exec.fabric).map_err(raise)?;
        arrays.set_item(&t.name, convert::to_numpy(py, t.dtype, &t.shape, bytes)?)?;
    }
    let report = convert::to_python(py, &Report::of_run(&p, &exec))?;
    Ok((arrays, report))
}

/// The module `hostsim._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<core::Core>()?;
    m.add_class::<tensor::Tensor>()?;
    m.add_class::<ap::Ap>()?;
    m.add("InvalidInput", py.get_type::<errors::InvalidInput>())?;
    m.add("Fault", py.get_type::<errors::Fault>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    Ok(())
}
