//! A verified queue file read ahead of execution: the source of
//! [`super::Engine::replay_file_async`]. The validation pass reads the file on the
//! executing thread (as [`super::source::FileSource`] does); for the execution pass a
//! reader on tokio's blocking pool reads each queue's next batches while the executor
//! runs the window before, so reading overlaps execution.

use std::collections::VecDeque;
use std::io::{Read, Seek};
use std::panic::resume_unwind;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::queue_file::VerifiedQueueFile;

use super::lock;
use super::source::QueueSource;

/// A queue file read on the caller until the first [`QueueSource::rewind`] (the
/// validation pass), then read ahead by a reader task (the execution pass).
pub(crate) struct Ahead<R: Read + Seek + Send + 'static> {
    /// The file while this thread reads it (`None` while the reader has it).
    file: Option<VerifiedQueueFile<R>>,
    queues: usize,
    buffer: Vec<Descriptor>,
    reader: Option<Reader<R>>,
    runtime: Handle,
    /// Descriptors per read, and the most read ahead per queue.
    batch: usize,
    ahead: usize,
}

/// The reader task and what it has read.
struct Reader<R> {
    shelf: Arc<Shelf>,
    task: JoinHandle<VerifiedQueueFile<R>>,
}

/// What the reader read and the consumer has not taken, per queue.
#[derive(Default)]
struct Shelf {
    state: Mutex<Shelved>,
    /// Notified whenever the reader shelves something or the consumer takes something.
    changed: Condvar,
}

#[derive(Default)]
struct Shelved {
    queues: Vec<QueueAhead>,
    /// The consumer is done: the reader stops.
    stop: bool,
}

/// One queue's descriptors read ahead, and how its reading ended (`Some(Err)`: the read
/// error, handed to the consumer where the queue's descriptors stop).
#[derive(Default)]
struct QueueAhead {
    read: VecDeque<Descriptor>,
    end: Option<Result<(), Error>>,
}

impl QueueAhead {
    fn wants(&self, ahead: usize) -> bool {
        self.end.is_none() && self.read.len() < ahead
    }
}

impl Shelf {
    fn wait<'a>(&self, guard: MutexGuard<'a, Shelved>) -> MutexGuard<'a, Shelved> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }
}

impl<R: Read + Seek + Send + 'static> Ahead<R> {
    /// Reads `file` (rewound) in batches of `batch` descriptors, reading at most `ahead`
    /// descriptors of a queue ahead of the consumer, on `runtime`'s blocking pool.
    pub(crate) fn new(
        mut file: VerifiedQueueFile<R>,
        runtime: Handle,
        batch: usize,
        ahead: usize,
    ) -> Ahead<R> {
        file.rewind();
        Ahead {
            queues: file.header().queues(),
            file: Some(file),
            buffer: Vec::new(),
            reader: None,
            runtime,
            batch: batch.max(1),
            ahead: ahead.max(1),
        }
    }

    /// The file back, rewound (the reader stopped).
    pub(crate) fn into_file(mut self) -> VerifiedQueueFile<R> {
        let mut file = self.take_file();
        file.rewind();
        file
    }

    /// Stops the reader, if any, and takes the file back.
    fn take_file(&mut self) -> VerifiedQueueFile<R> {
        if let Some(reader) = self.reader.take() {
            lock(&reader.shelf.state).stop = true;
            reader.shelf.changed.notify_all();
            // This thread runs no async task (it is on the blocking pool or the caller's).
            match self.runtime.block_on(reader.task) {
                Ok(file) => self.file = Some(file),
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => resume_unwind(panic),
                    Err(e) => panic!("the queue file reader did not finish: {e}"),
                },
            }
        }
        match self.file.take() {
            Some(file) => file,
            None => unreachable!("the file is either here or the reader's"),
        }
    }
}

impl<R: Read + Seek + Send + 'static> QueueSource for Ahead<R> {
    fn queues(&self) -> usize {
        self.queues
    }

    fn next(&mut self, queue: usize, max: usize) -> Result<&[Descriptor], Error> {
        self.buffer.clear();
        if queue >= self.queues {
            return Ok(&self.buffer);
        }
        if let Some(file) = &mut self.file {
            file.read_queue(queue, max, &mut self.buffer)?;
            return Ok(&self.buffer);
        }
        let Some(reader) = &self.reader else {
            return Ok(&self.buffer);
        };
        let shelf = &reader.shelf;
        let mut state = lock(&shelf.state);
        loop {
            let Some(slot) = state.queues.get_mut(queue) else {
                return Ok(&self.buffer);
            };
            if !slot.read.is_empty() {
                let n = max.max(1).min(slot.read.len());
                self.buffer.extend(slot.read.drain(..n));
                shelf.changed.notify_all();
                return Ok(&self.buffer);
            }
            match slot.end.take() {
                None => state = shelf.wait(state),
                Some(Ok(())) => {
                    slot.end = Some(Ok(()));
                    return Ok(&self.buffer);
                }
                Some(Err(e)) => {
                    // The queue ends at its error.
                    slot.end = Some(Ok(()));
                    return Err(e);
                }
            }
        }
    }

    /// Starts every queue over, read ahead from now on.
    fn rewind(&mut self) {
        let mut file = self.take_file();
        file.rewind();
        let shelf = Arc::new(Shelf::default());
        lock(&shelf.state).queues = (0..self.queues).map(|_| QueueAhead::default()).collect();
        let (batch, ahead) = (self.batch, self.ahead);
        let on = Arc::clone(&shelf);
        let task = self
            .runtime
            .spawn_blocking(move || read_ahead(file, &on, batch, ahead));
        self.reader = Some(Reader { shelf, task });
    }
}

