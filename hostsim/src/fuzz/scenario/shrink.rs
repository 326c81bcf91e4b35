//! Minimized reproducers of `fuzz --scenario` findings.
//!
//! [`shrink`] drops what the finding does not need, one thing at a time, keeping a drop
//! only if the same finding (check, op, route) remains: first each edit (so the fewest
//! index positions differ from the user's values), then each op other than the
//! finding's, last first. [`write`] puts the result in a folder as a runnable scenario,
//! its `.npy` files, `finding.txt` and the command that shows it.

use std::fmt::Write as _;
use std::path::Path;

use super::{shown, Base, Came, Checker, Found, Mutation};
use crate::error::Error;
use crate::scenario::exec::write_atomic;

/// `m` with the edits and ops `f` does not need dropped, and the finding it then makes.
pub fn shrink(
    base: &Base,
    checker: &mut Checker,
    mut m: Mutation,
    mut f: Found,
) -> (Mutation, Found) {
    let signature = f.signature();
    let mut still = |t: &Mutation| match super::case(base, checker, t) {
        Came::Found(g) => (g.signature() == signature).then_some(g),
        _ => None,
    };
    let mut i = 0;
    while i < m.edits.len() {
        let mut t = m.clone();
        t.edits.remove(i);
        match still(&t) {
            Some(g) => (m, f) = (t, g),
            None => i += 1,
        }
    }
    for op in (0..m.keep.len()).rev() {
        if Some(op) == f.op || !m.keep[op] {
            continue;
        }
        let mut t = m.clone();
        t.keep[op] = false;
        if let Some(g) = still(&t) {
            (m, f) = (t, g);
        }
    }
    (m, f)
}

/// Writes `m` under `dir`: `scenario.toml`, its `.npy` files and `finding.txt`; returns
/// the command that reproduces the finding.
pub fn write(
    dir: &Path,
    base: &Base,
    m: &Mutation,
    f: &Found,
    (seed, index): (u64, u64),
) -> Result<String, Error> {
    let (scenario, arrays) = base.apply(m);
    std::fs::create_dir_all(dir).map_err(|e| Error::FuzzReproducer {
        path: dir.display().to_string(),
        rule: format!("the folder cannot be created: {e}"),
    })?;
    for (file, array) in &arrays {
        crate::npy::write(&dir.join(file), array)?;
    }
    let command = command(dir, f);
    let mut toml = format!(
        "# hostsim fuzz --scenario {} --seed {seed}: case {index}, minimized\n# {}\n\n",
        base.loaded.file, command
    );
    toml.push_str(&scenario.to_toml()?);
    write_atomic(&dir.join("scenario.toml"), toml.as_bytes())?;
    write_atomic(
        &dir.join("finding.txt"),
        finding_text(base, m, f, &command).as_bytes(),
    )?;
    Ok(command)
}

/// The command that shows `f`: a sanitizer, fail-open or duplicates finding on the
/// reference route, a disagreement on the route that disagreed.
fn command(dir: &Path, f: &Found) -> String {
    let path = shown(dir);
    match f.mechanism {
        Some(m) => format!(
            "hostsim run {path} --sanitize --mechanism {} (and --mechanism reference)",
            m.name()
        ),
        None => format!("hostsim run {path} --sanitize --mechanism reference"),
    }
}

fn finding_text(base: &Base, m: &Mutation, f: &Found, command: &str) -> String {
    let mut t = format!("{}: {}\n\n", f.check, f.what);
    let _ = writeln!(t, "generation: {}", m.generation);
    let kept: Vec<String> = (0..m.keep.len())
        .filter(|&i| m.keep[i])
        .map(|i| i.to_string())
        .collect();
    let _ = writeln!(t, "ops kept (of the original): {}", kept.join(", "));
    let _ = writeln!(t, "changes from {}:", base.loaded.file);
    for line in base.describe(m) {
        let _ = writeln!(t, "  {line}");
    }
    let _ = writeln!(t, "\nreproduce: {command}");
    t
}
