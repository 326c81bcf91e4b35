//! Access patterns: a start address, an element size and up to five `(step, count)`
//! dimensions, outermost first (the NKI `[[step, num], ...]` convention).
//!
//! Steps are signed and counted in elements, except that on SBUF and PSUM the outermost
//! pair steps in partitions. [`AccessPattern::validate`] proves every element of the
//! pattern lies on the fabric and turns the pattern into byte steps in the unified fabric
//! map ([`BytePattern`]), after which all address arithmetic is plain byte arithmetic: a
//! partition step of `s` is a byte step of `s * partition stride`.

use crate::error::Error;
use dma::addr::{PSUM_STRIDE, SBUF_STRIDE};
use dma::{AddressMap, FabricAddr, Location, Space};
use smallvec::SmallVec;

/// The most dimensions a DGE pattern has.
pub const MAX_DIMS: usize = 5;

/// One `(step, count)` pair of an access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim {
    /// Signed step, in elements (in partitions for the outermost SBUF/PSUM pair).
    pub step: i64,
    /// Number of positions along the dimension (at least 1).
    pub count: u32,
}

/// An access pattern as users write it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AccessPattern {
    /// Fabric address of element `[0, 0, ...]`.
    pub start: FabricAddr,
    /// Bytes per element (1, 2, 4 or 8: seed 000's send_gather_request maps the DTYPE
    /// enum to a 1/2/4/8-byte width).
    pub elem_size: u32,
    /// Dimensions, outermost first.
    pub dims: SmallVec<[Dim; MAX_DIMS]>,
}

/// A dimension with its step in bytes of the fabric map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteDim {
    pub step: i64,
    pub count: u64,
}

/// A validated pattern: every element is on the fabric, steps are in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BytePattern {
    pub start: u64,
    pub elem_size: u32,
    /// Dimensions, outermost first, as given (unit dimensions included).
    pub dims: SmallVec<[ByteDim; MAX_DIMS]>,
    /// The original steps in elements/partitions, for the firmware-style logs.
    pub elem_steps: SmallVec<[i64; MAX_DIMS]>,
}

impl BytePattern {
    /// Number of elements the pattern visits.
    pub fn elements(&self) -> u64 {
        self.dims.iter().map(|d| d.count).product()
    }

    /// Byte address of the element at multi-index `idx` (outermost first).
    pub fn address_of(&self, idx: &[u64]) -> u64 {
        let off: i128 = self
            .dims
            .iter()
            .zip(idx)
            .map(|(d, &i)| i128::from(d.step) * i128::from(i))
            .sum();
        // validate() proved every in-range multi-index lands on the fabric.
        (i128::from(self.start) + off) as u64
    }
}

impl AccessPattern {
    /// Builds a pattern from `[[step, count], ...]` pairs, outermost first.
    pub fn new(start: FabricAddr, elem_size: u32, dims: &[(i64, u32)]) -> AccessPattern {
        AccessPattern {
            start,
            elem_size,
            dims: dims
                .iter()
                .map(|&(step, count)| Dim { step, count })
                .collect(),
        }
    }

    /// Number of elements (product of counts; saturating, validation bounds it).
    pub fn elements(&self) -> u64 {
        self.dims
            .iter()
            .fold(1u64, |acc, d| acc.saturating_mul(u64::from(d.count)))
    }

    /// Proves every element is on the fabric of `map` and converts steps to bytes.
    /// `side` names the pattern in errors (`"source"`, `"destination"`, ...).
    pub fn validate(&self, map: &AddressMap, side: &'static str) -> Result<BytePattern, Error> {
        self.validate_except(map, side, None)
    }

    /// As [`AccessPattern::validate`], leaving dimension `skip` out of the extent check:
    /// along an indirection dimension the addresses come from the indices, which are
    /// checked one by one when they are read.
    pub fn validate_except(
        &self,
        map: &AddressMap,
        side: &'static str,
        skip: Option<usize>,
    ) -> Result<BytePattern, Error> {
        let pattern = self.byte_pattern(map, side)?;
        self.check_extent(map, &pattern, side, skip)?;
        Ok(pattern)
    }

