//! The `dge` target: descriptor generation for indirect row gathers, checked against a
//! closed form of its own.
//!
//! A case is a table of `rows` rows of `cols` elements (in HBM, at times ending on HBM's
//! last byte), `n` u32 indices (edge-biased around the bound) and a [`Request`] that
//! gathers row `idx[i]` into destination row `i` under one OOB policy (hard error, soft
//! skip, silent skip, fill) with a bound or none, any compute op, any eng_mask. The
//! closed form walks the positions in order and gives the first failing position (a
//! hard-OOB index, or a row off the fabric), or the skipped positions, the notification,
//! the expected destination bytes and the fewest descriptors the moves need (adjacent
//! moves merge when both sides continue inside one region, split at 64 KiB). Then:
//!
//! - no descriptor reads or writes outside the fabric;
//! - the count is that minimum, the skips and notification are the policy's;
//! - replaying the queues (the plain loop) gives the closed form's memory;
//! - an expected failure is the same error at the same position, and more than 4096
//!   indices, or none, are refused.

use dge::indirection::{Indirection, OobPolicy};
use dge::{AccessPattern, Generated, Kind, Request};
use dma::{apply, execute_sequential, ComputeOp, Dtype, Fabric, FabricAddr, Generation};

use crate::fuzz::rng::Rng;

/// One `dge` case.
#[derive(Clone, Debug)]
pub struct DgeCase {
    /// The fabric holding the table, the destination and the indices.
    pub fabric: Fabric,
    /// The request.
    pub request: Request,
    /// The index values (also on the fabric).
    pub indices: Vec<u32>,
    /// Bytes per row.
    pub row_bytes: u64,
}

/// Where the indices live (SBUF partition 0, offset 0).
fn index_addr(f: &Fabric) -> FabricAddr {
    f.map()
        .fabric_addr(dma::Location {
            space: dma::Space::Sbuf,
            partition: 0,
            offset: 0,
        })
        .unwrap_or(FabricAddr(dma::addr::SBUF_BASE))
}

/// The largest descriptor.
const MAX_RUN: u64 = 65536;

/// Bytes of the destination's junk pattern (a prime: no row size is a multiple of it).
const JUNK_PERIOD: usize = 4093;

/// The case drawn from `rng`.
pub fn case(mut rng: Rng, generation: Option<Generation>) -> DgeCase {
    let generation = generation.unwrap_or_else(|| rng.pick(&Generation::ALL));
    let mut fabric = Fabric::new(generation);
    let dtype = rng.pick(&[Dtype::U8, Dtype::U16, Dtype::F32, Dtype::Bf16, Dtype::I32]);
    let es = dtype.size() as u64;
    let cols = rng.pick(&[1u32, 3, 16, 64, 4096]);
    let row_bytes = u64::from(cols) * es;
    let rows = rng.range(1, 24);
    let n = rng.edge_count(40, 4096);
    let table_len = u64::from(rows) * row_bytes;
    let table = match rng.chance(25) {
        true => generation.hbm_bytes() - table_len,
        false => 0x1000,
    };
    let data = rng.edge_data(dtype, (table_len / es) as usize);
    let _ = fabric.write(FabricAddr(table), &data);
    let bound = match rng.below(6) {
        0 => None,
        1 => Some(u64::from(rows) + 2),
        _ => Some(u64::from(rows)),
    };
    let limit = bound.map_or(rows, |b| b as u32);
    let indices = rng.edge_indices(n as usize, 0, limit, u32::MAX);
    let idx_at = index_addr(&fabric);
    let packed: Vec<u8> = indices.iter().flat_map(|v| v.to_le_bytes()).collect();
    let _ = fabric.write(idx_at, &packed);
    let dst_at = 0x4000_0000u64;
    // Junk under the destination (what a skip leaves, what a compute op meets): a random
    // period of a prime number of bytes, so that no two of the first JUNK_PERIOD rows
    // hold the same junk; none under a count the DGE must refuse (nothing reads it).
    if (1..=4096).contains(&n) {
        let period = rng.bytes(JUNK_PERIOD);
        let _ = fabric.fill(FabricAddr(dst_at), u64::from(n) * row_bytes, &period);
    }
    let mask = (u64::MAX >> (64 - 8 * es)) as u32;
    let policy = match rng.below(4) {
        0 => OobPolicy::HardError,
        1 => OobPolicy::SoftSkip,
        2 => OobPolicy::SoftSkipSilent,
        _ => OobPolicy::Fill {
            value: rng.next_u32() & mask,
        },
    };
    let dims = [(i64::from(cols), n), (1, cols)];
    let src = AccessPattern::new(FabricAddr(table), es as u32, &dims);
    let dst = AccessPattern::new(FabricAddr(dst_at), es as u32, &dims);
    let mut request = Request::new(Kind::Indirect, src, dst, dtype);
    request.op = rng.pick(&ComputeOp::ALL);
    request.eng_mask = rng.pick(&[0xffff, 1, 0x8001, 0x00f0]);
    request.src_indirection = Some(Indirection {
        dim: 0,
        indices: idx_at,
        step: row_bytes as i32,
        bound,
        policy,
    });
    DgeCase {
        fabric,
        request,
        indices,
        row_bytes,
    }
}

