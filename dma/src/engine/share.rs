//! Host writes beside a running replay, shared with the pool threads that ran out of the
//! replay's work ([`super::Beside::write`]).
//!
//! A pool thread that has claimed every unit of a replay has nothing to do until the
//! caller's work beside it ends. While it waits, it helps: a host write the caller makes
//! beside the replay is cut into pieces inside one page each ([`Fabric::page_pieces`]),
//! and the caller and the waiting pool threads each claim the next piece not yet claimed
//! and copy it. The write returns once every piece is copied, so to the caller it is one
//! synchronous write.
//!
//! Two threads never copy into the same bytes (each piece is claimed once, and pieces do
//! not overlap), and no replay thread reaches a page written beside it (see
//! [`super::Beside::write`]), so each byte has one writer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::addr::FabricAddr;
use crate::fabric::Fabric;

use super::lock;

/// The write shared by the caller and the helpers (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct WriteShare {
    /// Set once the caller's work beside the replay is over: the helpers leave.
    over: AtomicBool,
    /// Whether a write is posted (looked at before the lock is taken).
    posted: AtomicBool,
    task: Mutex<Task>,
    /// Pieces of the posted write copied.
    done: AtomicUsize,
}

/// The pieces of the posted write and how many are claimed.
#[derive(Debug, Default)]
struct Task {
    pieces: Vec<Piece>,
    next: usize,
}

/// One piece of a write: `len` bytes from `src` to `addr`, inside one page.
#[derive(Clone, Copy, Debug)]
struct Piece {
    addr: FabricAddr,
    src: *const u8,
    len: usize,
}

// SAFETY: `src` points into the buffer of the `WriteShare::write` that posted the piece;
// that call returns, or unwinds, only once every piece claimed of it is copied or its
// copy unwound (`Posted`), and no piece is claimed after, so the buffer outlives every
// use of the pointer on any thread.
unsafe impl Send for Piece {}

impl WriteShare {
    /// Writes `buf` at `addr`, which [`Fabric::closed_with_storage`] allowed beside the
    /// replay: the caller copies pieces, and so does every helper waiting in
    /// [`WriteShare::help`]; returns once all are copied.
    ///
    /// # Safety
    ///
    /// As for [`Fabric::write_closed_piece`], for every page of the range: no thread but
    /// the caller and the helpers reaches those pages until this returns.
    pub(crate) unsafe fn write(&self, fabric: &Fabric, addr: FabricAddr, buf: &[u8]) {
        let pieces: Vec<Piece> = Fabric::page_pieces(addr, buf.len() as u64)
            .map(|(off, len)| Piece {
                addr: FabricAddr(addr.0 + off as u64),
                src: buf[off..off + len].as_ptr(),
                len,
            })
            .collect();
        self.done.store(0, Ordering::Relaxed);
        *lock(&self.task) = Task { pieces, next: 0 };
        self.posted.store(true, Ordering::Release);
        let _posted = Posted(self);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.copy_claimed(fabric) };
    }

    /// Copies posted pieces until the caller's work beside the replay is over; how many.
    ///
    /// # Safety
    ///
    /// Called by a thread of the replay that has no more of the replay's work to do (so
    /// it reaches no page of the replay's and none a posted write covers but through it).
    pub(crate) unsafe fn help(&self, fabric: &Fabric) -> usize {
        let mut copied = 0;
        while !self.over.load(Ordering::Acquire) {
            if self.posted.load(Ordering::Acquire) {
                // SAFETY: the caller's contract, and `write`'s for the posted pieces.
                copied += unsafe { self.copy_claimed(fabric) };
            }
            std::hint::spin_loop();
        }
        copied
    }

    /// Ends the helping: the caller's work beside the replay is over.
    pub(crate) fn end(&self) {
        self.over.store(true, Ordering::Release);
    }

    /// Copies pieces of the posted write while some are unclaimed; how many.
    ///
    /// # Safety
    ///
    /// As for [`WriteShare::write`].
    unsafe fn copy_claimed(&self, fabric: &Fabric) -> usize {
        let mut copied = 0;
        while let Some(p) = self.claim() {
            let _done = CountDone(&self.done);
            // SAFETY: `p.src` is alive (see `Piece`), and no other thread reads or writes
            // the piece's bytes (each piece is claimed once; `write`'s contract).
            unsafe {
                let bytes = std::slice::from_raw_parts(p.src, p.len);
                fabric.write_closed_piece(p.addr, bytes);
            }
            copied += 1;
        }
        copied
    }

    /// The next piece not yet claimed, claimed.
    fn claim(&self) -> Option<Piece> {
        let mut task = lock(&self.task);
        let piece = task.pieces.get(task.next).copied()?;
        task.next += 1;
        Some(piece)
    }
}

