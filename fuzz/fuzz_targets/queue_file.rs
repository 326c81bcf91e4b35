//! Fuzzes the queue-file reader: any bytes are verified or rejected with an error, never
//! a panic; a file that verifies reads back to the counts its summary gives.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(summary) = dma::verify(std::io::Cursor::new(data)) else {
        return;
    };
    let Ok(file) = dma::VerifiedQueueFile::open(std::io::Cursor::new(data)) else {
        panic!("verify accepted a file that open rejects");
    };
    assert_eq!(file.summary(), &summary);
});
