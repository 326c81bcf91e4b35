//! A progress bar on stderr for long commands (`inspect`, `run`, `replay`, `fuzz`), drawn
//! only when stderr is a terminal and silent otherwise, so pipes and logs stay clean.
//!
//! ```no_run
//! let mut p = hostsim::progress::Progress::new(1000, "replay");
//! for _ in 0..10 {
//!     p.inc(100);
//! }
//! p.finish();
//! ```
//!
//! Redraws happen when the shown figure changes (a percent step with a known total, a
//! power-of-two count without one), never on a timer, so the bar costs a compare per
//! [`Progress::inc`] and the output is deterministic.

use std::io::{IsTerminal, Write};

/// Cells in the bar.
const BAR_CELLS: u64 = 30;

/// One progress bar. `total == 0` means "unknown": a running count is shown instead.
pub struct Progress {
    total: u64,
    done: u64,
    label: String,
    shown: Option<u64>,
    sink: Option<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("total", &self.total)
            .field("done", &self.done)
            .field("label", &self.label)
            .field("visible", &self.sink.is_some())
            .finish()
    }
}

impl Progress {
    /// A bar for `total` units labelled `label`, on stderr if it is a terminal.
    pub fn new(total: u64, label: &str) -> Progress {
        let sink: Option<Box<dyn Write + Send>> = if std::io::stderr().is_terminal() {
            Some(Box::new(std::io::stderr()))
        } else {
            None
        };
        Progress::with_sink(total, label, sink)
    }

    /// A bar that draws nothing.
    pub fn hidden(total: u64, label: &str) -> Progress {
        Progress::with_sink(total, label, None)
    }

    /// A bar drawn to `sink` (`None`: hidden), for tests and other front ends.
    pub fn with_sink(total: u64, label: &str, sink: Option<Box<dyn Write + Send>>) -> Progress {
        Progress {
            total,
            done: 0,
            label: label.to_string(),
            shown: None,
            sink,
        }
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Whether the bar draws anything.
    pub fn is_visible(&self) -> bool {
        self.sink.is_some()
    }

    /// Adds `n` units and redraws if the shown figure changed.
    pub fn inc(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        if self.sink.is_none() {
            return;
        }
        let figure = self.figure();
        if self.shown != Some(figure) {
            self.shown = Some(figure);
            self.draw("\r");
        }
    }

    /// Draws the final state and ends the line (a hidden bar does nothing).
    pub fn finish(&mut self) {
        self.end_line();
        self.sink = None;
    }

    /// Draws the current state and ends the line.
    fn end_line(&mut self) {
        self.draw("\r");
        self.write("\n");
    }

    /// Runs `f`, which writes lines of its own, with the bar out of their way: the bar's
    /// line is ended before and the bar drawn again on the next line after.
    pub fn aside<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.end_line();
        let out = f();
        self.draw("");
        out
    }

    /// What a redraw depends on: the percent, or the count's bit length.
    fn figure(&self) -> u64 {
        match self.done.saturating_mul(100).checked_div(self.total) {
            Some(percent) => percent,
            None => u64::from(64 - self.done.leading_zeros()),
        }
    }

    fn draw(&mut self, prefix: &str) {
        if self.sink.is_none() {
            return;
        }
        let text = format!("{prefix}{}", line(&self.label, self.done, self.total));
        self.write(&text);
    }

    fn write(&mut self, text: &str) {
        if let Some(sink) = &mut self.sink {
            // A progress bar that cannot be drawn is not worth failing a command for.
            if sink
                .write_all(text.as_bytes())
                .and_then(|()| sink.flush())
                .is_err()
            {
                self.sink = None;
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One bar line: `label [#####.....]  50% 500/1000`, or `label 1234` without a total.
pub fn line(label: &str, done: u64, total: u64) -> String {
    if total == 0 {
        return format!("{label} {done}");
    }
    let done = done.min(total);
    // done <= total, so the products fit in u128 and the quotients are at most the divisor.
    let cells = (u128::from(done) * u128::from(BAR_CELLS) / u128::from(total)) as usize;
    let percent = u128::from(done) * 100 / u128::from(total);
    let bar = format!(
        "{}{}",
        "#".repeat(cells),
        ".".repeat(BAR_CELLS as usize - cells)
    );
    format!("{label} [{bar}] {percent:>3}% {done}/{total}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn lines_show_bar_percent_and_count() {
        assert_eq!(
            line("inspect", 500, 1000),
            "inspect [###############...............]  50% 500/1000"
        );
        assert_eq!(
            line("x", 7, 7),
            "x [##############################] 100% 7/7"
        );
        assert_eq!(line("x", 9, 7), line("x", 7, 7));
        assert_eq!(line("fuzz", 1234, 0), "fuzz 1234");
        assert_eq!(
            line("big", u64::MAX / 2, u64::MAX),
            format!(
                "big [##############................]  49% {}/{}",
                u64::MAX / 2,
                u64::MAX
            )
        );
    }

    #[test]
    fn redraws_only_when_the_percent_changes() {
        let out = Shared::default();
        let mut p = Progress::with_sink(200, "q", Some(Box::new(out.clone())));
        for _ in 0..200 {
            p.inc(1);
        }
        p.finish();
        let text = out.text();
        // the percents 0..=100 each drawn once, then the final draw
        assert_eq!(text.matches('\r').count(), 101 + 1);
        assert!(
            text.ends_with("\rq [##############################] 100% 200/200\n"),
            "{text:?}"
        );
        assert_eq!(p.done(), 200);
    }

    #[test]
    fn lines_written_aside_go_between_the_bar_ended_and_drawn_again() {
        let out = Shared::default();
        let mut p = Progress::with_sink(4, "a", Some(Box::new(out.clone())));
        p.inc(1);
        let mut aside = out.clone();
        let got = p.aside(|| aside.write_all(b"finding\n").map(|()| 7));
        assert_eq!(got.unwrap(), 7);
        p.inc(1);
        let bar = |n| line("a", n, 4);
        let want = format!("\r{}\r{}\nfinding\n{}\r{}", bar(1), bar(1), bar(1), bar(2));
        assert_eq!(out.text(), want);
        let mut hidden = Progress::hidden(4, "h");
        assert_eq!(hidden.aside(|| 5), 5);
    }

    #[test]
    fn unknown_total_redraws_at_powers_of_two() {
        let out = Shared::default();
        let mut p = Progress::with_sink(0, "n", Some(Box::new(out.clone())));
        for _ in 0..1000 {
            p.inc(1);
        }
        drop(p);
        // bit lengths 1..=10 each drawn once, then the final draw
        assert_eq!(out.text().matches('\r').count(), 10 + 1);
        assert!(out.text().ends_with("\rn 1000\n"));
    }

    #[test]
    fn hidden_bar_writes_nothing() {
        let mut p = Progress::hidden(10, "h");
        p.inc(5);
        assert!(!p.is_visible());
        assert_eq!(p.done(), 5);
        p.finish();
    }
}
