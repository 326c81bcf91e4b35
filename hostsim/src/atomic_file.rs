//! Atomic file output: every file the tool writes (`.npy` dumps, `report.json`, queue
//! files, SVG timelines, reproducers) is written to a temporary file beside its path and
//! renamed over it, so a failed or interrupted write never leaves a truncated file. The
//! files of one command's outputs go in one [`Batch`]: all of them are written, or none.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Files written all or none. [`Batch::stage`] writes each to `path.partial`;
/// [`Batch::commit`] then renames them all into place, keeping each file it replaces aside
/// (as `path.previous`) until the last is in place, and putting every one back if a rename
/// fails. A batch dropped before its commit removes its partial files.
#[derive(Debug, Default)]
pub struct Batch {
    /// `(path, path.partial)` of each staged file, in order.
    staged: Vec<(PathBuf, PathBuf)>,
}

/// `path` with `suffix` appended to its file name.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

impl Batch {
    /// Writes `path.partial` through `fill`. On failure that file is removed (and the
    /// batch's others when it is dropped). `fail(stage, e)` makes the caller's error for
    /// an I/O failure at `stage` ("created").
    pub fn stage<E>(
        &mut self,
        path: &Path,
        fill: impl FnOnce(File) -> Result<(), E>,
        fail: impl Fn(&'static str, io::Error) -> E,
    ) -> Result<(), E> {
        let partial = beside(path, ".partial");
        let file = File::create(&partial).map_err(|e| fail("created", e))?;
        let filled = fill(file);
        // listed even if it failed, so that it is removed with the others
        self.staged.push((path.to_path_buf(), partial));
        filled
    }

    /// Renames every staged file into place, or none (the type's docs). `fail(path,
    /// stage, e)` makes the caller's error; a folder where a file would go is refused
    /// before anything moves.
    pub fn commit<E>(
        mut self,
        fail: impl Fn(&Path, &'static str, io::Error) -> E,
    ) -> Result<(), E> {
        let renamed = "renamed into place";
        for (path, _) in &self.staged {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
                return Err(fail(
                    path,
                    renamed,
                    io::Error::other("a folder is in its place"),
                ));
            }
        }
        // per file placed, whether it replaced one (kept aside)
        let mut placed: Vec<bool> = Vec::with_capacity(self.staged.len());
        for (path, partial) in &self.staged {
            let aside = beside(path, ".previous");
            let had = match std::fs::rename(path, &aside) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(self.undo(&placed, fail(path, "moved aside", e))),
            };
            if let Err(e) = std::fs::rename(partial, path) {
                if had {
                    let _ = std::fs::rename(&aside, path);
                }
                return Err(self.undo(&placed, fail(path, renamed, e)));
            }
            placed.push(had);
        }
        for ((path, _), &had) in self.staged.iter().zip(&placed) {
            if had {
                let _ = std::fs::remove_file(beside(path, ".previous"));
            }
        }
        self.staged.clear();
        Ok(())
    }

    /// Takes back the first `placed.len()` renames (each file that was replaced is put
    /// back, each new one removed); `error` passes through.
    fn undo<E>(&self, placed: &[bool], error: E) -> E {
        for ((path, _), &had) in self.staged.iter().zip(placed).rev() {
            let _ = std::fs::remove_file(path);
            if had {
                let _ = std::fs::rename(beside(path, ".previous"), path);
            }
        }
        error
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        for (_, partial) in &self.staged {
            let _ = std::fs::remove_file(partial);
        }
    }
}

