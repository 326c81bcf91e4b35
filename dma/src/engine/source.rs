//! Where a replay's descriptors come from: in-memory queues or a verified queue file, read
//! per queue in batches and rewound between the validation and the execution pass.

use std::io::{Read, Seek};

use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::queue_file::VerifiedQueueFile;

/// Per-queue batches of descriptors, in queue order, in any interleaving of the queues.
pub(crate) trait QueueSource {
    /// Queues in the source.
    fn queues(&self) -> usize;

    /// The next at most `max` (at least 1) descriptors of `queue` (below
    /// [`QueueSource::queues`]); empty once it is done.
    fn next(&mut self, queue: usize, max: usize) -> Result<&[Descriptor], Error>;

    /// Starts every queue over.
    fn rewind(&mut self);

    /// Every queue at once, if the source holds them in memory.
    fn in_memory(&self) -> Option<&[Vec<Descriptor>]> {
        None
    }
}

/// Queues held in memory.
pub(crate) struct Slices<'a> {
    queues: &'a [Vec<Descriptor>],
    cursors: Vec<usize>,
}

impl<'a> Slices<'a> {
    pub(crate) fn new(queues: &'a [Vec<Descriptor>]) -> Slices<'a> {
        Slices {
            queues,
            cursors: vec![0; queues.len()],
        }
    }
}

impl QueueSource for Slices<'_> {
    fn queues(&self) -> usize {
        self.queues.len()
    }

    fn next(&mut self, queue: usize, max: usize) -> Result<&[Descriptor], Error> {
        let (Some(descs), Some(cursor)) = (self.queues.get(queue), self.cursors.get_mut(queue))
        else {
            return Ok(&[]);
        };
        let rest = descs.get(*cursor..).unwrap_or_default();
        let batch = rest.get(..max.max(1)).unwrap_or(rest);
        *cursor += batch.len();
        Ok(batch)
    }

    fn rewind(&mut self) {
        self.cursors.fill(0);
    }

    fn in_memory(&self) -> Option<&[Vec<Descriptor>]> {
        Some(self.queues)
    }
}

/// A verified queue file, read by seeking per queue through one bounded buffer.
pub(crate) struct FileSource<'a, R> {
    file: &'a mut VerifiedQueueFile<R>,
    buffer: Vec<Descriptor>,
}

impl<R: Read + Seek + Send> QueueSource for FileSource<'_, R> {
    fn queues(&self) -> usize {
        self.file.header().queues()
    }

    fn next(&mut self, queue: usize, max: usize) -> Result<&[Descriptor], Error> {
        self.file.read_queue(queue, max, &mut self.buffer)?;
        Ok(&self.buffer)
    }

    fn rewind(&mut self) {
        self.file.rewind();
    }
}

/// `pass` over `file` read from its start, rewound again after; a queue file replays only
/// on a fabric of its generation (`fabric`).
pub(crate) fn from_start<R: Read + Seek + Send, T>(
    fabric: crate::Generation,
    file: &mut VerifiedQueueFile<R>,
    pass: impl FnOnce(&mut FileSource<'_, R>) -> Result<T, Error>,
) -> Result<T, Error> {
    let generation = file.header().generation();
    if generation != fabric {
        return Err(Error::GenerationMismatch {
            file: generation.name(),
            fabric: fabric.name(),
        });
    }
    file.rewind();
    let result = pass(&mut FileSource {
        file,
        buffer: Vec::new(),
    });
    file.rewind();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::dtype::Dtype;
    use crate::generation::Generation;
    use crate::queue_file::QueueFileWriter;
    use std::io::Cursor;

    fn fills(n: u64) -> Vec<Descriptor> {
        (0..n)
            .map(|i| Descriptor::fill(FabricAddr(i * 8), 8, Dtype::U8, i & 0xff).unwrap())
            .collect()
    }

    fn drain(source: &mut impl QueueSource, queue: usize, max: usize) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        loop {
            let batch = source.next(queue, max).unwrap();
            if batch.is_empty() {
                return out;
            }
            out.push(batch.iter().map(|d| d.dst().0).collect());
        }
    }

    #[test]
    fn slices_hand_out_bounded_batches_and_rewind() {
        let queues = vec![fills(5), Vec::new()];
        let mut s = Slices::new(&queues);
        assert_eq!(s.queues(), 2);
        assert_eq!(
            drain(&mut s, 0, 2),
            vec![vec![0, 8], vec![16, 24], vec![32]]
        );
        assert_eq!(drain(&mut s, 1, 2), Vec::<Vec<u64>>::new());
        assert!(s.next(7, 2).unwrap().is_empty());
        s.rewind();
        assert_eq!(
            drain(&mut s, 0, 0),
            (0..5).map(|i| vec![i * 8]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn file_source_reads_each_queue_in_order() {
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, 2).unwrap();
        for (q, d) in [(0, 0u64), (0, 1), (1, 2), (1, 3), (1, 4)] {
            w.push(q, &fills(5)[d as usize]).unwrap();
        }
        let bytes = w.finish().unwrap().into_inner();
        let mut file = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        let mut s = FileSource {
            file: &mut file,
            buffer: Vec::new(),
        };
        assert_eq!(s.queues(), 2);
        assert_eq!(drain(&mut s, 1, 2), vec![vec![16, 24], vec![32]]);
        assert_eq!(drain(&mut s, 0, 8), vec![vec![0, 8]]);
        assert!(matches!(
            s.next(2, 8),
            Err(Error::NoSuchQueue { queue: 2, .. })
        ));
        s.rewind();
        assert_eq!(drain(&mut s, 1, 8), vec![vec![16, 24, 32]]);
    }
}
