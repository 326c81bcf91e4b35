//! `Core`: one simulated core (a [`Session`]) with NKI's op names and arguments. Each op
//! method maps its arguments onto the scenario's `[[op]]` table (NKI name -> schema field,
//! a `Tensor` to its name, an `Ap` to its `.ap()` table), parses it with the scenario's
//! own schema ([`scenario::parse_op`]) and runs it at once ([`Session::run`]).

use std::path::PathBuf;

use dma::{Generation, Space};
use hostsim::runtime::Mechanism;
use hostsim::scenario;
use hostsim::scenario::session::{NewTensor, Session};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::{json, Map, Value};

use crate::ap::Ap;
use crate::convert;
use crate::errors::{self, InvalidInput};
use crate::tensor::{foreign, Tensor};

/// Core(generation="cayman", mechanism="auto", queues=16)
/// --
///
/// One simulated core: its fabric (HBM, SBUF, PSUM), its tensors and the ops run on it,
/// in call order, by the runtime `hostsim run` uses. `generation` is sunda | cayman |
/// mariana | maverick, v2..v5 or trn1..trn3; `mechanism` auto (the generation's route) |
/// pool | dge | reference; `queues` the DMA queues, 1..16.
#[pyclass(module = "hostsim")]
pub struct Core {
    pub session: Session,
}

/// How a tensor is made: from an array, or zeros of a shape and dtype.
struct Made<'py> {
    space: Space,
    array: Option<Bound<'py, PyAny>>,
    shape: Option<Bound<'py, PyAny>>,
    dtype: Option<Bound<'py, PyAny>>,
    partition: Option<Bound<'py, PyAny>>,
    name: Option<Bound<'py, PyAny>>,
}

impl<'py> Made<'py> {
    fn new(
        space: Space,
        array: Option<Bound<'py, PyAny>>,
        shape: Option<Bound<'py, PyAny>>,
        dtype: Option<Bound<'py, PyAny>>,
    ) -> Self {
        Made {
            space,
            array,
            shape,
            dtype,
            partition: None,
            name: None,
        }
    }