/// What the closed form expects of one case.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    /// The first failing position (its error's variant name).
    Fails(&'static str, u32),
    /// The moves (`Some(src)` or a fill) per written destination row, in order, the
    /// skipped positions and the notification.
    Moves {
        moves: Vec<(Option<u64>, u64)>,
        skipped: Vec<u32>,
        notify: bool,
    },
}

fn closed_form(c: &DgeCase) -> Expected {
    let Some(ind) = c.request.src_indirection else {
        return Expected::Fails("no indirection", 0);
    };
    let dst0 = c.request.dst.start.0;
    let mut moves = Vec::new();
    let mut skipped = Vec::new();
    for (i, &v) in c.indices.iter().enumerate() {
        let dst = dst0 + i as u64 * c.row_bytes;
        let oob = ind.bound.is_some_and(|b| u64::from(v) >= b);
        match (oob, ind.policy) {
            (true, OobPolicy::HardError) => return Expected::Fails("IndexOutOfBounds", i as u32),
            (true, OobPolicy::Fill { .. }) => moves.push((None, dst)),
            (true, _) => skipped.push(i as u32),
            (false, _) => {
                let src = c.request.src.start.0 + u64::from(v) * c.row_bytes;
                if c.fabric.check(FabricAddr(src), c.row_bytes).is_err() {
                    return Expected::Fails("IndexOffFabric", i as u32);
                }
                moves.push((Some(src), dst));
            }
        }
    }
    let notify = ind.policy == OobPolicy::SoftSkip && !skipped.is_empty();
    Expected::Moves {
        moves,
        skipped,
        notify,
    }
}

/// The fewest descriptors `moves` (rows of `row` bytes) need.
fn minimal_count(f: &Fabric, moves: &[(Option<u64>, u64)], row: u64) -> u64 {
    let region = |a: u64| f.map().region_of(FabricAddr(a)).ok().map(|r| r.base);
    let mut count = 0;
    let mut run = 0u64;
    let mut prev: Option<(Option<u64>, u64)> = None;
    for &(s, d) in moves {
        let joined = prev.is_some_and(|(ps, pd)| {
            let src = match (ps, s) {
                (Some(ps), Some(s)) => ps + row == s && region(ps) == region(s),
                (None, None) => true,
                _ => false,
            };
            src && pd + row == d && region(pd) == region(d)
        });
        if !joined {
            count += run.div_ceil(MAX_RUN);
            run = 0;
        }
        run += row;
        prev = Some((s, d));
    }
    count + run.div_ceil(MAX_RUN)
}

