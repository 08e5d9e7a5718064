//! Reading a run history (`runs.jsonl`) back: each line decoded by the
//! report's own types ([`TaskReport`], the schema's one definition), so no
//! reader keeps a second copy of what a line must hold.
//!
//! A history is appended to by every run for days, by runs of several
//! daisy versions, and sometimes by hand or by a full disk. So a line that
//! is no report (cut short, another program's JSON, a hand edit) is
//! skipped with its number and the reason, and the rest of the history is
//! read; a key added to the report after a line was written reads as its
//! default (`#[serde(default)]` on the type). A reset record
//! (`{"reset_at": <epoch seconds>}`, written by `Task.reset()` where it
//! keeps the history) marks the next report as the first after a reset.
//!
//! Each report is handed out re-encoded from its type, so every key is
//! there, defaults filled in: a reader never guesses a missing key.

use super::TaskReport;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// The key of a reset record.
pub const RESET_KEY: &str = "reset_at";

/// One report read from a history.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadReport {
    /// Its line number, from 1.
    pub line: usize,
    /// Whether a reset record came before it (since the report before).
    pub after_reset: bool,
    /// The report.
    pub report: TaskReport,
}

/// What a history holds: its reports, oldest first, and the lines that
/// are no report, with why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// The reports.
    pub reports: Vec<ReadReport>,
    /// `(line number, reason)` of each line skipped.
    pub skipped: Vec<(usize, String)>,
}

/// serde's words for JSON's kinds and Rust's types, as a user reads them.
const WORDS: [(&str, &str); 13] = [
    ("invalid type: sequence", "a list"),
    ("invalid type: map", "an object"),
    ("invalid type: null", "null"),
    ("invalid type: string", "a string"),
    ("invalid type: integer", "a number"),
    ("invalid type: floating point", "a number"),
    ("invalid type: boolean", "true or false"),
    ("expected u64", "expected a whole number"),
    ("expected u32", "expected a whole number"),
    ("expected f64", "expected a number"),
    ("expected a string", "expected a string"),
    ("expected a sequence", "expected a list"),
    ("expected a map", "expected an object"),
];

/// Why `value` is not a report, in words: where in the line (a key path)
/// and what is wrong there.
fn reason(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let mut inner = error.inner().to_string();
    for (rust, words) in WORDS {
        inner = inner.replace(rust, words);
    }
    // "expected struct TaskReport" and the like: the report's own type
    // names mean nothing to a reader of the file
    if let Some(at) = inner.find(", expected struct ") {
        inner.truncate(at);
        inner.push_str(", expected an object");
    }
    let path = error.path().to_string();
    if path.is_empty() || path == "." {
        inner
    } else {
        format!("{path}: {inner}")
    }
}

/// Decode one line: Ok(None) for a reset record.
fn decode(line: &str) -> Result<Option<TaskReport>, String> {
    let value: Value = serde_json::from_str(line).map_err(|_| "damaged: not JSON".to_string())?;
    let kind = match &value {
        Value::Object(_) => None,
        Value::Array(_) => Some("a list"),
        Value::Null => Some("null"),
        Value::String(_) => Some("a string"),
        Value::Number(_) => Some("a number"),
        Value::Bool(_) => Some("true or false"),
    };
    if let Some(kind) = kind {
        // serde would take a list for a struct's fields in order
        return Err(format!("{kind}, not a report"));
    }
    if value.get(RESET_KEY).is_some() && value.get("task_id").is_none() {
        return Ok(None);
    }
    serde_path_to_error::deserialize(value)
        .map(Some)
        .map_err(|e| reason(&e))
}

/// Read the history at `path` (an error only when the file cannot be
/// read; a missing file is an empty history).
pub fn read_history(path: &Path) -> std::io::Result<History> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(History::default()),
        Err(e) => return Err(e),
    };
    let mut history = History::default();
    let mut after_reset = false;
    let mut reader = std::io::BufReader::new(file);
    let mut bytes = Vec::new();
    let mut number = 0;
    loop {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        number += 1;
        let line = String::from_utf8_lossy(&bytes);
        if line.trim().is_empty() {
            continue;
        }
        match decode(&line) {
            Ok(None) => after_reset = true,
            Ok(Some(report)) => {
                history.reports.push(ReadReport {
                    line: number,
                    after_reset,
                    report,
                });
                after_reset = false;
            }
            Err(why) => history.skipped.push((number, why)),
        }
    }
    Ok(history)
}

/// When the last reset recorded in the history at `path` happened (its
/// `reset_at`, seconds since the UNIX epoch); None for a history without
/// one, or no history. It reads the whole file (a reset record is small and
/// can lie anywhere): for the forecast and a run's first ETA, once each.
pub fn read_last_reset(path: &Path) -> std::io::Result<Option<f64>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut last = None;
    let mut reader = std::io::BufReader::new(file);
    let mut bytes = Vec::new();
    let key = format!("\"{RESET_KEY}\"");
    loop {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        // a report line is a few KB: only lines naming the key are decoded
        let line = String::from_utf8_lossy(&bytes);
        if !line.contains(&key) {
            continue;
        }
        if let Ok(value) = serde_json::from_str::<Value>(&line)
            && value.get("task_id").is_none()
            && let Some(at) = value.get(RESET_KEY).and_then(Value::as_f64)
        {
            last = Some(at);
        }
    }
    Ok(last)
}