    /// With its first partition and name.
    fn at(self, partition: Option<Bound<'py, PyAny>>, name: Option<&Bound<'py, PyAny>>) -> Self {
        Made {
            partition,
            name: name.cloned(),
            ..self
        }
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (generation=None, mechanism=None, queues=None), text_signature = "(generation=\"cayman\", mechanism=\"auto\", queues=16)")]
    fn new(
        py: Python<'_>,
        generation: Option<&Bound<'_, PyAny>>,
        mechanism: Option<&Bound<'_, PyAny>>,
        queues: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rule = "must be the DMA queues to use, 1 ..= 16";
        let queues: usize = errors::extract("Core", "queues", queues, rule)?.unwrap_or(16);
        let names = |arg, value, rule| errors::extract::<String>("Core", arg, value, rule);
        let generation = names(
            "generation",
            generation,
            "must be a generation's name, such as \"cayman\"",
        )?;
        let mechanism = names(
            "mechanism",
            mechanism,
            "must be auto, pool, dge or reference",
        )?;
        let generation = generation.unwrap_or_else(|| "cayman".into());
        let mechanism = mechanism.unwrap_or_else(|| "auto".into());
        let (generation, mechanism) = (generation.as_str(), mechanism.as_str());
        let g = Generation::from_name(generation).map_err(|e| errors::raise(py, e.into()))?;
        let m = Mechanism::from_name(mechanism).ok_or_else(|| {
            InvalidInput::new_err(format!(
                "mechanism {mechanism:?}: must be auto, pool, dge or reference"
            ))
        })?;
        let session = Session::new(g, m, queues).map_err(|e| errors::raise(py, e))?;
        Ok(Core { session })
    }

    /// The generation's name.
    #[getter]
    fn generation(&self) -> &'static str {
        self.session.prepared().generation.name()
    }

    /// The mechanism's name.
    #[getter]
    fn mechanism(&self) -> &'static str {
        self.session.prepared().mechanism.name()
    }

    /// The DMA queue count.
    #[getter]
    fn queues(&self) -> usize {
        self.session.prepared().queues
    }

    /// hbm(array=None, *, shape=None, dtype=None, name=None)
    /// --
    ///
    /// A tensor in HBM (one row-major block): a copy of `array`, or zeros of `shape` and
    /// `dtype` (default float32). `name` (default `t<N>`) names its `.npy` file in
    /// `save_scenario`.
    #[pyo3(signature = (array=None, *, shape=None, dtype=None, name=None))]
    fn hbm(
        slf: &Bound<'_, Self>,
        array: Option<Bound<'_, PyAny>>,
        shape: Option<Bound<'_, PyAny>>,
        dtype: Option<Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        let made = Made::new(Space::Hbm, array, shape, dtype);
        add_tensor(slf, made.at(None, name))
    }

    /// sbuf(array=None, partition=None, *, shape=None, dtype=None, name=None)
    /// --
    ///
    /// A tensor in SBUF, partition-major: `shape[0]` partitions from `partition`
    /// (default 0), the free dims row-major inside each. A copy of `array`, or zeros of
    /// `shape` and `dtype` (default float32).
    #[pyo3(signature = (array=None, partition=None, *, shape=None, dtype=None, name=None))]
    fn sbuf(
        slf: &Bound<'_, Self>,
        array: Option<Bound<'_, PyAny>>,
        partition: Option<Bound<'_, PyAny>>,
        shape: Option<Bound<'_, PyAny>>,
        dtype: Option<Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        let made = Made::new(Space::Sbuf, array, shape, dtype);
        add_tensor(slf, made.at(partition, name))
    }

    /// psum(array=None, partition=None, *, shape=None, dtype=None, name=None)
    /// --
    ///
    /// A tensor in PSUM, laid out as `sbuf` lays one out.
    #[pyo3(signature = (array=None, partition=None, *, shape=None, dtype=None, name=None))]
    fn psum(
        slf: &Bound<'_, Self>,
        array: Option<Bound<'_, PyAny>>,
        partition: Option<Bound<'_, PyAny>>,
        shape: Option<Bound<'_, PyAny>>,
        dtype: Option<Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        let made = Made::new(Space::Psum, array, shape, dtype);
        add_tensor(slf, made.at(partition, name))
    }

    /// dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, unique_indices=None, dge_mode=None, name=None)
    /// --
    ///
    /// NKI `dma_copy`: element k of `src`'s walk is copied to element k of `dst`'s (each a
    /// Tensor, walked row by row, or a `Tensor.ap(...)`), cast through float32 when the
    /// dtypes differ. `dst_rmw_op` (None, or add | multiply | max | min, by name or as
    /// `np.add`, `np.multiply`, `np.maximum`, `np.minimum`) makes it `dst = op(dst, src)`
    /// in float32. `oob_mode` ("error" or "skip"; default error) applies to a side with a
    /// `vector_offset` or a `scalar_offset`; `unique_indices` (default True) to a `dst` with
    /// a `vector_offset`. `dge_mode` ("unknown", "swdge", "hwdge" or "none"; NKI's) says
    /// who makes the descriptors: the report's `dge`, the DGE time, and its rules (hwdge:
    /// no gather or scatter, not on sunda; none: no run-time address).
    #[pyo3(signature = (dst, src, dst_rmw_op=None, oob_mode=None, unique_indices=None, dge_mode=None, name=None))]
    #[allow(clippy::too_many_arguments)] // NKI's signature, keyword for keyword
    fn dma_copy(
        slf: &Bound<'_, Self>,
        dst: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
        dst_rmw_op: Option<&Bound<'_, PyAny>>,
        oob_mode: Option<&Bound<'_, PyAny>>,
        unique_indices: Option<&Bound<'_, PyAny>>,
        dge_mode: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let compute = dst_rmw_op
            .map(|op| op_name("dma_copy", "dst_rmw_op", op))
            .transpose()?;
        let options = Options::new("dma_copy", [oob_mode, unique_indices, dge_mode, name])?;
        copy(slf, "dma_copy", [dst, src], compute, options)
    }

    /// dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=None, oob_mode=None, dge_mode=None, name=None)
    /// --
    ///
    /// NKI `dma_compute` in its read-modify-write form: one of the two `srcs` is `dst`
    /// itself (the same Tensor or an equal `.ap()`), and `dst = reduce_op(dst, other)`
    /// in float32, as `dma_copy(dst, other, dst_rmw_op=reduce_op)`. `scales` must be
    /// None or one 1.0 per source (NKI takes a scale per source; the model, 1.0).
    #[pyo3(signature = (dst, srcs, reduce_op, scales=None, unique_indices=None, oob_mode=None, dge_mode=None, name=None))]
    #[allow(clippy::too_many_arguments)] // NKI's signature, keyword for keyword
    fn dma_compute(
        slf: &Bound<'_, Self>,
        dst: &Bound<'_, PyAny>,
        srcs: &Bound<'_, PyAny>,
        reduce_op: &Bound<'_, PyAny>,
        scales: Option<&Bound<'_, PyAny>>,
        unique_indices: Option<&Bound<'_, PyAny>>,
        oob_mode: Option<&Bound<'_, PyAny>>,
        dge_mode: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let bad = |arg, value, rule| errors::bad_arg("dma_compute", arg, value, rule);
        let list_rule = "must be a list of two sources, one of them dst itself";
        let srcs: Vec<Bound<'_, PyAny>> = match srcs.is_instance_of::<pyo3::types::PyString>() {
            true => return Err(bad("srcs", srcs, list_rule)),
            false => srcs.extract().map_err(|_| bad("srcs", srcs, list_rule))?,
        };
        let scale_rule = "must be None or one 1.0 per source (NKI: a scale per entry of srcs; the model takes 1.0)";
        if let Some(value) = scales {
            let scales: Vec<f64> = value
                .extract()
                .map_err(|_| bad("scales", value, scale_rule))?;
            if scales.len() != srcs.len() || scales.iter().any(|&x| x != 1.0) {
                return Err(bad("scales", value, scale_rule));
            }
        }
        let options = Options::new("dma_compute", [oob_mode, unique_indices, dge_mode, name])?;
        let dst_side = side(slf, "dst", dst)?;
        let other = match srcs.as_slice() {
            [a, b] if side(slf, "dma_compute: srcs[0]", a)? == dst_side => b,
            [a, b] if side(slf, "dma_compute: srcs[1]", b)? == dst_side => a,
            _ => return Err(InvalidInput::new_err(
                "dma_compute: srcs must be two, one of them dst itself (dst = reduce_op(dst, src), NKI's read-modify-write); for dst = reduce_op(a, b) with dst apart, dma_copy a into dst first, then dma_compute(dst, [dst, b]): the same result where dst's dtype holds every value of a's, though two passes of the DMA in the estimate",
            )),
        };
        let op = op_name("dma_compute", "reduce_op", reduce_op)?;
        if op == "none" {
            return Err(errors::bad_arg(
                "dma_compute",
                "reduce_op",
                reduce_op,
                "must reduce (np.add, np.multiply, np.maximum or np.minimum): dma_copy copies",
            ));
        }
        copy(slf, "dma_compute", [dst, other], Some(op), options)
    }

    /// dma_transpose(dst, src, axes=None, oob_mode=None)
    /// --
    ///
    /// NKI's `dma_transpose`, `dst = src.transpose(axes)` with `axes` (1, 0), (2, 1, 0) or
    /// (3, 1, 2, 0) (by default the one of `src`'s rank).
    ///
    /// Direct: `src` and `dst` are Tensors or `.ap()`s (slices) without offsets, `dst`'s
    /// shape `src`'s permuted; no `oob_mode`.
    ///
    /// Indirect (trn2 and later): `src` is `t.ap([[D, N], [1, D]], vector_offset=idx)` (N
    /// whole rows of an HBM tensor `t`, `D = prod(t.shape[1:])`, picked by the index tile),
    /// and `dst` gets them transposed: `[D, N]` with (1, 0), `[K, J, N]` for a `[., J, K]`
    /// `t` with (2, 1, 0), `[K, A, B, N]` for a `[., A, B, K]` `t` (A or B 1) with (3, 1,
    /// 2, 0). `oob_mode` "error" (default) or "skip". `name` labels the op.
    #[pyo3(signature = (dst, src, axes=None, oob_mode=None, name=None))]
    fn dma_transpose(
        slf: &Bound<'_, Self>,
        dst: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
        axes: Option<&Bound<'_, PyAny>>,
        oob_mode: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let Options { oob, name, .. } =
            Options::new("dma_transpose", [oob_mode, None, None, name])?;
        let axes = axes
            .map(|a| {
                a.extract::<Vec<u32>>().map_err(|_| {
                    errors::bad_arg(
                        "dma_transpose",
                        "axes",
                        a,
                        "must be a permutation such as (1, 0), (2, 1, 0) or (3, 1, 2, 0)",
                    )
                })
            })
            .transpose()?;
        let indexed = src.cast::<Ap>().is_ok_and(|ap| ap.get().indexed());
        if !indexed {
            if let (Some("skip"), Some(given)) = (oob, oob_mode) {
                let rule = "\"skip\" applies to an indirect dma_transpose (src with a vector_offset); a direct one has no index to skip";
                return Err(errors::bad_arg("dma_transpose", "oob_mode", given, rule));
            }
            let fields = vec![
                ("src", Some(side(slf, "src", src)?)),
                ("dst", Some(side(slf, "dst", dst)?)),
                ("axes", axes.map(|a| json!(a))),
                ("name", name),
            ];
            return run_op(slf, ("dma_transpose", "dma_transpose"), fields);
        }
        let src = src.cast::<Ap>()?;
        if dst.cast::<Ap>().is_ok() {
            let rule =
                "an indirect dma_transpose writes a whole Tensor (not a view or an .ap() of one)";
            return Err(errors::bad_arg("dma_transpose", "dst", dst, rule));
        }
        let (table, shape, index) = transposed_rows(slf, src.get())?;
        let fields = vec![
            ("src", Some(table)),
            ("src_shape", shape),
            ("index", Some(index)),
            ("dst", Some(tensor_name(slf, "dst", dst)?)),
            ("oob", oob.map(Value::from)),
            ("axes", axes.map(|a| json!(a))),
            ("name", name),
        ];
        run_op(slf, ("dma_transpose", "dma_gather_transpose"), fields)
    }

    /// nc_n_gather(dst, data, indices, name=None)
    /// --
    ///
    /// NKI `nc_n_gather` (GATHER 0x68): within each partition, `dst[p, m] = data[p,
    /// indices[p, m]]`, an index past the row reading 0. `indices` is uint32.
    #[pyo3(signature = (dst, data, indices, name=None))]
    fn nc_n_gather(
        slf: &Bound<'_, Self>,
        dst: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        indices: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let fields = vec![
            ("data", Some(tensor_name(slf, "data", data)?)),
            ("index", Some(tensor_name(slf, "indices", indices)?)),
            ("dst", Some(tensor_name(slf, "dst", dst)?)),
            ("name", label("nc_n_gather", name)?),
        ];
        run_op(slf, ("nc_n_gather", "nc_n_gather"), fields)
    }

    /// local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None)
    /// --
    ///
    /// NKI `local_gather` (INDIRECT_COPY 0xe7): per core of 16 partitions, runs of
    /// `num_elem_per_idx` (1, 2, 4, .. 32) elements of `src_buffer` at the element offsets
    /// `index` (uint16, read partition-first), the first `num_valid_indices` of them
    /// (default all); a run past the buffer's end stays zero.
    #[pyo3(signature = (dst, src_buffer, index, num_elem_per_idx=None, num_valid_indices=None, name=None))]
    fn local_gather(
        slf: &Bound<'_, Self>,
        dst: &Bound<'_, PyAny>,
        src_buffer: &Bound<'_, PyAny>,
        index: &Bound<'_, PyAny>,
        num_elem_per_idx: Option<&Bound<'_, PyAny>>,
        num_valid_indices: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let count = |arg, value, rule| errors::extract::<u32>("local_gather", arg, value, rule);
        let per_rule = "must be 1, 2, 4, 8, 16 or 32";
        let num_elem_per_idx = count("num_elem_per_idx", num_elem_per_idx, per_rule)?.unwrap_or(1);
        let valid_rule = "must be a count of indices, an integer from 1";
        let num_valid_indices = count("num_valid_indices", num_valid_indices, valid_rule)?;
        let fields = vec![
            ("src", Some(tensor_name(slf, "src_buffer", src_buffer)?)),
            ("index", Some(tensor_name(slf, "index", index)?)),
            ("dst", Some(tensor_name(slf, "dst", dst)?)),
            ("num_elem_per_idx", Some(json!(num_elem_per_idx))),
            ("num_valid_indices", num_valid_indices.map(Value::from)),
            ("name", label("local_gather", name)?),
        ];
        run_op(slf, ("local_gather", "local_gather"), fields)
    }

    /// embedding_update(table, index, data, reduce="add", name=None)
    /// --
    ///
    /// `table[index[i], :] = reduce(table[index[i], :], data[i, :])` in index order, in
    /// float32; indices at or past the table's rows are skipped. `reduce` is add | max |
    /// min (or `np.add`, `np.maximum`, `np.minimum`).
    #[pyo3(signature = (table, index, data, reduce=None, name=None))]
    fn embedding_update(
        slf: &Bound<'_, Self>,
        table: &Bound<'_, PyAny>,
        index: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        reduce: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let reduce = reduce.map_or(Ok("add".to_string()), |r| {
            op_name("embedding_update", "reduce", r)
        })?;
        let fields = vec![
            ("table", Some(tensor_name(slf, "table", table)?)),
            ("index", Some(tensor_name(slf, "index", index)?)),
            ("data", Some(tensor_name(slf, "data", data)?)),
            ("reduce", Some(json!(reduce))),
            ("name", label("embedding_update", name)?),
        ];
        run_op(slf, ("embedding_update", "embedding_update"), fields)
    }

    /// isa(hex_or_fields, bounds=None, shapes=None, name=None)
    /// --
    ///
    /// One raw 64-byte instruction: 128 hex digits, or a dict of its fields by name (what
    /// `hostsim isa decode --format json` prints). `bounds`: bound registers to set, as
    /// `[{"reg": 0, "bound": 1000}]` or `[(0, 1000)]`; `shapes`: DMA_INDIRECT shape
    /// registers, as `[{"reg": 8, "xyzw": [16, 4, 2, 1]}]` or `[(8, (16, 4, 2, 1))]`.
    #[pyo3(signature = (hex_or_fields, bounds=None, shapes=None, name=None))]
    fn isa(
        slf: &Bound<'_, Self>,
        hex_or_fields: &Bound<'_, PyAny>,
        bounds: Option<&Bound<'_, PyAny>>,
        shapes: Option<&Bound<'_, PyAny>>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let form = match hex_or_fields.extract::<String>() {
            Ok(_) => "hex",
            Err(_) => "fields",
        };
        let json =
            |v: Option<&Bound<'_, PyAny>>| v.map(|v| convert::from_python(py, v)).transpose();
        let fields = vec![
            (form, json(Some(hex_or_fields))?),
            ("bounds", json(bounds)?.map(|b| registers(b, "bound"))),
            ("shapes", json(shapes)?.map(|s| registers(s, "xyzw"))),
            ("name", label("isa", name)?),
        ];
        run_op(slf, ("isa", "isa"), fields)
    }

    /// The report.json structure of the ops run so far, as a dict: per op its mechanism,
    /// DGE, instructions, descriptors, bytes, skipped indices and estimated ns, and the
    /// total.
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::to_python(py, &self.session.report())
    }

    /// descriptors()
    /// --
    ///
    /// Every descriptor the DGE route ran so far, as a numpy structured array with the
    /// fields op_index, replay, queue, position, src, dst (fabric addresses), bytes, op
    /// (copy | add | .. | fill), dtype (`src->dst` for a cast) and flags (as `hostsim
    /// inspect` shows them). Empty when the ops ran on the POOL or reference route.
    fn descriptors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rows: Vec<_> = self
            .session
            .descriptors()
            .map(|d| {
                let x = d.descriptor;
                let text = (
                    x.op().name(),
                    hostsim::inspect::dtype_text(x),
                    hostsim::inspect::flags_text(x),
                );
                (
                    d.op,
                    d.replay,
                    d.queue,
                    d.position,
                    x.src().0,
                    x.dst().0,
                    x.len(),
                    text,
                )
            })
            .collect();
        let width = |f: fn(&(&str, String, String)) -> usize| {
            rows.iter().map(|r| f(&r.7)).max().unwrap_or(1).max(1)
        };
        let dtype = vec![
            ("op_index", "<u4".to_string()),
            ("replay", "<u4".into()),
            ("queue", "u1".into()),
            ("position", "<u4".into()),
            ("src", "<u8".into()),
            ("dst", "<u8".into()),
            ("bytes", "<u4".into()),
            ("op", format!("<U{}", width(|t| t.0.len()))),
            ("dtype", format!("<U{}", width(|t| t.1.len()))),
            ("flags", format!("<U{}", width(|t| t.2.len()))),
        ];
        let tuples = rows
            .into_iter()
            .map(|(o, r, q, p, s, d, b, (op, dt, fl))| (o, r, q, p, s, d, b, op, dt, fl));
        let list = PyList::new(py, tuples)?;
        let np = py.import("numpy")?;
        np.getattr("array")?.call1((list, dtype))
    }

    /// explain()
    /// --
    ///
    /// The `hostsim explain --json` object of the ops run so far, as a dict: each op run
    /// again on the DGE route from the initial tensors, with its lowering, DGE stages,
    /// descriptors, estimate and lints.
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let e = self.session.explain().map_err(|e| errors::raise(py, e))?;
        convert::to_python(py, &e)
    }

    /// save_scenario(dir)
    /// --
    ///
    /// Writes `dir/scenario.toml`, a `.npy` file per tensor made from an array and
    /// `dir/report.json` (this session's report): `hostsim run dir/scenario.toml
    /// --queues Q` (Q this Core's queues) runs the session again to the same tensors.
    fn save_scenario(&self, py: Python<'_>, dir: PathBuf) -> PyResult<()> {
        self.session.save(&dir).map_err(|e| errors::raise(py, e))
    }

    fn __repr__(&self) -> String {
        let p = self.session.prepared();
        format!(
            "Core({:?}, mechanism={:?}, queues={}): {} tensors, {} ops",
            p.generation.name(),
            p.mechanism.name(),
            p.queues,
            p.tensors.len(),
            p.ops.len()
        )
    }
}

