//! The per-core runtime state every route (reference, POOL kernels, DGE) carries between
//! instructions, and the [`Outcome`] each executed instruction reports.
//!
//! - [`CoreState`]: the bound/shape register file DMA_INDIRECT reads
//!   ([`BoundRegisters`]) and the per-channel Pool_Buffer ([`PoolBuffers`]) that
//!   POOL_BUFFER_LOAD 0x67 fills and GATHER 0x68 reads and frees;
//! - [`Window`]: one channel's loaded Pool_Buffer window (at most 512 elements starting at
//!   a multiple of 512, with its dtype);
//! - [`Outcome`]: what an instruction did beyond its memory effect — the indices it
//!   skipped under a soft OOB policy ([`SkippedIndex`]), whether it raised the OOB
//!   notification, and how many fabric bytes it stored.
//!
//! The state holds data only: the hit test, the element order and every datapath's rules
//! belong to the routes, which must agree on the state they leave (it derives `Eq`).
//!
//! # Channel numbering (shared by every route)
//!
//! A Pool_Buffer channel is an absolute partition 0..128. Active channel `k` (0 ..
//! `num_active_channels`) of a POOL instruction works on partition `P + k` of each of its
//! patterns, where `P` is that pattern's own ADDR4 partition. POOL_BUFFER_LOAD stores its
//! window under channel `P_src + k` (its `src_mem_pattern`); GATHER channel `k` reads and
//! frees the window of channel `P_idx + k`, `P_idx` being the partition of its index
//! pattern (`src_mem_pattern`), and writes partition `P_dst + k` of `dst_mem_pattern`.

use dma::generation::PARTITIONS;
use dma::Dtype;

use crate::error::Error;
use crate::isa::BoundRegisters;

/// Elements a Pool_Buffer window holds at most, per channel (seed 000: 512).
pub const POOL_BUFFER_ELEMENTS: u32 = 512;

/// Channels (partitions) with a Pool_Buffer each.
pub const POOL_CHANNELS: u32 = PARTITIONS;

/// One channel's Pool_Buffer contents, loaded by POOL_BUFFER_LOAD 0x67.
///
/// Invariants (checked by [`Window::new`]): `start_index` is a multiple of 512, `bytes`
/// is a whole number of `dtype` elements, at most 512 of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    start_index: u32,
    dtype: Dtype,
    bytes: Vec<u8>,
}

impl Window {
    /// A window of `bytes` (elements of `dtype`) covering indices from `start_index`.
    pub fn new(start_index: u32, dtype: Dtype, bytes: Vec<u8>) -> Result<Window, Error> {
        if !start_index.is_multiple_of(POOL_BUFFER_ELEMENTS) {
            return Err(Error::PoolWindowStart { start_index });
        }
        let size = dtype.size();
        let count = bytes.len() / size;
        if !bytes.len().is_multiple_of(size) || count > POOL_BUFFER_ELEMENTS as usize {
            return Err(Error::PoolWindowLength {
                bytes: bytes.len(),
                dtype,
            });
        }
        Ok(Window {
            start_index,
            dtype,
            bytes,
        })
    }

    /// The first index the window covers (POOL_BUFFER_LOAD `start_index`).
    pub fn start_index(&self) -> u32 {
        self.start_index
    }

    /// The dtype the window was loaded with.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Elements loaded (0..=512).
    pub fn len(&self) -> u32 {
        // `new` proved the count is at most 512.
        (self.bytes.len() / self.dtype.size()) as u32
    }

    /// Whether no element is loaded (every index misses).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The loaded bytes, element 0 first.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes of loaded element `offset` (relative to `start_index`), if loaded.
    pub fn element(&self, offset: u32) -> Option<&[u8]> {
        let size = self.dtype.size();
        let at = usize::try_from(offset).ok()?.checked_mul(size)?;
        self.bytes.get(at..at.checked_add(size)?)
    }
}

/// The Pool_Buffer of every channel: `None` where nothing is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBuffers {
    windows: Vec<Option<Window>>,
}

impl Default for PoolBuffers {
    fn default() -> Self {
        PoolBuffers {
            windows: vec![None; POOL_CHANNELS as usize],
        }
    }
}

impl PoolBuffers {
    /// Every channel empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Channel `channel`'s window (`Ok(None)` when empty).
    pub fn window(&self, channel: u32) -> Result<Option<&Window>, Error> {
        Ok(self.slot(channel)?.as_ref())
    }

    /// Replaces channel `channel`'s window with `window`.
    pub fn load(&mut self, channel: u32, window: Window) -> Result<(), Error> {
        *self.slot_mut(channel)? = Some(window);
        Ok(())
    }

    /// Releases channel `channel`'s window (GATHER free_pool_buffer).
    pub fn free(&mut self, channel: u32) -> Result<(), Error> {
        *self.slot_mut(channel)? = None;
        Ok(())
    }

    /// Channels that hold a window, in channel order.
    pub fn loaded(&self) -> impl Iterator<Item = (u32, &Window)> + '_ {
        (0u32..)
            .zip(&self.windows)
            .filter_map(|(c, w)| w.as_ref().map(|w| (c, w)))
    }

    fn slot(&self, channel: u32) -> Result<&Option<Window>, Error> {
        usize::try_from(channel)
            .ok()
            .and_then(|c| self.windows.get(c))
            .ok_or(Error::PoolChannel { channel })
    }

    fn slot_mut(&mut self, channel: u32) -> Result<&mut Option<Window>, Error> {
        usize::try_from(channel)
            .ok()
            .and_then(|c| self.windows.get_mut(c))
            .ok_or(Error::PoolChannel { channel })
    }
}

