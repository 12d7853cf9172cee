//! A status line on stderr: rewritten in place on a terminal, one line per
//! update otherwise (a file, a pipe, cron's mail), where escape codes would
//! only be noise.

use std::io::{IsTerminal, Write};

pub(crate) struct LiveLine {
    terminal: bool,
    shown: bool,
}

impl LiveLine {
    /// A line on stderr, in place when stderr is a terminal.
    pub(crate) fn stderr() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// Whether updates overwrite each other (stderr is a terminal).
    pub(crate) fn in_place(&self) -> bool {
        self.terminal
    }

    /// Whether anything was shown yet.
    pub(crate) fn shown(&self) -> bool {
        self.shown
    }

    pub(crate) fn show(&mut self, line: &str) {
        self.shown = true;
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Erase whatever line a terminal shows now (another `LiveLine` may
    /// have written it).
    pub(crate) fn clear_any(&mut self) {
        self.shown = true;
        self.clear();
    }

    /// Erase the line on a terminal (nothing to do elsewhere).
    pub(crate) fn clear(&mut self) {
        if self.terminal && self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}