/// Adds the tensor `m` describes to the Core.
fn add_tensor(slf: &Bound<'_, Core>, m: Made<'_>) -> PyResult<Tensor> {
    let py = slf.py();
    let call = m.space.name();
    let shape_rule = "must be a sequence of dims, each 1 ..= 2^64 - 1";
    let shape: Option<Vec<u64>> = errors::extract(call, "shape", m.shape.as_ref(), shape_rule)?;
    let name_rule = "must be a str, the tensor's name";
    let name: Option<String> = errors::extract(call, "name", m.name.as_ref(), name_rule)?;
    let part_rule = "must be the first partition, 0 ..= 127";
    let partition: Option<u32> =
        errors::extract(call, "partition", m.partition.as_ref(), part_rule)?;
    let (dtype, shape, data) = match (m.array, shape, m.dtype) {
        (Some(a), None, None) => {
            let (d, shape, bytes) = convert::from_numpy(py, &a)?;
            (d, shape, Some(bytes))
        }
        (None, Some(shape), d) => {
            let d = d.map_or(Ok(dma::Dtype::F32), |d| convert::dtype(py, &d))?;
            (d, shape, None)
        }
        _ => {
            return Err(InvalidInput::new_err(
                "give an array, or a shape (and a dtype, default float32)",
            ))
        }
    };
    let mut core = slf.borrow_mut();
    let name = name.unwrap_or_else(|| free_name(&core.session));
    let t = NewTensor {
        name: name.clone(),
        space: m.space,
        dtype,
        shape: shape.clone(),
        partition,
        data,
    };
    let placed = core.session.add_tensor(t);
    let placed = placed.map_err(|e| errors::raise(py, e))?;
    let map = dma::AddressMap::new(core.session.prepared().generation);
    let addr = placed.start(&map).map_err(|e| errors::raise(py, e))?;
    Ok(Tensor {
        core: slf.clone().unbind(),
        index: placed.index,
        name,
        space: m.space,
        dtype,
        shape,
        addr: addr.0,
        location: hostsim::inspect::located(&map, addr),
    })
}