/// The posted write of a [`WriteShare`]: when dropped, at the end of the write or as it
/// unwinds, the pieces not yet claimed stay unclaimed, and it waits until every claimed
/// one is copied (or its copy unwound), so that no thread reads the write's buffer after
/// the write returns.
struct Posted<'s>(&'s WriteShare);

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        let share = self.0;
        let claimed = {
            let mut task = lock(&share.task);
            let claimed = task.next;
            task.next = task.pieces.len();
            claimed
        };
        while share.done.load(Ordering::Acquire) < claimed {
            std::hint::spin_loop();
        }
        share.posted.store(false, Ordering::Release);
        *lock(&share.task) = Task::default();
    }
}

/// Counts one claimed piece done when dropped, even if its copy unwinds.
struct CountDone<'a>(&'a AtomicUsize);

impl Drop for CountDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// Ends a [`WriteShare`]'s helping when dropped, so that the helpers leave even if the
/// work beside the replay unwinds.
pub(crate) struct EndHelping<'s>(pub(crate) &'s WriteShare);

impl Drop for EndHelping<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::PAGE_BYTES;
    use crate::Generation;

    /// A fabric whose first `pages` HBM pages have storage, closed.
    fn closed_pages(pages: u64) -> Fabric {
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(0), &vec![0; (pages * PAGE_BYTES) as usize])
            .unwrap();
        f.close_pages();
        f
    }

    /// `n` bytes that differ from write to write (`seed`) and from byte to byte.
    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8 ^ seed).collect()
    }

    fn read(f: &Fabric, addr: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        f.read(FabricAddr(addr), &mut v).unwrap();
        v
    }

    #[test]
    fn a_write_with_no_helper_is_copied_whole_across_pages() {
        let f = closed_pages(4);
        let share = WriteShare::default();
        let (at, data) = (PAGE_BYTES - 3, bytes(2 * PAGE_BYTES as usize + 10, 5));
        assert!(f.closed_with_storage(f.page_keys(FabricAddr(at), data.len() as u64).unwrap()));
        // SAFETY: no other thread has the fabric.
        unsafe { share.write(&f, FabricAddr(at), &data) };
        assert_eq!(read(&f, at, data.len()), data);
        assert_eq!(read(&f, at - 1, 1), [0]);
        assert_eq!(read(&f, at + data.len() as u64, 1), [0]);
    }

    #[test]
    fn a_helper_copies_pieces_of_the_writes_posted_until_the_end() {
        const PAGES: u64 = 16;
        let f = closed_pages(PAGES);
        let share = WriteShare::default();
        let started = AtomicBool::new(false);
        let (helped, last) = std::thread::scope(|s| {
            let helper = s.spawn(|| {
                started.store(true, Ordering::Release);
                // SAFETY: this thread reaches the fabric only through the pieces.
                unsafe { share.help(&f) }
            });
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            // the helper leaves even if an assertion below fails
            let end = EndHelping(&share);
            let mut last = Vec::new();
            for seed in 0..200u8 {
                let at = u64::from(seed) % 7;
                last = bytes((PAGES * PAGE_BYTES - at) as usize, seed);
                // SAFETY: the helper reaches the fabric only through the pieces.
                unsafe { share.write(&f, FabricAddr(at), &last) };
                assert_eq!(read(&f, at, last.len()), last, "write {seed}");
            }
            drop(end);
            (helper.join().unwrap(), last)
        });
        assert!(helped > 0, "the helper copied no piece of 200 writes");
        assert_eq!(read(&f, 199 % 7, last.len()), last);
    }
}
