//! Execution of a cast descriptor ([`crate::descriptor`], byte 26): the one operation that
//! is not a fabric form of its own, written once over the two ways the engine reaches the
//! fabric (the sequential oracle's `&mut` forms, a queue's [`PageLocks`]).

use std::cell::RefCell;

use crate::cast;
use crate::compute::ComputeOp;
use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::fabric::{Fabric, PageLocks};
use crate::FabricAddr;

/// The reads and writes a cast needs.
pub(crate) trait CastMemory {
    fn read(&mut self, addr: FabricAddr, buf: &mut [u8]) -> Result<(), Error>;
    fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error>;
}

/// The sequential oracle: the public forms (a write reserves its pages).
impl CastMemory for Fabric {
    fn read(&mut self, addr: FabricAddr, buf: &mut [u8]) -> Result<(), Error> {
        Fabric::read(self, addr, buf)
    }
    fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error> {
        Fabric::write(self, addr, buf)
    }
}

/// A queue's run: the destination pages were reserved by validation.
impl<const R: usize> CastMemory for PageLocks<'_, R> {
    fn read(&mut self, addr: FabricAddr, buf: &mut [u8]) -> Result<(), Error> {
        PageLocks::read(self, addr, buf)
    }
    fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error> {
        PageLocks::write(self, addr, buf)
    }
}

thread_local! {
    /// A cast's source and destination images (each at most 64 KiB), kept per thread so
    /// that a cast allocates nothing once its thread has run one.
    static IMAGES: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Executes cast descriptor `d`: its whole source is read first (so a source that
/// overlaps the destination is read as it was, as a copy's is), then, for a reduction,
/// its destination; the result ([`cast::cast`]) is written. A FILL never casts.
// Out of line: casts are rare, and inlined into the engine's per-descriptor dispatch
// (`exec::execute_descriptor`) its frame would cost every descriptor a prologue.
#[inline(never)]
pub(crate) fn execute_cast(mem: &mut impl CastMemory, d: &Descriptor) -> Result<(), Error> {
    let (Some((src, src_len)), Some(op)) = (d.source_range(), d.op().compute_op()) else {
        return Ok(());
    };
    IMAGES.with_borrow_mut(|(source, image)| {
        // a descriptor's runs are at most 64 KiB each (Descriptor::checked_cast)
        source.resize(src_len as usize, 0);
        image.resize(d.len() as usize, 0);
        mem.read(src, source)?;
        if op != ComputeOp::None {
            mem.read(d.dst(), image)?;
        }
        cast::cast(op, d.src_dtype(), source, d.dtype(), image)?;
        mem.write(d.dst(), image)
    })
}