    /// The shape and start checks of [`AccessPattern::validate`] and the conversion to
    /// bytes, without the extent check: for an indirect side, whose every indexed row is
    /// checked on the fabric when the indices are read (nothing is read at the start).
    pub fn byte_pattern(&self, map: &AddressMap, side: &'static str) -> Result<BytePattern, Error> {
        self.check_shape(side)?;
        let region = map
            .region_of(self.start)
            .map_err(|source| Error::PatternStart {
                side,
                addr: self.start.0,
                source,
            })?;
        let partition_stride = match region.space {
            Space::Hbm => None,
            Space::Sbuf => Some(SBUF_STRIDE),
            Space::Psum => Some(PSUM_STRIDE),
        };
        let mut dims = SmallVec::new();
        for (i, d) in self.dims.iter().enumerate() {
            let unit = match (i, partition_stride) {
                (0, Some(stride)) => i128::from(stride),
                _ => i128::from(self.elem_size),
            };
            let step =
                i64::try_from(i128::from(d.step) * unit).map_err(|_| Error::PatternOverflow {
                    side,
                    dim: i,
                    step: d.step,
                    count: d.count,
                })?;
            dims.push(ByteDim {
                step,
                count: u64::from(d.count),
            });
        }
        Ok(BytePattern {
            start: self.start.0,
            elem_size: self.elem_size,
            dims,
            elem_steps: self.dims.iter().map(|d| d.step).collect(),
        })
    }

    fn check_shape(&self, side: &'static str) -> Result<(), Error> {
        if self.dims.is_empty() || self.dims.len() > MAX_DIMS {
            return Err(Error::DimCount {
                side,
                dims: self.dims.len(),
            });
        }
        if !matches!(self.elem_size, 1 | 2 | 4 | 8) {
            return Err(Error::ElemSize {
                side,
                size: self.elem_size,
            });
        }
        match self.dims.iter().position(|d| d.count == 0) {
            Some(dim) => Err(Error::ZeroCount { side, dim }),
            None => Ok(()),
        }
    }