/// The first `t<N>` no tensor of `session` is named, from N = its tensor count.
fn free_name(session: &Session) -> String {
    let n = session.prepared().tensors.len();
    (n..)
        .map(|k| format!("t{k}"))
        .find(|name| session.tensor(name).is_none())
        .unwrap_or_default()
}

/// The op `kind` with the given fields (those with a value) parsed with the scenario
/// schema and run on the Core.
fn run_op(
    slf: &Bound<'_, Core>,
    (call, kind): (&str, &str),
    fields: Vec<(&str, Option<Value>)>,
) -> PyResult<()> {
    let py = slf.py();
    let mut op = Map::new();
    op.insert("op".into(), json!(kind));
    for (field, value) in fields {
        if let Some(v) = value {
            op.insert(field.into(), v);
        }
    }
    let mut core = slf.borrow_mut();
    let index = core.session.prepared().ops.len();
    let raise = |e| errors::raise_in(py, e, call, kind);
    let op = scenario::parse_op(index, Value::Object(op)).map_err(raise)?;
    core.session.run(op).map_err(raise)?;
    Ok(())
}

/// `value` as field `field`'s tensor name: a Tensor of this Core.
fn tensor_name(slf: &Bound<'_, Core>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let t = value
        .cast::<Tensor>()
        .map_err(|_| InvalidInput::new_err(format!("{field}: must be a Tensor of this Core")))?;
    let t = t.get();
    match t.core.is(slf) {
        true => Ok(json!(t.name)),
        false => Err(foreign(field, &t.name)),
    }
}