/// The destination after the closed form's moves.
fn expected_fabric(c: &DgeCase, moves: &[(Option<u64>, u64)]) -> Result<Fabric, String> {
    let mut f = c.fabric.clone();
    let fill = match c.request.src_indirection.map(|i| i.policy) {
        Some(OobPolicy::Fill { value }) => value,
        _ => 0,
    };
    let es = c.request.dtype.size();
    let pattern: Vec<u8> = fill.to_le_bytes()[..es].repeat((c.row_bytes as usize) / es);
    let mut row = vec![0u8; c.row_bytes as usize];
    let mut old = vec![0u8; c.row_bytes as usize];
    for &(s, d) in moves {
        let e = |e: dma::Error| e.to_string();
        match s {
            None => f.write(FabricAddr(d), &pattern).map_err(e)?,
            Some(s) => {
                f.read(FabricAddr(s), &mut row).map_err(e)?;
                f.read(FabricAddr(d), &mut old).map_err(e)?;
                apply(c.request.op, c.request.dtype, &mut old, &row).map_err(e)?;
                f.write(FabricAddr(d), &old).map_err(e)?;
            }
        }
    }
    Ok(f)
}

/// Generates `c`'s descriptors and checks them against the closed form.
pub fn check(c: &DgeCase) -> Result<(), String> {
    let got = dge::generate(&c.fabric, &c.request);
    if c.indices.is_empty() {
        return match got {
            Err(dge::Error::ZeroCount { dim: 0, .. }) => Ok(()),
            Err(e) => Err(format!("no indices: expected a count-0 refusal, got: {e}")),
            Ok(_) => Err("no indices were accepted".to_string()),
        };
    }
    if c.indices.len() > 4096 {
        return match got {
            Err(_) => Ok(()),
            Ok(_) => Err(format!("{} indices were accepted", c.indices.len())),
        };
    }
    match (closed_form(c), got) {
        (Expected::Fails(what, pos), Err(e)) => same_failure(what, pos, &e),
        (Expected::Fails(what, pos), Ok(_)) => Err(format!(
            "expected {what} at position {pos}, the DGE accepted"
        )),
        (Expected::Moves { .. }, Err(e)) => Err(format!("the DGE refused: {e}")),
        (
            Expected::Moves {
                moves,
                skipped,
                notify,
            },
            Ok(g),
        ) => check_generated(c, &g, &moves, &skipped, notify),
    }
}

fn same_failure(what: &'static str, pos: u32, e: &dge::Error) -> Result<(), String> {
    let got = match e {
        dge::Error::IndexOutOfBounds { position, .. } => ("IndexOutOfBounds", *position),
        dge::Error::IndexOffFabric { position, .. } => ("IndexOffFabric", *position),
        _ => ("another error", 0),
    };
    match got == (what, pos) {
        true => Ok(()),
        false => Err(format!(
            "expected {what} at position {pos}, the DGE said: {e}"
        )),
    }
}

fn check_generated(
    c: &DgeCase,
    g: &Generated,
    moves: &[(Option<u64>, u64)],
    skipped: &[u32],
    notify: bool,
) -> Result<(), String> {
    on_fabric(&c.fabric, g)?;
    let minimal = minimal_count(&c.fabric, moves, c.row_bytes);
    if g.later_phases.is_empty() && g.descriptor_count() as u64 != minimal {
        return Err(format!(
            "{} descriptors, the minimum is {minimal}",
            g.descriptor_count()
        ));
    }
    let got_skips: Vec<u32> = g.skipped.iter().map(|s| s.position).collect();
    if got_skips != skipped || g.oob_notification != notify {
        return Err(format!(
            "skipped {got_skips:?} notify {}, the policy gives {skipped:?} notify {notify}",
            g.oob_notification
        ));
    }
    let expect = expected_fabric(c, moves)?;
    let mut replayed = c.fabric.clone();
    for phase in g.phases() {
        execute_sequential(&mut replayed, phase).map_err(|e| e.to_string())?;
    }
    match replayed.first_difference(&expect) {
        None => Ok(()),
        Some(at) => Err(format!(
            "the replay differs from the closed form at {:#x}",
            at.0
        )),
    }
}

