//! Descriptor builders shared by the crate's tests.

use std::num::NonZeroU32;

use crate::descriptor::{DescOp, Descriptor, SemId, SemWait};
use crate::dtype::Dtype;
use crate::FabricAddr;

/// A copy of `len` bytes from `src` to `dst`.
pub(crate) fn copy(src: u64, dst: u64, len: u32) -> Descriptor {
    Descriptor::new(
        DescOp::Copy,
        FabricAddr(src),
        FabricAddr(dst),
        len,
        Dtype::U8,
    )
    .unwrap()
}

/// Semaphore `id`.
pub(crate) fn sem(id: u8) -> SemId {
    SemId::new(id).unwrap()
}

/// A wait for `count` signals of semaphore `id`.
pub(crate) fn wait(id: u8, count: u32) -> SemWait {
    SemWait {
        sem: sem(id),
        count: NonZeroU32::new(count).unwrap(),
    }
}