/// The state one core carries between instructions, identical across routes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreState {
    /// The BOUND_CHECK_REG / shape register file.
    pub regs: BoundRegisters,
    /// The Pool_Buffer of every channel.
    pub pool_buffers: PoolBuffers,
}

impl CoreState {
    /// Zeroed registers, empty Pool_Buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty Pool_Buffers with the register file `regs`.
    pub fn with_registers(regs: BoundRegisters) -> Self {
        CoreState {
            regs,
            pool_buffers: PoolBuffers::new(),
        }
    }
}

/// Which index tensor a skipped index came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexSide {
    /// The source side (DMA_INDIRECT `src_idx_start_addr`).
    Src,
    /// The destination side (DMA_INDIRECT `dst_idx_start_addr`; EMBEDDING_UPDATE's table
    /// indices, which select the destination row).
    Dst,
}

impl std::fmt::Display for IndexSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IndexSide::Src => "src",
            IndexSide::Dst => "dst",
        })
    }
}

/// One index an instruction skipped under a soft OOB policy (it moved no bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SkippedIndex {
    /// The index tensor it came from.
    pub side: IndexSide,
    /// Its position in that tensor (k for DMA_INDIRECT, i for EMBEDDING_UPDATE).
    pub position: u32,
    /// The index value.
    pub value: u32,
}

/// An access-pattern side whose scalar offset took its walk out of its tensor under
/// `oob = skip`: the copy moved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SkippedOffset {
    /// The side.
    pub side: IndexSide,
    /// The scalar offset's value.
    pub value: i64,
}

/// What an executed instruction reports besides its memory effect; every route must
/// report the same `Outcome` for the same instruction and inputs.
///
/// - `skipped`: DMA_INDIRECT soft-skipped indices (a position whose src and dst indices
///   are both out of bounds is listed once per side, src first) and EMBEDDING_UPDATE
///   indices >= the table's row count, in position order. GATHER misses and INDIRECT_COPY
///   zero fills are defined results, not skips, and are not listed.
/// - `skipped_offsets`: the access-pattern sides whose scalar offset was out of bounds
///   under `oob = skip` (src first); the copy moved nothing.
/// - `oob_notification`: a DMA_INDIRECT skip on a side whose bound register does not set
///   `bc_disable_oob_error_notif`; any access-pattern skip.
/// - `bytes_written`: fabric bytes stored, counted once per store (an element or row
///   written twice counts twice; immediate and zero fills count; SKIP_WRITE misses and
///   skipped indices do not; POOL_BUFFER_LOAD stores nothing on the fabric).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Indices skipped under a soft OOB policy.
    pub skipped: Vec<SkippedIndex>,
    /// Scalar offsets skipped under `oob = skip`.
    pub skipped_offsets: Vec<SkippedOffset>,
    /// Whether the OOB notification was raised.
    pub oob_notification: bool,
    /// Fabric bytes stored.
    pub bytes_written: u64,
}

impl Outcome {
    /// Everything skipped: indices and scalar offsets.
    pub fn skips(&self) -> usize {
        self.skipped.len() + self.skipped_offsets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_invariants() {
        let w = Window::new(512, Dtype::U16, vec![1, 0, 2, 0, 3, 0]).unwrap();
        assert_eq!((w.start_index(), w.len(), w.dtype()), (512, 3, Dtype::U16));
        assert_eq!(w.element(2), Some(&[3u8, 0][..]));
        assert_eq!(w.element(3), None);
        assert_eq!(w.element(u32::MAX), None);
        assert!(matches!(
            Window::new(100, Dtype::U8, vec![]),
            Err(Error::PoolWindowStart { start_index: 100 })
        ));
        assert!(matches!(
            Window::new(0, Dtype::U16, vec![0; 3]),
            Err(Error::PoolWindowLength { bytes: 3, .. })
        ));
        assert!(Window::new(0, Dtype::U8, vec![0; 512]).is_ok());
        assert!(matches!(
            Window::new(0, Dtype::U8, vec![0; 513]),
            Err(Error::PoolWindowLength { bytes: 513, .. })
        ));
        assert!(Window::new(0, Dtype::F32, vec![]).unwrap().is_empty());
    }

    #[test]
    fn pool_buffers_load_and_free() {
        let mut p = PoolBuffers::new();
        let w = Window::new(0, Dtype::U8, vec![9]).unwrap();
        p.load(127, w.clone()).unwrap();
        assert_eq!(p.window(127).unwrap(), Some(&w));
        assert_eq!(p.window(0).unwrap(), None);
        assert_eq!(p.loaded().map(|(c, _)| c).collect::<Vec<_>>(), vec![127]);
        p.free(127).unwrap();
        assert_eq!(p, PoolBuffers::new());
        assert!(matches!(
            p.load(128, w),
            Err(Error::PoolChannel { channel: 128 })
        ));
        assert!(matches!(
            p.window(200),
            Err(Error::PoolChannel { channel: 200 })
        ));
    }
}
