//! An access log for one fabric: while a [`Fabric`](crate::Fabric) is watched
//! ([`Fabric::watch`](crate::Fabric::watch)), every byte range its public read and write
//! forms touch is recorded in order, with the notes its caller adds to say what the
//! following accesses are for (an index position and its value). A sanitizer reads the
//! log to check each access against the tensors an operation names. The engine's shared
//! forms (the DMA queues' work) are not logged: watch a route that uses the public forms.

use std::sync::Mutex;

use crate::addr::FabricAddr;
use crate::error::AccessKind;

/// One entry of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `len` bytes at `addr` read or written.
    Access {
        addr: FabricAddr,
        len: u64,
        kind: AccessKind,
    },
    /// The caller's note: the accesses after it (up to the next note) serve index
    /// position `position`, whose source and destination index values are `values`
    /// (`None` on a side without indices).
    Note {
        position: u64,
        values: [Option<i64>; 2],
    },
}

/// The log behind a watched fabric (a lock, because reads go through `&Fabric`).
#[derive(Debug, Default)]
pub(crate) struct Log(Mutex<Vec<Event>>);

impl Log {
    pub(crate) fn push(&self, event: Event) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }

    pub(crate) fn into_events(self) -> Vec<Event> {
        self.0.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}