    /// Grows the bounding box of the pattern one dimension at a time; the first dimension
    /// whose extent takes an element off the start's region (or, on SBUF/PSUM, off the
    /// partitions or out of its partition) is named in the error, with the address of the
    /// offending corner. The box is exact: its corners are elements of the pattern.
    fn check_extent(
        &self,
        map: &AddressMap,
        p: &BytePattern,
        side: &'static str,
        skip: Option<usize>,
    ) -> Result<(), Error> {
        let start = map.locate(self.start)?;
        let mut bx = Extent::default();
        let dims = p.dims.iter().zip(&self.dims).enumerate();
        for (i, (d, raw)) in dims.filter(|(i, _)| Some(*i) != skip) {
            bx.grow(
                i == 0 && start.space != Space::Hbm,
                raw.step,
                d.step,
                d.count,
            );
            if let Some(corner) = bx.violation(map, start, self.elem_size) {
                return Err(Error::PatternOutside {
                    side,
                    dim: i,
                    step: raw.step,
                    count: raw.count,
                    addr: (i128::from(self.start.0) + corner).clamp(0, i128::from(u64::MAX)) as u64,
                    region: format!(
                        "{} ({} partitions of {:#x} bytes)",
                        start.space.name(),
                        map.partitions(start.space),
                        map.partition_bytes(start.space)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A pattern's bounding box relative to its start: byte offsets `[lo, hi]` inside a
/// partition (or HBM) and partition steps `[plo, phi]`.
#[derive(Default)]
struct Extent {
    lo: i128,
    hi: i128,
    plo: i128,
    phi: i128,
    stride: i128,
}

impl Extent {
    fn grow(&mut self, partition_dim: bool, raw_step: i64, byte_step: i64, count: u64) {
        let reach = |step: i64| i128::from(step) * i128::from(count - 1);
        if partition_dim {
            let r = reach(raw_step);
            (self.plo, self.phi) = (self.plo + r.min(0), self.phi + r.max(0));
            if raw_step != 0 {
                self.stride = i128::from(byte_step / raw_step);
            }
        } else {
            let r = reach(byte_step);
            (self.lo, self.hi) = (self.lo + r.min(0), self.hi + r.max(0));
        }
    }

    /// The byte offset (from the start) of a corner that is off the fabric, if any.
    fn violation(&self, map: &AddressMap, start: Location, elem: u32) -> Option<i128> {
        let (part, off) = (i128::from(start.partition), i128::from(start.offset));
        if part + self.plo < 0 {
            return Some(self.plo * self.stride);
        }
        if part + self.phi >= i128::from(map.partitions(start.space)) {
            return Some(self.phi * self.stride);
        }
        if off + self.lo < 0 {
            return Some(self.lo);
        }
        let end = off + self.hi + i128::from(elem);
        (end > i128::from(map.partition_bytes(start.space))).then_some(self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::addr::{PSUM_STRIDE, SBUF_BASE};
    use dma::Generation;
    use proptest::prelude::*;

    fn map() -> AddressMap {
        AddressMap::new(Generation::Cayman)
    }

    #[test]
    fn hbm_row_pattern_in_bytes() {
        let p = AccessPattern::new(FabricAddr(0x1000), 4, &[(64, 10), (1, 64)]);
        let b = p.validate(&map(), "source").unwrap();
        assert_eq!(
            b.dims[0],
            ByteDim {
                step: 256,
                count: 10
            }
        );
        assert_eq!(b.dims[1], ByteDim { step: 4, count: 64 });
        assert_eq!(b.elements(), 640);
        assert_eq!(b.address_of(&[2, 3]), 0x1000 + 512 + 12);
    }

    #[test]
    fn sbuf_outer_step_is_partitions() {
        let p = AccessPattern::new(FabricAddr(SBUF_BASE + 8), 2, &[(1, 128), (1, 16)]);
        let b = p.validate(&map(), "source").unwrap();
        assert_eq!(b.dims[0].step, SBUF_STRIDE as i64);
        assert_eq!(
            b.address_of(&[127, 15]),
            SBUF_BASE + 127 * SBUF_STRIDE + 8 + 30
        );
        // 129 partitions from partition 0 leave SBUF: dimension 0 is named
        let p = AccessPattern::new(FabricAddr(SBUF_BASE), 2, &[(1, 129), (1, 16)]);
        let e = p.validate(&map(), "source").unwrap_err();
        assert!(
            matches!(
                e,
                Error::PatternOutside {
                    dim: 0,
                    count: 129,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn last_byte_of_partition_is_ok_one_past_is_not() {
        let bytes = Generation::Cayman.sbuf_partition_bytes() as u32;
        let ok = AccessPattern::new(FabricAddr(SBUF_BASE), 4, &[(1, 1), (1, bytes / 4)]);
        assert!(ok.validate(&map(), "destination").is_ok());
        let bad = AccessPattern::new(FabricAddr(SBUF_BASE + 1), 4, &[(1, 1), (1, bytes / 4)]);
        let e = bad.validate(&map(), "destination").unwrap_err().to_string();
        assert!(e.contains("destination pattern dimension 1"), "{e}");
    }

    #[test]
    fn negative_steps_and_hbm_edges() {
        let top = Generation::Cayman.hbm_bytes();
        let p = AccessPattern::new(FabricAddr(top - 4), 4, &[(-1, 8)]);
        let b = p.validate(&map(), "source").unwrap();
        assert_eq!(b.address_of(&[7]), top - 32);
        let p = AccessPattern::new(FabricAddr(8), 4, &[(-1, 4)]);
        let e = p.validate(&map(), "source").unwrap_err();
        assert!(matches!(e, Error::PatternOutside { dim: 0, .. }), "{e}");
        let p = AccessPattern::new(FabricAddr(top - 4), 4, &[(1, 2)]);
        assert!(p.validate(&map(), "source").is_err());
    }

    #[test]
    fn shape_errors() {
        let m = map();
        let z = AccessPattern::new(FabricAddr(0), 4, &[(1, 4), (1, 0)]);
        assert!(matches!(
            z.validate(&m, "source"),
            Err(Error::ZeroCount { dim: 1, .. })
        ));
        let six = AccessPattern::new(FabricAddr(0), 4, &[(1, 1); 6]);
        assert!(matches!(
            six.validate(&m, "source"),
            Err(Error::DimCount { dims: 6, .. })
        ));
        let none = AccessPattern::new(FabricAddr(0), 4, &[]);
        assert!(matches!(
            none.validate(&m, "source"),
            Err(Error::DimCount { dims: 0, .. })
        ));
        let es = AccessPattern::new(FabricAddr(0), 3, &[(1, 1)]);
        assert!(matches!(
            es.validate(&m, "source"),
            Err(Error::ElemSize { size: 3, .. })
        ));
        let ovf = AccessPattern::new(FabricAddr(0), 4, &[(i64::MAX, 2)]);
        assert!(matches!(
            ovf.validate(&m, "source"),
            Err(Error::PatternOverflow { .. })
        ));
        let off = AccessPattern::new(FabricAddr(u64::MAX), 4, &[(1, 1)]);
        assert!(matches!(
            off.validate(&m, "source"),
            Err(Error::PatternStart { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Accepted patterns have every element inside one region; the box check is
        /// compared against brute force over all elements.
        #[test]
        fn validation_matches_brute_force(
            space in 0u8..3,
            es in prop_oneof![Just(1u32), Just(2), Just(4)],
            off in 0u64..4096,
            dims in proptest::collection::vec((-40i64..40, 1u32..5), 1..4),
        ) {
            let m = AddressMap::new(Generation::Sunda);
            let (space, base, stride) = match space {
                0 => (Space::Hbm, m.partition_bytes(Space::Hbm) - 8192, 0),
                1 => (Space::Sbuf, SBUF_BASE + 60 * SBUF_STRIDE, SBUF_STRIDE),
                _ => (Space::Psum, dma::addr::PSUM_BASE + 60 * PSUM_STRIDE, PSUM_STRIDE),
            };
            let off = if space == Space::Psum { off % 1024 } else { off };
            let p = AccessPattern::new(FabricAddr(base + off), es, &dims);
            let mut all_ok = true;
            let mut idx = vec![0u64; dims.len()];
            'walk: loop {
                let mut a: i128 = i128::from(base + off);
                for (k, &(s, _)) in dims.iter().enumerate() {
                    let unit = if k == 0 && space != Space::Hbm { i128::from(stride) } else { i128::from(es) };
                    a += i128::from(s) * unit * i128::from(idx[k]);
                }
                // the element's partition is the start's plus the partition dim's steps
                let partition = match space {
                    Space::Hbm => 0,
                    _ => 60 + i128::from(dims[0].0) * i128::from(idx[0]),
                };
                let fits = (0..=i128::from(u64::MAX)).contains(&a)
                    && m.check_range(FabricAddr(a as u64), u64::from(es)).is_ok()
                    && m.locate(FabricAddr(a as u64))
                        .is_ok_and(|l| l.space == space && i128::from(l.partition) == partition);
                all_ok &= fits;
                for k in (0..dims.len()).rev() {
                    idx[k] += 1;
                    if idx[k] < u64::from(dims[k].1) { continue 'walk; }
                    idx[k] = 0;
                }
                break;
            }
            prop_assert_eq!(p.validate(&m, "source").is_ok(), all_ok);
        }
    }
}
