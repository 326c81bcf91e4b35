//! The lints of `hostsim explain`, each with a stable code: `small-descriptors`,
//! `duplicate-indices`, `oob-indices`, `queue-imbalance`, `partition-split`, `overlap`,
//! `nki-compute`, `negative-scalar`.
//! Each reads what the run already found ([`Facts`]): the descriptors, the DGE stages, the queues'
//! timing, the runtime's skips and warnings, the op's error.

use dma::{ComputeOp, Descriptor};
use serde::Serialize;

use super::{QueueUse, RequestStages, SideStages};
use crate::core_state::IndexSide;
use crate::error::{Error, ErrorKind};
use crate::runtime::RunReport;

/// Descriptors under this many bytes are overhead-bound (the public guidance).
pub const SMALL_BYTES: u32 = 512;

/// The busiest queue above this multiple of the mean is an imbalance.
pub const IMBALANCE: f64 = 1.5;

/// Positions named in a message at most.
const NAMED: usize = 8;

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lint {
    /// The stable code.
    pub code: &'static str,
    /// What is wrong, naming positions and values.
    pub message: String,
    /// What would fix it, where one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// What the lints read about one op.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The op's kind (`dma_copy`, ...).
    pub kind: &'a str,
    pub descriptors: &'a [&'a Descriptor],
    /// The minimal descriptor count (`OpExplained::minimal_descriptors`).
    pub minimal: u64,
    pub stages: &'a [RequestStages],
    pub queues: &'a [QueueUse],
    /// The run's queue count.
    pub engine_queues: usize,
    /// The op's report, if it ran.
    pub report: Option<&'a RunReport>,
    /// Its error, if it failed.
    pub error: Option<&'a Error>,
    /// Whether the source's and the destination's index tiles are signed (i32): their
    /// skipped values are shown as such (-1, not 4294967295).
    pub signed: [bool; 2],
    /// The values of its scalar offsets as it ran.
    pub scalars: &'a [Scalar],
}

/// A scalar offset's value as an op ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scalar {
    /// `src` or `dst`.
    pub side: &'static str,
    /// The 1x1 tensor it is read from.
    pub tensor: String,
    pub value: i64,
    /// The elements one unit of it moves the walk (`stride_d` of the indirect dim).
    pub stride: u64,
}