/// `value` as a `dma_copy` side: a Tensor's name or an Ap's table, of this Core.
fn side(slf: &Bound<'_, Core>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let Ok(ap) = value.cast::<Ap>() else {
        return tensor_name(slf, field, value);
    };
    let ap = ap.get();
    let t = ap.tensor.get();
    if !t.core.is(slf) {
        return Err(foreign(field, &t.name));
    }
    Ok(Value::Object(ap.table(field)?))
}

/// An indirect `dma_transpose` source: whole rows of its tensor picked by its
/// `vector_offset`, of the tensor or of a reshape of it (`t.reshape(s).ap(...)`); returns
/// the tensor's name, the reshape's shape if any, and the index tile's.
fn transposed_rows(slf: &Bound<'_, Core>, ap: &Ap) -> PyResult<(Value, Option<Value>, Value)> {
    let t = ap.tensor.get();
    if !t.core.is(slf) {
        return Err(foreign("src", &t.name));
    }
    let table = ap.table("dma_transpose: src")?;
    if table.contains_key("dtype") {
        return Err(InvalidInput::new_err(format!(
            "dma_transpose: src = {}: an indirect transpose moves the tensor's own dtype (no view(dtype))",
            Value::Object(table.clone())
        )));
    }
    let shape: Vec<u64> = match table.get("shape") {
        Some(s) => serde_json::from_value(s.clone()).unwrap_or_default(),
        None => t.shape.clone(),
    };
    let row: u64 = shape.iter().skip(1).product();
    let (Some(index), Some(pattern)) = (table.get("vector_offset"), table.get("ap")) else {
        return Err(InvalidInput::new_err(format!(
            "dma_transpose: src = {}: must have a vector_offset (the rows to transpose)",
            Value::Object(table.clone())
        )));
    };
    let whole_rows = pattern.get(1) == Some(&json!([1, row]))
        && pattern.get(0).and_then(|p| p.get(0)) == Some(&json!(row))
        && pattern.as_array().map(Vec::len) == Some(2)
        && table.get("offset") == Some(&json!(0))
        && !table.contains_key("scalar_offset")
        && table.get("indirect_dim").is_none_or(|d| d == &json!(0));
    if !whole_rows {
        return Err(InvalidInput::new_err(format!(
            "dma_transpose: src = {}: must be {}.ap([[{row}, N], [1, {row}]], vector_offset=idx) (whole rows picked by the index tile)",
            Value::Object(table.clone()),
            t.name
        )));
    }
    if !index.is_string() {
        return Err(InvalidInput::new_err(format!(
            "dma_transpose: src = {}: its vector_offset must be a whole index tile ([1, N] or (N, 1)); an .ap() of one is not supported by the transpose",
            Value::Object(table.clone())
        )));
    }
    Ok((json!(t.name), table.get("shape").cloned(), index.clone()))
}

