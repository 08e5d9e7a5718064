//! Why blocks failed: the bounded tally of failure messages a report line
//! keeps ([`FailureCauses`]) and the text helpers it and the ledger share
//! (a failure text's last line, its tail). Bounds are in bytes so a run
//! whose every block fails with a long traceback keeps a short line.

use super::*;

/// What a block lost with its worker's connection is first put down as;
/// [`RunLedger::explain_lost`] replaces it once the worker's end is known.
pub const CONNECTION_CLOSED: &str = "the connection to its worker closed";

impl FailureCauses {
    /// One attempt counted as `old` (a one-line text) counts as `new`
    /// instead: the first traceback too, where it was `old`.
    pub fn restate(&mut self, old: &str, new: &str) {
        if self.first_traceback.as_deref() == Some(old) {
            self.first_traceback = Some(tail(new.trim_end(), FIRST_TRACEBACK_BYTES));
        }
        let old_cause = cause_of(old);
        if let Some(i) = self
            .messages
            .iter()
            .position(|c| c.cause == old_cause && (!c.cause.is_empty() || c.message == old))
        {
            self.messages[i].count -= 1;
            if self.messages[i].count == 0 {
                self.messages.remove(i);
            }
        } else {
            self.other = self.other.saturating_sub(1);
        }
        self.note_message(new);
    }

    /// Count one failed attempt's text.
    pub fn note(&mut self, text: &str) {
        if self.first_traceback.is_none() {
            self.first_traceback = Some(tail(text.trim_end(), FIRST_TRACEBACK_BYTES));
        }
        self.note_message(text);
    }

    fn note_message(&mut self, text: &str) {
        let message = worker_end(text).unwrap_or_else(|| last_line(text));
        let cause = cause_of(text);
        let same =
            |c: &&mut CauseCount| c.cause == cause && (!cause.is_empty() || c.message == message);
        if let Some(c) = self.messages.iter_mut().find(same) {
            c.count += 1;
        } else if self.messages.len() < MAX_CAUSES {
            self.messages.push(CauseCount {
                message,
                count: 1,
                cause,
            });
        } else {
            self.other += 1;
        }
    }
}

/// A block lost with its worker, as the server words it (`worker 7 died
/// (signal: 9 (SIGKILL); likely killed by the OOM killer ...; its last
/// block peaked at 1.2 GiB RSS ...)`, `worker 8 exited (exit status: 0)
/// with the block in hand`), without what differs from worker to worker:
/// its id and the hint's figures (`a worker died (signal: 9 (SIGKILL))`).
/// Four workers killed alike are one cause, counted four times. None for
/// any other text.
fn worker_end(text: &str) -> Option<String> {
    let rest = text.trim().strip_prefix("worker ")?;
    let (id, rest) = rest.split_once(' ')?;
    id.parse::<u32>().ok()?;
    if let Some(status) = rest.strip_prefix("died (") {
        let status = match status.split_once("; ") {
            Some((status, _hint)) => status,
            None => status.strip_suffix(')')?,
        };
        return Some(format!("a worker died ({status})"));
    }
    let status = rest
        .strip_prefix("exited (")?
        .strip_suffix(") with the block in hand")?;
    Some(format!("a worker exited ({status}) with the block in hand"))
}

/// The cause of a failure text that is a Python traceback: its exception
/// type and the innermost frame (the line that raised), as `"ValueError at
/// smooth.py:12 in smooth"`; empty for any other text, which groups by its
/// message (a worker's end by [`worker_end`]'s words). The file is named
/// by its last path part: the same function fails the same way wherever
/// the worker unpacked it.
pub fn cause_of(text: &str) -> String {
    let frame = text.lines().rev().find_map(|l| {
        let rest = l.trim_start().strip_prefix("File \"")?;
        let (path, rest) = rest.split_once("\", line ")?;
        let (line, func) = rest.split_once(", in ")?;
        line.parse::<u64>().ok()?;
        let file = path.rsplit('/').next().unwrap_or(path);
        Some(format!("{file}:{line} in {}", func.trim()))
    });
    let Some(frame) = frame else {
        return String::new();
    };
    let last = last_line(text);
    let kind = last.split(':').next().unwrap_or("").trim();
    let is_name = !kind.is_empty()
        && kind.len() <= 200
        && kind
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if !is_name {
        return String::new();
    }
    format!("{kind} at {frame}")
}

/// The last `max` bytes of `text` (on a character boundary), marked with a
/// leading `…` when cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// The longest last line kept of a failure text that is not kept whole.
pub const FAILURE_LINE_BYTES: usize = 512;

/// The last non-empty line of a failure text (the exception, for a Python
/// traceback), cut to [`FAILURE_LINE_BYTES`] on a character boundary.
pub fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut end = line.len().min(FAILURE_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}
