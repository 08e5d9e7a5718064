//! A task's run history: the `runs.jsonl` file, one report line per run
//! (and one record per `reset` that kept it), in its tracking store or
//! under the run's history base. This module says where it is and
//! appends to it; `run_report` writes what goes in it.

use super::arrays::RUNS_FILE;
use std::path::Path;

/// Where the run history of task `task_id` lives: `<store>/runs.jsonl`
/// for a tracked task, else `<history base>/<task id>/runs.jsonl`, else
/// None (the report is only returned).
pub fn history_file(
    task_id: &str,
    store: Option<&Path>,
    history_base: Option<&Path>,
) -> Option<std::path::PathBuf> {
    match (store, history_base) {
        (Some(store), _) => Some(store.join(RUNS_FILE)),
        (None, Some(base)) => Some(base.join(task_id).join(RUNS_FILE)),
        (None, None) => None,
    }
}

/// Append `line` and a newline to the `runs.jsonl` at `path` (created, with
/// its directory, if missing; private, never through a planted link: see
/// `crate::private_files`) in one write call, so that concurrent appends
/// never interleave.
/// After a last line that was cut short (a full disk, a killed writer) the
/// new line starts a line of its own: only the damaged line is lost, and
/// readers skip it.
pub fn append_runs_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = crate::private_files::open_append(path)?;
    let len = f.metadata()?.len();
    let mut text = String::with_capacity(line.len() + 2);
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            text.push('\n');
        }
    }
    text.push_str(line);
    text.push('\n');
    f.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_line_after_a_torn_one_starts_a_line_of_its_own() {
        let dir = std::env::temp_dir().join(format!("daisy-history-torn-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let runs = dir.join(RUNS_FILE);
        append_runs_line(&runs, r#"{"a":1}"#).unwrap();
        // a full disk cut the next line short
        let mut text = fs::read_to_string(&runs).unwrap();
        text.push_str(r#"{"b":"#);
        fs::write(&runs, &text).unwrap();
        append_runs_line(&runs, r#"{"c":3}"#).unwrap();
        append_runs_line(&runs, r#"{"d":4}"#).unwrap();
        let lines: Vec<String> = fs::read_to_string(&runs)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(
            lines,
            [r#"{"a":1}"#, r#"{"b":"#, r#"{"c":3}"#, r#"{"d":4}"#]
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