/// A `dma_copy` of `src` into `dst`, reducing by the compute op `compute` if given (the
/// body of `dma_copy` and `dma_compute`).
fn copy(
    slf: &Bound<'_, Core>,
    call: &str,
    [dst, src]: [&Bound<'_, PyAny>; 2],
    compute: Option<String>,
    options: Options,
) -> PyResult<()> {
    let fields = vec![
        ("src", Some(side(slf, "src", src)?)),
        ("dst", Some(side(slf, "dst", dst)?)),
        ("compute", compute.map(Value::from)),
        ("oob", options.oob.map(Value::from)),
        ("unique_indices", options.unique_indices.map(Value::from)),
        ("dge", options.dge.map(Value::from)),
        ("name", options.name),
    ];
    run_op(slf, (call, "dma_copy"), fields)
}

/// The `oob_mode`, `unique_indices`, `dge_mode` and `name` of a DMA call, checked.
struct Options {
    oob: Option<&'static str>,
    unique_indices: Option<bool>,
    dge: Option<&'static str>,
    name: Option<Value>,
}

impl Options {
    fn new(
        call: &str,
        [oob_mode, unique_indices, dge_mode, name]: [Option<&Bound<'_, PyAny>>; 4],
    ) -> PyResult<Options> {
        let oob = oob_mode
            .map(|v| match v.extract::<String>().as_deref() {
                Ok("error") => Ok("error"),
                Ok("skip") => Ok("skip"),
                _ => Err(errors::bad_arg(
                    call,
                    "oob_mode",
                    v,
                    "must be \"error\" or \"skip\"",
                )),
            })
            .transpose()?;
        let rule = "must be True or False";
        let unique_indices = errors::extract(call, "unique_indices", unique_indices, rule)?;
        const DGE: [&str; 4] = ["unknown", "swdge", "hwdge", "none"];
        let dge = dge_mode
            .map(|v| {
                let name = v.extract::<String>().ok();
                let known = DGE.iter().find(|&&d| Some(d) == name.as_deref());
                let rule =
                    "must be \"unknown\", \"swdge\", \"hwdge\" or \"none\" (hostsim.dge_mode.*)";
                known
                    .copied()
                    .ok_or_else(|| errors::bad_arg(call, "dge_mode", v, rule))
            })
            .transpose()?;
        Ok(Options {
            oob,
            unique_indices,
            dge,
            name: label(call, name)?,
        })
    }
}

/// An op's `name=` (NKI's instruction name): a str, the scenario op's `name`.
fn label(call: &str, name: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Value>> {
    let rule = "must be a str (the op's label in the report and explain)";
    Ok(errors::extract::<String>(call, "name", name, rule)?.map(Value::from))
}

/// A compute op's name (`arg` of `call`, in errors): a string (the scenario's names, or
/// numpy's `maximum` and `minimum`), or one of the numpy functions `np.add`,
/// `np.multiply`, `np.maximum` and `np.minimum` (by their `__name__`; a function of
/// another name, such as the reduction `max`, is refused).
fn op_name(call: &str, arg: &str, op: &Bound<'_, PyAny>) -> PyResult<String> {
    const FUNCTIONS: [(&str, &str); 4] = [
        ("add", "add"),
        ("multiply", "multiply"),
        ("maximum", "max"),
        ("minimum", "min"),
    ];
    let rule = "must be np.add, np.multiply, np.maximum or np.minimum, or a name: \"add\", \"multiply\", \"max\" or \"min\" (\"none\" copies)";
    if let Ok(name) = op.extract::<String>() {
        let known = FUNCTIONS.iter().find(|(f, n)| *f == name || *n == name);
        return match known {
            Some((_, n)) => Ok(n.to_string()),
            None if name == "none" => Ok(name),
            None => Err(errors::bad_arg(call, arg, op, rule)),
        };
    }
    let name = op.getattr("__name__").and_then(|n| n.extract::<String>());
    let known = name
        .ok()
        .and_then(|n| FUNCTIONS.iter().find(|(f, _)| *f == n));
    match known {
        Some((_, n)) if op.is_callable() => Ok(n.to_string()),
        _ => Err(errors::bad_arg(call, arg, op, rule)),
    }
}

/// An `isa` op's register settings as the scenario's tables: each `(reg, value)` pair
/// becomes `{"reg": reg, value_key: value}` (a scenario takes named tables only); a dict,
/// or anything else, is passed on as it is for the scenario's own checks.
fn registers(list: serde_json::Value, value_key: &str) -> serde_json::Value {
    match list {
        serde_json::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                serde_json::Value::Array(pair) if pair.len() == 2 => {
                    json!({ "reg": pair[0], value_key: pair[1] })
                }
                other => other,
            })
            .collect(),
        other => other,
    }
}