/// Creates `path.partial`, lets `fill` write it, and renames it over `path`; on any
/// failure the temporary file is removed and `path` is untouched. `fail(stage, e)` makes
/// the caller's error for an I/O failure at `stage` ("created", "renamed into place").
pub fn write_with<E>(
    path: &Path,
    fill: impl FnOnce(File) -> Result<(), E>,
    fail: impl Fn(&'static str, io::Error) -> E,
) -> Result<(), E> {
    let mut batch = Batch::default();
    batch.stage(path, fill, &fail)?;
    batch.commit(|_, stage, e| fail(stage, e))
}

/// [`write_with`] for a byte string (an I/O failure while writing is stage "written").
pub fn write_bytes<E>(
    path: &Path,
    bytes: &[u8],
    fail: impl Fn(&'static str, io::Error) -> E,
) -> Result<(), E> {
    write_with(path, bytes_into(bytes, &fail), &fail)
}

/// A fill for [`Batch::stage`] that writes `bytes` (an I/O failure is stage "written").
pub fn bytes_into<'a, E>(
    bytes: &'a [u8],
    fail: &'a impl Fn(&'static str, io::Error) -> E,
) -> impl FnOnce(File) -> Result<(), E> + 'a {
    move |mut file| file.write_all(bytes).map_err(|e| fail("written", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hostsim-atomic-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn writes_through_a_partial_file() {
        let d = dir("ok");
        write_bytes(&d.join("a.txt"), b"abc", |s, e| format!("{s}: {e}")).unwrap();
        assert_eq!(std::fs::read(d.join("a.txt")).unwrap(), b"abc");
        assert!(!d.join("a.txt.partial").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_neither_file() {
        let d = dir("fail");
        std::fs::write(d.join("b"), b"old").unwrap();
        let r: Result<(), String> = write_with(&d.join("b"), |_| Err("no".into()), |s, _| s.into());
        assert_eq!(r, Err("no".to_string()));
        assert_eq!(std::fs::read(d.join("b")).unwrap(), b"old");
        assert!(!d.join("b.partial").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The file names in `d`, sorted.
    fn listing(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn stage(b: &mut Batch, path: &Path, bytes: &'static [u8]) -> Result<(), String> {
        let fail = |s: &'static str, e: io::Error| format!("{s}: {e}");
        b.stage(path, bytes_into(bytes, &fail), fail)
    }

    #[test]
    fn a_batch_puts_every_file_in_place_or_none() {
        let d = dir("batch");
        std::fs::write(d.join("a"), b"old a").unwrap();
        std::fs::create_dir(d.join("c")).unwrap();
        let fail = |p: &Path, s: &'static str, _| format!("{}: {s}", p.display());
        // all in place, the replaced file's copy gone
        let mut b = Batch::default();
        stage(&mut b, &d.join("a"), b"new a").unwrap();
        stage(&mut b, &d.join("b"), b"new b").unwrap();
        b.commit(fail).unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new a");
        assert_eq!(listing(&d), ["a", "b", "c"]);
        // a folder where a file goes: refused before anything moves
        let mut b = Batch::default();
        stage(&mut b, &d.join("a"), b"newer a").unwrap();
        stage(&mut b, &d.join("c"), b"c").unwrap();
        let e = b.commit(fail).unwrap_err();
        assert!(e.ends_with("c: renamed into place"), "{e}");
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new a");
        assert_eq!(listing(&d), ["a", "b", "c"]);
        // a rename failing after others were done: they are taken back
        let mut b = Batch::default();
        stage(&mut b, &d.join("a"), b"newest a").unwrap();
        stage(&mut b, &d.join("z"), b"z").unwrap();
        stage(&mut b, &d.join("b"), b"newest b").unwrap();
        std::fs::remove_file(d.join("b.partial")).unwrap();
        let e = b.commit(fail).unwrap_err();
        assert!(e.ends_with("b: renamed into place"), "{e}");
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new a");
        assert_eq!(std::fs::read(d.join("b")).unwrap(), b"new b");
        assert_eq!(listing(&d), ["a", "b", "c"]);
        // a batch dropped uncommitted leaves nothing
        let mut b = Batch::default();
        stage(&mut b, &d.join("y"), b"y").unwrap();
        drop(b);
        assert_eq!(listing(&d), ["a", "b", "c"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_folder_fails_at_creation() {
        let d = dir("missing");
        let r = write_bytes(&d.join("no/c"), b"x", |s, _| s);
        assert_eq!(r, Err("created"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
