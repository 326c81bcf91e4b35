//! Atomic file output: every file the tool writes (`.npy` dumps, `report.json`, queue
//! files, SVG timelines, reproducers) is written to a temporary file beside its path and
//! renamed over it, so a failed or interrupted write never leaves a truncated file.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Creates `path.partial`, lets `fill` write it, and renames it over `path`; on any
/// failure the temporary file is removed and `path` is untouched. `fail(stage, e)` makes
/// the caller's error for an I/O failure at `stage` ("created", "renamed into place").
pub fn write_with<E>(
    path: &Path,
    fill: impl FnOnce(File) -> Result<(), E>,
    fail: impl Fn(&'static str, io::Error) -> E,
) -> Result<(), E> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).map_err(|e| fail("created", e))?;
    let done = fill(file)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| fail("renamed into place", e)));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// [`write_with`] for a byte string (an I/O failure while writing is stage "written").
pub fn write_bytes<E>(
    path: &Path,
    bytes: &[u8],
    fail: impl Fn(&'static str, io::Error) -> E,
) -> Result<(), E> {
    write_with(
        path,
        |mut file| file.write_all(bytes).map_err(|e| fail("written", e)),
        &fail,
    )
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

    #[test]
    fn a_missing_folder_fails_at_creation() {
        let d = dir("missing");
        let r = write_bytes(&d.join("no/c"), b"x", |s, _| s);
        assert_eq!(r, Err("created"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