/// Every lint that fires, in code order.
pub fn all(f: &Facts) -> Vec<Lint> {
    [
        small_descriptors(f),
        duplicate_indices(f),
        oob_indices(f),
        queue_imbalance(f),
        partition_split(f),
        overlap(f),
        nki_compute(f),
        negative_scalar(f),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Every side of every request, named.
fn sides<'a>(f: &Facts<'a>) -> impl Iterator<Item = (&'static str, &'a SideStages)> {
    f.stages
        .iter()
        .flat_map(|s| [("source", &s.src), ("destination", &s.dst)])
}

/// `small-descriptors`: most descriptors under [`SMALL_BYTES`].
fn small_descriptors(f: &Facts) -> Option<Lint> {
    let n = f.descriptors.len();
    let small = f
        .descriptors
        .iter()
        .filter(|d| d.len() < SMALL_BYTES)
        .count();
    if small * 2 <= n {
        return None;
    }
    let mut sizes: Vec<u32> = f.descriptors.iter().map(|d| d.len()).collect();
    sizes.sort_unstable();
    let median = sizes[n / 2];
    let (why, fix) = match overlap_byte(f) {
        // the walk is cut where it would read what it writes, not by its shape
        Some(_) => (
            "the op reads bytes it also writes, so its walk is cut into descriptors that run one after another, each reading what the ones before it wrote".to_string(),
            format!("with the destination in a separate tensor the same walk needs {} descriptors", f.minimal),
        ),
        None => {
            // each reason once: an op split into alike requests repeats them
            let mut why: Vec<String> = Vec::new();
            for reason in sides(f).filter_map(|(name, s)| short_runs(name, s)) {
                if !why.contains(&reason) {
                    why.push(reason);
                }
            }
            (why.join("; "), small_fix(f, n))
        }
    };
    let message =
        format!("{small} of {n} descriptors move under {SMALL_BYTES} B (median {median} B): {why}");
    Some(Lint {
        code: "small-descriptors",
        message,
        suggestion: Some(fix),
    })
}

/// Why a side's runs are short: its innermost reshaped dim.
fn short_runs(name: &str, s: &SideStages) -> Option<String> {
    let k = s.after.num_elem.len().checked_sub(1)?;
    let (count, step) = (s.after.num_elem[k], s.step_bytes[k]);
    let elem = s.elem_size;
    if s.shared_indirection_dim == Some(k) {
        return Some(format!(
            "the {name}'s indirection dim {k} is innermost: one {elem} B element per index"
        ));
    }
    if step != i64::from(elem) {
        return Some(format!(
            "the {name}'s innermost dim {k} steps {step} B over {count} elements, so each run is one {elem} B element"
        ));
    }
    let run = count * u64::from(elem);
    (run < u64::from(SMALL_BYTES)).then(|| {
        format!(
            "the {name}'s contiguous runs are its innermost dim {k}: {count} x {elem} B = {run} B"
        )
    })
}

fn small_fix(f: &Facts, n: usize) -> String {
    if f.minimal < n as u64 {
        return format!(
            "walking the same elements in address order needs {} descriptors instead of {n}: reorder the access pattern's dims so the innermost is contiguous on both sides",
            f.minimal
        );
    }
    let strided = sides(f).any(|(_, s)| {
        s.step_bytes
            .last()
            .is_some_and(|&st| st != i64::from(s.elem_size))
    });
    match strided {
        true => "one side is contiguous where the other is strided (a transpose): transpose on chip (nc_transpose, or dma_transpose for 2-byte dtypes) and copy contiguous rows".into(),
        false => "move more contiguous bytes per descriptor: wider rows per index, or merge neighbouring rows into one".into(),
    }
}

/// `duplicate-indices`: destination indices that repeat under `unique_indices = true`,
/// as the run found them (a plain copy's warning, a compute op's error).
fn duplicate_indices(f: &Facts) -> Option<Lint> {
    let warned = f
        .report
        .into_iter()
        .flat_map(|r| &r.steps)
        .flat_map(|s| &s.warnings);
    let mut found: Vec<String> = warned
        .filter(|w| w.contains("indices repeat"))
        .cloned()
        .collect();
    if let Some(e) = f
        .error
        .filter(|e| e.kind() == ErrorKind::DuplicateDestination)
    {
        found.push(format!("{e} (the op fails)"));
    }
    (!found.is_empty()).then(|| Lint {
        code: "duplicate-indices",
        message: found.join("; "),
        suggestion: Some("set unique_indices = false to accumulate them in index order, or deduplicate the indices first".into()),
    })
}

/// `oob-indices`: indices out of bounds, per policy (skipped under `skip`, failing under
/// `error`).
fn oob_indices(f: &Facts) -> Option<Lint> {
    if let Some(e) = f.error.filter(|e| oob_kind(e.kind())) {
        // what the failure says: only an index past its bound fails for oob = error (an
        // index that passes it may still leave the fabric, or a scalar push it out)
        let (why, fix) = match e.root() {
            Error::IndexOutOfBounds { .. } | Error::ApIndexOutOfBounds { .. } => (
                " (oob = error)",
                "pad with an in-bounds row, or set oob = \"skip\" to skip such indices",
            ),
            Error::ApScalarOffset { index: Some(_), .. } => (
                " (the scalar offset takes the walk out of its tensor, whatever the oob policy)",
                "keep the scalar offset within the rows the in-bounds indices leave free",
            ),
            Error::ApScalarOffset { .. } => (
                " (the scalar offset takes the walk out of its tensor; oob = error)",
                "keep the scalar offset within the tensor, or set oob = \"skip\" to skip the copy when it is not",
            ),
            Error::ApIndexLeaves { .. } => (
                " (an index below its bound whose block of positions runs past the tensor, whatever the oob policy)",
                "keep each index at most the tensor's size along the dim less the block's extent",
            ),
            _ => (
                " (an index within its bound addresses a row off the fabric, whatever the oob policy)",
                "lower the bound, or move the tensor so every in-bounds row lies on the fabric",
            ),
        };
        return Some(Lint {
            code: "oob-indices",
            message: format!("the op fails{why}: {e}"),
            suggestion: Some(fix.into()),
        });
    }
    let skipped: Vec<String> = f
        .report
        .into_iter()
        .flat_map(|r| &r.steps)
        .flat_map(|s| &s.outcome.skipped)
        .map(|s| {
            let signed = f.signed[usize::from(s.side == IndexSide::Dst)];
            let value = match signed {
                true => i64::from(s.value as i32),
                false => i64::from(s.value),
            };
            format!("{} {value} at position {}", s.side, s.position)
        })
        .collect();
    let offsets: Vec<String> = f
        .report
        .into_iter()
        .flat_map(|r| &r.steps)
        .flat_map(|s| &s.outcome.skipped_offsets)
        .map(|s| format!("{} scalar_offset {}", s.side, s.value))
        .collect();
    if !offsets.is_empty() {
        return Some(Lint {
            code: "oob-indices",
            message: format!(
                "{} scalar offsets out of bounds skipped (oob = skip: each copy moved nothing): {}",
                offsets.len(),
                offsets.join(", ")
            ),
            suggestion: None,
        });
    }
    if skipped.is_empty() {
        return None;
    }
    let more = skipped.len().saturating_sub(NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Some(Lint {
        code: "oob-indices",
        message: format!(
            "{} indices out of bounds skipped (oob = skip, they move nothing): {}{tail}",
            skipped.len(),
            skipped[..skipped.len().min(NAMED)].join(", ")
        ),
        suggestion: None,
    })
}

fn oob_kind(k: ErrorKind) -> bool {
    matches!(
        k,
        ErrorKind::IndexOutOfBounds(_) | ErrorKind::IndexAddress(_)
    )
}

/// `queue-imbalance`: the busiest queue above [`IMBALANCE`] times the mean over the run's
/// queues, when there are enough descriptors to fill every queue.
fn queue_imbalance(f: &Facts) -> Option<Lint> {
    if f.descriptors.len() < f.engine_queues || f.engine_queues < 2 {
        return None;
    }
    let busy: u64 = f.queues.iter().map(|q| q.busy_ns).sum();
    let mean = busy as f64 / f.engine_queues as f64;
    let top = f.queues.iter().max_by_key(|q| q.busy_ns)?;
    (top.busy_ns as f64 > IMBALANCE * mean).then(|| Lint {
        code: "queue-imbalance",
        message: format!(
            "queue {} is busy {} ns ({} descriptors), {:.1}x the mean {:.0} ns over {} queues",
            top.queue,
            top.busy_ns,
            top.descriptors,
            top.busy_ns as f64 / mean,
            mean,
            f.engine_queues
        ),
        suggestion: Some("writes to one destination byte with a compute op stay in one queue: spread the destinations, or split the op so the queues get equal shares".into()),
    })
}

/// `partition-split`: an SBUF/PSUM side whose walk steps partitions innermost, element by
/// element.
fn partition_split(f: &Facts) -> Option<Lint> {
    let (name, s) = sides(f).find(|(_, s)| s.partition_innermost)?;
    let count = s.after.num_elem.last().copied().unwrap_or(0);
    Some(Lint {
        code: "partition-split",
        message: format!(
            "the {name} walks partitions innermost: {count} partitions get one {} B element each per run",
            s.elem_size
        ),
        suggestion: Some("put the partition dim outermost in the access pattern so each partition gets a contiguous run".into()),
    })
}

/// `overlap`: the op reads bytes it also writes (a copy within one tensor, its two walks
/// meeting). Its elements then move one after another in walk order, each seeing the
/// writes before it: numpy's copy-then-assign differs.
fn overlap(f: &Facts) -> Option<Lint> {
    let at = overlap_byte(f)?;
    Some(Lint {
        code: "overlap",
        message: format!(
            "the op reads bytes it also writes (one at {at:#x}): its elements move one after another in walk order, each seeing the writes before it, unlike numpy's copy-then-assign"
        ),
        suggestion: Some("copy through a separate tensor (or a tile) for snapshot semantics".into()),
    })
}

/// A byte the op's descriptors both read and write, if any.
fn overlap_byte(f: &Facts) -> Option<u64> {
    let ranges = |pick: fn(&Descriptor) -> Option<(dma::FabricAddr, u64)>| {
        let mut v: Vec<(u64, u64)> = f
            .descriptors
            .iter()
            .filter_map(|d| pick(d))
            .map(|(a, n)| (a.raw(), a.raw().saturating_add(n)))
            .collect();
        v.sort_unstable();
        v
    };
    let reads = ranges(Descriptor::source_range);
    let writes = ranges(|d| Some(d.dest_range()));
    first_common_byte(&reads, &writes)
}

/// A byte inside both a range of `a` and one of `b` (each sorted `[lo, hi)` ranges), if
/// any: the sweep drops a range only once it ends before the other list's current one.
pub(super) fn first_common_byte(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<u64> {
    let (mut i, mut j) = (0, 0);
    while let (Some(&(alo, ahi)), Some(&(blo, bhi))) = (a.get(i), b.get(j)) {
        let (lo, hi) = (alo.max(blo), ahi.min(bhi));
        if lo < hi {
            return Some(lo);
        }
        // the range that ends first meets nothing further in the other list
        if ahi <= bhi {
            i += 1;
        } else {
            j += 1;
        }
    }
    None
}

/// The ops NKI writes as a `dma_copy` or `dma_compute`, whose compute op is NKI's
/// `dst_rmw_op` / `reduce_op` (`embedding_update` and raw `isa` instructions carry the
/// hardware's own).
const NKI_COPIES: [&str; 3] = ["dma_copy", "dma_gather", "dma_scatter"];

/// A compute op other than add on an op NKI writes as a `dma_copy`: the DMA engine has
/// it, NKI's front end takes only add today.
fn nki_compute(f: &Facts) -> Option<Lint> {
    if !NKI_COPIES.contains(&f.kind) {
        return None;
    }
    let other = |op: &ComputeOp| !matches!(op, ComputeOp::None | ComputeOp::Add);
    let op = f
        .descriptors
        .iter()
        .filter_map(|d| d.op().compute_op())
        .find(other)?;
    let name = op.name();
    Some(Lint {
        code: "nki-compute",
        message: format!(
            "compute {name}: NKI's front end takes only add today (dma_copy's dst_rmw_op, dma_compute's reduce_op); this runs {name} as the DMA engine's compute op"
        ),
        suggestion: Some("keep to add for a kernel the NKI compiler must accept".into()),
    })
}

/// A scalar offset whose value is negative: NKI checks it against the tensor, not the
/// picked dim, so the walk starts before its offset (in the element before the view,
/// another batch's or row's), where a negative index of a vector offset is out of bounds.
fn negative_scalar(f: &Facts) -> Option<Lint> {
    let s = f.scalars.iter().find(|s| s.value < 0)?;
    let (side, tensor, value) = (s.side, &s.tensor, s.value);
    let back = u128::from(value.unsigned_abs()) * u128::from(s.stride);
    let plural = if back == 1 { "" } else { "s" };
    Some(Lint {
        code: "negative-scalar",
        message: format!(
            "{side} scalar_offset {tensor} = {value} moves the walk back {back} element{plural} ({} x the dim's stride {}) from its offset: NKI checks the value against the tensor, not the picked dim (a negative vector_offset index would be out of bounds)",
            value.unsigned_abs(),
            s.stride
        ),
        suggestion: Some(format!(
            "check the value {tensor} holds at run time: a position before the view is most often a bug"
        )),
    })
}