/// Bytes read at a time from the end of a history by
/// [`read_last_report`]: a report line is a few KB, so one read finds the
/// last report of almost any history.
const TAIL_CHUNK: u64 = 64 << 10;

/// The last report of the history at `path`, read from the end: constant
/// time in the length of the history (a history of a long-lived task grows
/// to hundreds of MB, and reading it all took a minute per command). Lines
/// that are no report and reset records are passed over, as
/// [`read_history`] skips them; None for a missing file or one without a
/// report.
pub fn read_last_report(path: &Path) -> std::io::Result<Option<TaskReport>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut end = file.seek(SeekFrom::End(0))?;
    // bytes after the last newline seen so far, not yet a whole line
    let mut carry: Vec<u8> = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(TAIL_CHUNK);
        let mut chunk = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&carry);
        end = start;
        // every line but the first is whole; the first is whole only at
        // the file's start
        let mut lines: Vec<&[u8]> = chunk.split(|&b| b == b'\n').collect();
        let first = if start > 0 {
            Some(lines.remove(0))
        } else {
            None
        };
        for line in lines.iter().rev() {
            let text = String::from_utf8_lossy(line);
            if text.trim().is_empty() {
                continue;
            }
            if let Ok(Some(report)) = decode(&text) {
                return Ok(Some(report));
            }
        }
        carry = first.map(<[u8]>::to_vec).unwrap_or_default();
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_report_is_read_from_the_end_past_odd_lines_and_resets() {
        let dir = std::env::temp_dir().join(format!("daisy-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runs.jsonl");
        assert_eq!(read_last_report(&path).unwrap(), None, "missing: none");
        let report = |id: &str, at: f64| {
            changed(&a_report(), |v| {
                v["task_id"] = Value::from(id);
                v["finished_at"] = Value::from(at);
            })
        };
        // many reports, longer than one chunk, then a reset, a damaged line
        let mut text = String::new();
        for i in 0..200 {
            text += &report("t", f64::from(i));
            text += "\n";
        }
        text += &report("t", 999.0);
        text += "\n{\"reset_at\": 1.0}\n{\"task_id\": \"cut short\n\n";
        std::fs::write(&path, &text).unwrap();
        assert!(
            text.len() as u64 > TAIL_CHUNK,
            "spans chunks: {}",
            text.len()
        );
        let last = read_last_report(&path).unwrap().unwrap();
        assert_eq!(last.finished_at, 999.0);
        let all = read_history(&path).unwrap();
        assert_eq!(
            all.reports.last().unwrap().report,
            last,
            "the same as reading it all"
        );
        std::fs::write(&path, "not json\n").unwrap();
        assert_eq!(read_last_report(&path).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn a_report() -> String {
        let report = TaskReport {
            task_id: "seg".into(),
            ..TaskReport::default()
        };
        serde_json::to_string(&report).unwrap()
    }

    fn changed(line: &str, change: impl Fn(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(line).unwrap();
        change(&mut v);
        v.to_string()
    }

    #[test]
    fn odd_lines_are_skipped_saying_where_and_why_and_resets_mark_the_next() {
        let real = a_report();
        let dir = std::env::temp_dir().join(format!("daisy-history-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runs.jsonl");
        let odd = [
            (r#"{"a": 1}"#.to_string(), "missing field `task_id`"),
            ("[1, 2]".to_string(), "a list"),
            ("null".to_string(), "null"),
            ("42".to_string(), "a number"),
            (
                changed(&real, |v| v["blocks"]["count"] = "four".into()),
                "blocks.count: a string",
            ),
            (
                changed(&real, |v| {
                    v["blocks"]["wall"].as_object_mut().unwrap().remove("sum");
                }),
                "blocks.wall: missing field `sum`",
            ),
            (
                changed(&real, |v| v["task_id"] = 7.into()),
                "task_id: a number",
            ),
            (real[..real.len() / 2].to_string(), "damaged: not JSON"),
        ];
        let mut text = format!("{real}\n{{\"reset_at\": 1.5}}\n\n{real}\n");
        for (line, _) in &odd {
            text.push_str(line);
            text.push('\n');
        }
        // a key added after a line was written reads as its default
        text.push_str(&changed(&real, |v| {
            v.as_object_mut().unwrap().remove("notices");
        }));
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        let history = read_history(&path).unwrap();
        let lines: Vec<(usize, bool)> = history
            .reports
            .iter()
            .map(|r| (r.line, r.after_reset))
            .collect();
        assert_eq!(lines, [(1, false), (4, true), (13, false)]);
        assert_eq!(history.skipped.len(), odd.len());
        for ((number, why), (_, expected)) in history.skipped.iter().zip(odd.iter()) {
            assert!(
                why.contains(expected),
                "line {number}: {why:?}, expected {expected:?}"
            );
        }
        assert!(
            read_history(&dir.join("none.jsonl"))
                .unwrap()
                .reports
                .is_empty()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