impl<R: Read + Seek + Send + 'static> Drop for Ahead<R> {
    fn drop(&mut self) {
        // The reader stops on its own (and drops the file).
        if let Some(reader) = &self.reader {
            lock(&reader.shelf.state).stop = true;
            reader.shelf.changed.notify_all();
        }
    }
}

/// The reader: reads, round-robin over the queues, a batch of each queue that has fewer
/// than `ahead` descriptors shelved, until every queue has ended or the consumer stops it;
/// returns the file.
fn read_ahead<R: Read + Seek>(
    mut file: VerifiedQueueFile<R>,
    shelf: &Shelf,
    batch: usize,
    ahead: usize,
) -> VerifiedQueueFile<R> {
    let mut buffer = Vec::new();
    let mut next = 0;
    loop {
        let queue = {
            let mut state = lock(&shelf.state);
            loop {
                if state.stop {
                    return file;
                }
                let n = state.queues.len();
                let wanted = (0..n)
                    .map(|k| (next + k) % n)
                    .find(|&q| state.queues.get(q).is_some_and(|r| r.wants(ahead)));
                match wanted {
                    Some(q) => break q,
                    None if state.queues.iter().all(|r| r.end.is_some()) => return file,
                    None => state = shelf.wait(state),
                }
            }
        };
        next = queue + 1;
        let read = file.read_queue(queue, batch, &mut buffer);
        let mut state = lock(&shelf.state);
        if let Some(slot) = state.queues.get_mut(queue) {
            match read {
                Ok(0) => slot.end = Some(Ok(())),
                Ok(_) => slot.read.extend(buffer.drain(..)),
                Err(e) => slot.end = Some(Err(e)),
            }
        }
        shelf.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::dtype::Dtype;
    use crate::generation::Generation;
    use crate::queue_file::QueueFileWriter;
    use std::io::Cursor;
    use std::time::{Duration, Instant};

    fn file(queues: usize, per_queue: u64) -> VerifiedQueueFile<Cursor<Vec<u8>>> {
        let mut w =
            QueueFileWriter::new(Cursor::new(Vec::new()), Generation::Cayman, queues).unwrap();
        for q in 0..queues {
            for i in 0..per_queue {
                let d = Descriptor::fill(FabricAddr(i * 8), 8, Dtype::U8, q as u64).unwrap();
                w.push(q, &d).unwrap();
            }
        }
        VerifiedQueueFile::open(Cursor::new(w.finish().unwrap().into_inner())).unwrap()
    }

    /// What the reader has shelved per queue, once it has stopped changing.
    fn shelved(ahead: &Ahead<Cursor<Vec<u8>>>, want: &[usize]) -> Vec<usize> {
        let shelf = &ahead.reader.as_ref().unwrap().shelf;
        let started = Instant::now();
        loop {
            let now: Vec<usize> = lock(&shelf.state)
                .queues
                .iter()
                .map(|q| q.read.len())
                .collect();
            if now == want || started.elapsed() > Duration::from_secs(10) {
                return now;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_reader_reads_each_queue_ahead_up_to_its_bound_and_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut ahead = Ahead::new(file(3, 100), rt.handle().clone(), 8, 20);
        // the validation pass reads on the caller
        assert_eq!(ahead.next(1, 5).unwrap().len(), 5);
        assert!(ahead.reader.is_none());
        ahead.rewind();
        // unasked, every queue is read ahead to the bound (in whole batches)
        assert_eq!(shelved(&ahead, &[24, 24, 24]), [24, 24, 24]);
        let dsts = |a: &mut Ahead<_>, q, max| -> Vec<u64> {
            a.next(q, max)
                .unwrap()
                .iter()
                .map(|d: &Descriptor| d.dst().0)
                .collect()
        };
        assert_eq!(dsts(&mut ahead, 1, 3), [0, 8, 16]);
        assert_eq!(
            dsts(&mut ahead, 1, 100),
            (3..24).map(|i| i * 8).collect::<Vec<_>>()
        );
        // taking from a queue lets the reader read it ahead again
        assert_eq!(shelved(&ahead, &[24, 24, 24]), [24, 24, 24]);
        let mut all = Vec::new();
        loop {
            let got = dsts(&mut ahead, 2, 7);
            if got.is_empty() {
                break;
            }
            all.extend(got);
        }
        assert_eq!(all, (0..100).map(|i| i * 8).collect::<Vec<_>>());
        assert!(ahead.next(3, 7).unwrap().is_empty());
        let mut back = ahead.into_file();
        let mut out = Vec::new();
        assert_eq!(back.read_queue(0, 4, &mut out).unwrap(), 4);
    }
}