/// A request with every field drawn freely (1 to 5 dimensions, any steps and counts,
/// either side indirect with any bound, policy, step and index layout, any kind, op and
/// eng_mask) over a small fabric: what the `dge_request` cargo-fuzz target feeds the
/// request builder. Only [`check_any`] applies: no panic, no descriptor off the fabric.
pub fn any_request(mut rng: Rng) -> (Fabric, Request) {
    let generation = rng.pick(&Generation::ALL);
    let mut fabric = Fabric::new(generation);
    let idx_at = index_addr(&fabric);
    let values = rng.edge_indices(64, 0, 16, u32::MAX);
    let packed: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let _ = fabric.write(idx_at, &packed);
    let dtype = rng.dtype();
    let es = dtype.size() as u32;
    let pattern = |rng: &mut Rng| {
        let dims: Vec<(i64, u32)> = (0..rng.range(1, 5))
            .map(|_| {
                (
                    i64::from(rng.next_u32() as i16 % 64),
                    rng.edge_count(8, 4096),
                )
            })
            .collect();
        let start = match rng.below(3) {
            0 => FabricAddr(rng.below(1 << 20)),
            1 => FabricAddr(dma::addr::SBUF_BASE + rng.below(1 << 20)),
            _ => FabricAddr(rng.next_u64()),
        };
        AccessPattern::new(start, es, &dims)
    };
    let (src, dst) = (pattern(&mut rng), pattern(&mut rng));
    let kind = rng.pick(&[Kind::Direct2d, Kind::Indirect, Kind::GatherTranspose]);
    let mut request = Request::new(kind, src, dst, dtype);
    request.op = rng.pick(&ComputeOp::ALL);
    request.eng_mask = rng.next_u32() as u16;
    request.non_unique_dst_idx = rng.chance(50);
    let side = |rng: &mut Rng| {
        rng.chance(50).then(|| Indirection {
            dim: rng.below(5) as usize,
            indices: idx_at,
            step: rng.next_u32() as i32 >> rng.below(31),
            bound: rng
                .chance(70)
                .then(|| u64::from(rng.edge_index(0, 16, u32::MAX))),
            policy: match rng.below(4) {
                0 => OobPolicy::HardError,
                1 => OobPolicy::SoftSkip,
                2 => OobPolicy::SoftSkipSilent,
                _ => OobPolicy::Fill {
                    value: rng.next_u32(),
                },
            },
        })
    };
    request.src_indirection = side(&mut rng);
    request.dst_indirection = side(&mut rng);
    (fabric, request)
}

/// Generates `request` over `fabric`: an error is fine, a descriptor off the fabric is
/// not (panics are the caller's to catch).
pub fn check_any(fabric: &Fabric, request: &Request) -> Result<(), String> {
    match dge::generate(fabric, request) {
        Ok(g) => on_fabric(fabric, &g),
        Err(_) => Ok(()),
    }
}

