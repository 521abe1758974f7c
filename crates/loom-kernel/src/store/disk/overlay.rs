//! A redb storage backend that reads a store file and keeps every write in memory: how a
//! read-only open reads a store that was not closed cleanly (`docs/STORAGE.md`, "Reading a
//! store that was not closed cleanly").
//!
//! redb repairs a file left by a crash before it reads it, and the journal holds commits the
//! tables lack; both are writes. Over this backend they land in memory only: the file is
//! opened for reading, never written, synced or resized, and the process sees the store as
//! of its journal's last durable commit. The memory taken is the pages redb's repair and the
//! journal's commits touch, not the file.
//!
//! Locks: every lock redb asks for is taken *shared* on the read-only file. A writer that holds
//! the file (a server running flows on it) holds its bytes exclusively, so the open is refused
//! as already open, and other readers share the file as they do with a plain read-only open.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use redb::{BackendError, StorageBackend, backends::FileBackend};

/// The unit in which written bytes are kept: redb's pages are multiples of it.
const BLOCK: u64 = 4096;

/// The file underneath, read-only, and the writes made over it.
pub(super) struct Overlay {
    file: FileBackend,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The length redb sees.
    len: u64,
    /// How many bytes from the start still read through to the file: a shrink below the
    /// file's length hides what lies past it, and later growth reads as zeros there.
    file_visible: u64,
    /// Written blocks, by index, whole.
    blocks: BTreeMap<u64, Box<[u8]>>,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Overlay")
            .field("len", &state.len)
            .field("blocks_written", &state.blocks.len())
            .finish()
    }
}

impl Overlay {
    /// Over `file`, opened for reading.
    pub(super) fn new(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(Self {
            file: FileBackend::new(file).map_err(io::Error::other)?,
            state: Mutex::new(State {
                len,
                file_visible: len,
                blocks: BTreeMap::new(),
            }),
        })
    }

    /// The bytes written over the file so far.
    #[cfg(test)]
    fn bytes_held(&self) -> u64 {
        self.state().blocks.len() as u64 * BLOCK
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the map was held leaves it whole (each change is one insert or
        // removal), so a poisoned lock is still good to read.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The bytes of block `index` as the file shows them (zeros past its visible part).
    fn base_block(&self, state: &State, index: u64) -> io::Result<Box<[u8]>> {
        let mut block = vec![0u8; BLOCK as usize].into_boxed_slice();
        let start = index * BLOCK;
        if start < state.file_visible {
            let readable = (state.file_visible - start).min(BLOCK) as usize;
            self.file.read(start, &mut block[..readable])?;
        }
        Ok(block)
    }
}

fn past_the_end(offset: u64, len: usize, store_len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "a read of {len} bytes at {offset} passes the end of the storage ({store_len} bytes)"
        ),
    )
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.state().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.state();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|end| *end <= state.len)
            .ok_or_else(|| past_the_end(offset, out.len(), state.len))?;
        let mut at = offset;
        while at < end {
            let index = at / BLOCK;
            let within = (at % BLOCK) as usize;
            let take = ((BLOCK - at % BLOCK).min(end - at)) as usize;
            let into = &mut out[(at - offset) as usize..][..take];
            match state.blocks.get(&index) {
                Some(block) => into.copy_from_slice(&block[within..within + take]),
                None if at < state.file_visible => {
                    let readable = (state.file_visible - at).min(take as u64) as usize;
                    self.file.read(at, &mut into[..readable])?;
                    into[readable..].fill(0);
                }
                None => into.fill(0),
            }
            at += take as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.state();
        if len < state.len {
            let first_gone = len.div_ceil(BLOCK);
            state.blocks.split_off(&first_gone);
            if !len.is_multiple_of(BLOCK)
                && let Some(block) = state.blocks.get_mut(&(len / BLOCK))
            {
                block[(len % BLOCK) as usize..].fill(0);
            }
            state.file_visible = state.file_visible.min(len);
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.state();
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a write past the largest offset",
            )
        })?;
        let mut at = offset;
        while at < end {
            let index = at / BLOCK;
            let within = (at % BLOCK) as usize;
            let take = ((BLOCK - at % BLOCK).min(end - at)) as usize;
            if !state.blocks.contains_key(&index) {
                let base = self.base_block(&state, index)?;
                state.blocks.insert(index, base);
            }
            if let Some(block) = state.blocks.get_mut(&index) {
                block[within..within + take]
                    .copy_from_slice(&data[(at - offset) as usize..][..take]);
            }
            at += take as u64;
        }
        state.len = state.len.max(end);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        // Waiting here would wait for a writer to let go of the file: an open that meets one
        // is refused instead.
        match self.file.try_lock_shared_range(start, end)? {
            true => Ok(()),
            false => Err(BackendError::Io(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the store file is held by another process",
            ))),
        }
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.lock_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay_over(bytes: &[u8]) -> (tempfile::NamedTempFile, Overlay) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        let overlay = Overlay::new(File::open(file.path()).unwrap()).unwrap();
        (file, overlay)
    }

    fn read(overlay: &Overlay, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0xAA; len];
        overlay.read(offset, &mut out).unwrap();
        out
    }

    #[test]
    fn writes_are_read_back_and_never_reach_the_file() {
        let original: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (file, overlay) = overlay_over(&original);
        overlay.write(4090, &[1; 20]).unwrap();
        let mut expected = original.clone();
        expected[4090..4110].fill(1);
        assert_eq!(read(&overlay, 0, 10_000), expected);
        assert_eq!(overlay.bytes_held(), 2 * BLOCK, "two blocks touched");
        overlay.sync_data().unwrap();
        assert_eq!(std::fs::read(file.path()).unwrap(), original);
    }

    #[test]
    fn growth_reads_as_zeros_and_a_shrink_hides_the_file_past_it() {
        let (_file, overlay) = overlay_over(&[7; 6000]);
        overlay.set_len(5000).unwrap();
        overlay.set_len(9000).unwrap();
        let bytes = read(&overlay, 0, 9000);
        assert!(bytes[..5000].iter().all(|b| *b == 7));
        assert!(
            bytes[5000..].iter().all(|b| *b == 0),
            "hidden bytes come back as zeros"
        );
        overlay.write(8990, &[3; 30]).unwrap();
        assert_eq!(overlay.len().unwrap(), 9020);
        assert_eq!(read(&overlay, 8990, 30), vec![3; 30]);
    }

    #[test]
    fn a_shrink_zeros_the_cut_part_of_a_written_block() {
        let (_file, overlay) = overlay_over(&[]);
        overlay.set_len(BLOCK).unwrap();
        overlay.write(0, &[9; BLOCK as usize]).unwrap();
        overlay.set_len(100).unwrap();
        overlay.set_len(BLOCK).unwrap();
        let bytes = read(&overlay, 0, BLOCK as usize);
        assert!(bytes[..100].iter().all(|b| *b == 9));
        assert!(bytes[100..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_read_past_the_end_is_an_error_not_a_panic() {
        let (_file, overlay) = overlay_over(&[1; 10]);
        let mut out = [0u8; 8];
        assert!(overlay.read(5, &mut out).is_err());
        assert!(overlay.read(u64::MAX - 2, &mut out).is_err());
        assert!(overlay.write(u64::MAX - 2, &out).is_err());
    }
}
