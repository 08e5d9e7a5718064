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

#[cfg(test)]
mod tests {
    use super::*;

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