/// Every descriptor of `g` reads and writes only fabric bytes.
fn on_fabric(fabric: &Fabric, g: &Generated) -> Result<(), String> {
    for d in g.phases().flatten().flatten() {
        let src = d.source_range();
        let (dst, len) = d.dest_range();
        let off = src.is_some_and(|(a, n)| fabric.check(a, n).is_err());
        if off || fabric.check(dst, len).is_err() {
            return Err(format!("a descriptor leaves the fabric: {d:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the cargo-fuzz `dge_request` target (an out-of-memory after 650k runs):
    /// a request whose patterns walk tens of millions of pieces made the DGE collect a
    /// run list of gigabytes, since nothing capped a request's pieces. It is now refused
    /// before the walk ([`dge::Error::TooManyPieces`]).
    #[test]
    fn regression_a_request_of_millions_of_pieces_is_refused_not_walked() {
        const INPUT: &[u8] = &[
            0x00, 0xe0, 0xef, 0x59, 0x00, 0x00, 0x00, 0x4f, 0x7b, 0x98, 0x64, 0xf6, 0x33, 0x1c,
            0xde, 0x35, 0x58, 0x97, 0x42, 0x1e, 0xfc, 0x0b, 0x10, 0x46, 0xc8, 0xbf, 0x2f, 0x53,
            0x00, 0xe0, 0xef, 0x59, 0x00, 0x00, 0x00, 0x4f, 0x7b, 0x98, 0x64, 0xf6, 0xe7, 0xff,
            0x7a, 0x82, 0xf2, 0x1c, 0xde, 0x40, 0x58, 0x97, 0x42, 0x1e, 0xfc, 0x0b, 0x18, 0x46,
            0xc8, 0xbf, 0x2f, 0x53, 0x7e, 0xdd, 0xbf, 0xbc, 0x7b, 0xf2, 0xc3, 0x29, 0xfb, 0x17,
            0x3f, 0xb5, 0x46, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xc4, 0x4f, 0xb3, 0xb2, 0xcb, 0x7b, 0x86, 0xbc, 0x7e, 0xdd, 0xbf, 0xbc,
            0x7b, 0xf2, 0xc3, 0x29, 0xfb, 0x17, 0x3f, 0xb5, 0x46, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xbf, 0x2f, 0x53, 0x7e,
            0xfb, 0x7b, 0xf2, 0xbf, 0x29, 0xc3, 0xbc, 0xdd, 0x17, 0x3f, 0xb5, 0x46, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa1, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xc4, 0x4f, 0xb3, 0xb2, 0xc7,
            0x7b, 0x86, 0xbc, 0x7e, 0xdd, 0xbf, 0xbc, 0x7b, 0xf2, 0xc3, 0x29, 0xfb, 0x17, 0x3f,
            0xb5, 0x46, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x35, 0xfd, 0xff, 0xff, 0x3f, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05,
            0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
            0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d,
            0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d, 0x7d,
            0x7d, 0x7d, 0x7d, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4,
            0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0xa4, 0x17, 0x46, 0xc8,
            0xbf, 0x2f, 0x53, 0x7e, 0xdd, 0xbf, 0xbc, 0x7b, 0xf2, 0xc3, 0x29, 0xdf, 0xfb,
        ];
        let (fabric, request) = any_request(Rng::from_bytes(INPUT));
        let e = dge::generate(&fabric, &request).unwrap_err();
        assert!(matches!(e, dge::Error::TooManyPieces { .. }), "{e}");
        assert_eq!(check_any(&fabric, &request), Ok(()));
    }

    #[test]
    fn generation_matches_the_closed_form_on_many_cases() {
        let mut failures = 0;
        for seed in 0..150 {
            let c = case(Rng::new(seed), None);
            failures += usize::from(matches!(closed_form(&c), Expected::Fails(..)));
            assert_eq!(check(&c), Ok(()), "seed {seed}");
        }
        assert!(failures > 0 && failures < 150, "{failures}");
    }

    #[test]
    fn freely_drawn_requests_never_leave_the_fabric() {
        for seed in 0..200 {
            let (f, r) = any_request(Rng::new(seed));
            assert_eq!(check_any(&f, &r), Ok(()), "seed {seed}: {r:?}");
        }
    }

    #[test]
    fn minimal_count_merges_contiguous_rows_and_splits_at_64k() {
        let f = Fabric::new(Generation::Cayman);
        let m = [
            (Some(0), 0x1000),
            (Some(16), 0x1010),
            (None, 0x1020),
            (None, 0x1030),
        ];
        assert_eq!(minimal_count(&f, &m, 16), 2);
        let big = [(Some(0), 0x10_0000), (Some(40_000), 0x10_0000 + 40_000)];
        assert_eq!(minimal_count(&f, &big, 40_000), 2);
        assert_eq!(minimal_count(&f, &[], 4), 0);
    }
}
