//! A task id, and the directories it names.
//!
//! A task id names the task's log directory (`<log base>/<task id>`) and,
//! with a tracking base directory, its tracking store (`<base>/<task id>`),
//! and it shows in every log line and summary. Frameworks name tasks after
//! their datasets (dacapo-ml's `predict_{run}_{dataset}`, where a dataset
//! is a path such as `0/val/raw`), and daisy 2.0.0 takes such an id and
//! nests it: `<base>/predict_run/0/val`. So an id is a relative path of
//! one or more segments joined by `/`, and this module is the one place
//! that decides which such paths are safe:
//!
//! - every segment is a non-empty file name of at most
//!   [`MAX_SEGMENT_BYTES`] bytes that is neither `.` nor `..`, so that the
//!   id never leaves its base directory (`..`, a leading `/`) and never
//!   names the directory of another id (`a/./b`, `a//b` and `a/` are `a/b`
//!   and `a` on disk: two tasks that look different would share a store);
//! - no character may forge or hide text where the id is shown: no control
//!   character (a newline would forge a log line; NUL ends a C path), no
//!   bidirectional control (which shows one id as another), and no
//!   backslash (a separator where a share is served to Windows);
//! - the whole id is at most [`MAX_TASK_ID_BYTES`] bytes.
//!
//! What this module cannot see from one id alone is two ids nesting: the
//! store of `a/b` would lie inside the store of `a`. [`nests_in`] says
//! whether one id's directory lies in another's, for the run plan's check
//! of one run's stores; a store found inside (or holding) another store
//! on disk, from a run before, is the tracking store's refusal.
//!
//! [`task_dir`] joins an id to a base directory and makes each directory
//! of the id's path private on the way (`crate::private_files`), so a
//! nested id's intermediate directories get the same checks as its last.

use crate::error::DaisyError;
use std::path::{Path, PathBuf};

/// The longest segment of a task id, in bytes: each segment names a
/// directory, and a file name has at most 255 bytes on Linux filesystems.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// The longest task id, in bytes. The id is joined to a base directory and
/// then to a store's or a log's own files, and a Linux path has at most
/// 4,096 bytes (`PATH_MAX`): a quarter of that leaves room for the base.
pub const MAX_TASK_ID_BYTES: usize = 1024;

/// True for characters that reorder or hide text on a terminal (the
/// Unicode bidirectional controls): an id holding one shows as another.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The segments of a path-like id as a directory would see them: empty
/// ones and `.` dropped, `..` dropped (it is refused anyway; the
/// suggestion must not keep it).
fn plain_segments(task_id: &str) -> impl Iterator<Item = &str> {
    task_id
        .split('/')
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
}

/// An id like `task_id` that the rule takes, for the refusal's advice.
fn suggestion(task_id: &str) -> String {
    let segments: Vec<String> = plain_segments(task_id)
        .map(|segment| {
            let s: String = segment
                .chars()
                .filter(|c| !c.is_control() && !is_bidi_control(*c))
                .map(|c| if c == '\\' { '-' } else { c })
                .collect();
            let mut end = s.len().min(64);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        })
        .filter(|s| !s.is_empty() && s != "." && s != "..")
        .collect();
    if segments.is_empty() {
        "task".to_string()
    } else {
        segments.join("/")
    }
}

/// The rule for a task id (see the module's doc): `Ok` for an id that is
/// safe to join to a base directory, else a refusal that names the rule it
/// breaks, why the rule exists and an id that would do.
pub fn check_task_id(task_id: &str) -> Result<(), DaisyError> {
    if task_id.is_empty() {
        return Err(DaisyError::invalid(
            "task_id",
            "must be a non-empty string naming the task",
        ));
    }
    let refuse = |why: String| {
        Err(DaisyError::invalid(
            "task_id",
            format!(
                "{task_id:?} cannot be a task id: {why}. A task id names the task's log \
                 directory and tracking store (`/` nests them, as in \"predict/0/val\") and \
                 shows in every log line. Use an id such as {:?}",
                suggestion(task_id)
            ),
        ))
    };
    if task_id.chars().any(char::is_control) {
        return refuse("it holds a control character (a newline, a tab, NUL, ...)".into());
    }
    if task_id.chars().any(is_bidi_control) {
        return refuse(
            "it holds a bidirectional control character (which shows the id as another)".into(),
        );
    }
    if task_id.contains('\\') {
        return refuse(
            "it holds a backslash, which a share served to Windows reads as a path separator"
                .into(),
        );
    }
    if task_id.starts_with('/') {
        return refuse(
            "it starts with `/`, so it would name a directory outside the base directory".into(),
        );
    }
    let plain = plain_segments(task_id).collect::<Vec<_>>().join("/");
    for segment in task_id.split('/') {
        match segment {
            ".." => {
                return refuse(
                    "it holds a `..` segment, which names the directory above and can leave \
                     the base directory"
                        .into(),
                );
            }
            "." if task_id == "." => {
                return refuse("it is `.`, the base directory itself".into());
            }
            "." => {
                return refuse(format!(
                    "it holds a `.` segment, so it names the same directory as the id {plain:?}"
                ));
            }
            "" if task_id.ends_with('/') => {
                return refuse(format!(
                    "it ends with `/`, so it names the same directory as the id {plain:?}"
                ));
            }
            "" => {
                return refuse(format!(
                    "it holds an empty segment (`//`), so it names the same directory as the \
                     id {plain:?}"
                ));
            }
            s if s.len() > MAX_SEGMENT_BYTES => {
                let mut end = 24;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                return refuse(format!(
                    "its segment {:?}... is {} bytes long, more than the {MAX_SEGMENT_BYTES} a \
                     file name may have",
                    &s[..end],
                    s.len()
                ));
            }
            _ => {}
        }
    }
    if task_id.len() > MAX_TASK_ID_BYTES {
        return refuse(format!(
            "it is {} bytes long, more than the {MAX_TASK_ID_BYTES} a task id may have (it is \
             joined to a base directory, and a path has at most 4,096 bytes)",
            task_id.len()
        ));
    }
    Ok(())
}

/// Whether the directory of id `inner` lies inside that of id `outer`
/// under one base directory (`a/b` in `a`; not `ab` in `a`, and not an id
/// in itself).
pub fn nests_in(inner: &str, outer: &str) -> bool {
    inner.len() > outer.len() && inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/'
}

/// `<base>/<task id>`, each directory of the id's path (not `base`)
/// created `0700` or checked as a private directory of this user's
/// ([`crate::private_files::private_dir`]): a nested id's intermediate
/// directories are daisy's as much as its last. The id must have passed
/// [`check_task_id`].
pub fn task_dir(base: &Path, task_id: &str) -> std::io::Result<PathBuf> {
    let mut dir = base.to_path_buf();
    for segment in task_id.split('/') {
        dir.push(segment);
        crate::private_files::private_dir(&dir)?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(id: &str) -> String {
        match check_task_id(id) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{id:?} was taken"),
        }
    }

    #[test]
    fn ids_that_are_relative_paths_are_taken() {
        for id in [
            "seg",
            "predict_run/0/val",
            "threshold_0/val/raw",
            "predict_/tmp/x.zarr_0/val",
            "a.b/c..d/.hidden",
            &"s".repeat(255),
            &format!("{}/{}", "s".repeat(255), "t".repeat(255)),
        ] {
            assert!(check_task_id(id).is_ok(), "{id:?}: {:?}", check_task_id(id));
        }
    }

    #[test]
    fn each_unsafe_id_is_refused_saying_which_rule_and_why() {
        for (id, why, suggested) in [
            ("../escape", "`..` segment", "\"escape\""),
            ("a/../b", "`..` segment", "\"a/b\""),
            ("..", "`..` segment", "\"task\""),
            (
                "a/./b",
                "`.` segment, so it names the same directory as the id \"a/b\"",
                "\"a/b\"",
            ),
            (".", "the base directory itself", "\"task\""),
            ("/abs/x", "starts with `/`", "\"abs/x\""),
            (
                "trail/",
                "ends with `/`, so it names the same directory as the id \"trail\"",
                "\"trail\"",
            ),
            (
                "a//b",
                "empty segment (`//`), so it names the same directory as the id \"a/b\"",
                "\"a/b\"",
            ),
            ("nul\0x", "control character", "\"nulx\""),
            (
                "seg\nERROR forged",
                "control character",
                "\"segERROR forged\"",
            ),
            ("a\\b", "backslash", "\"a-b\""),
            (
                "invoice\u{202e}gnp",
                "bidirectional control",
                "\"invoicegnp\"",
            ),
        ] {
            let text = refusal(id);
            assert!(text.contains("task_id"), "{text}");
            assert!(text.contains(why), "{id:?}: {text}");
            assert!(
                text.contains(&format!("Use an id such as {suggested}")),
                "{id:?}: {text}"
            );
        }
        let long = format!("a/{}", "y".repeat(300));
        assert!(refusal(&long).contains("is 300 bytes long, more than the 255"));
        let whole = vec!["s".repeat(200); 6].join("/");
        assert!(refusal(&whole).contains(&format!("{} bytes long", whole.len())));
        assert!(refusal("").contains("non-empty"));
    }

    #[test]
    fn a_suggestion_is_itself_a_valid_id() {
        for id in [
            "../..",
            "/",
            "//",
            "a/./../b//",
            "\u{202e}/..",
            "x\\/y",
            "é".repeat(300).as_str(),
        ] {
            let s = suggestion(id);
            assert!(check_task_id(&s).is_ok(), "{id:?} -> {s:?}");
        }
    }

    #[test]
    fn nesting_is_by_whole_segments() {
        assert!(nests_in("a/b", "a"));
        assert!(nests_in("a/b/c", "a/b"));
        assert!(!nests_in("ab", "a"));
        assert!(!nests_in("a", "a"));
        assert!(!nests_in("a", "a/b"));
        assert!(!nests_in("b/a", "a"));
    }

    #[test]
    fn a_nested_ids_directories_are_made_private_on_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("daisy-task-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let dir = task_dir(&base, "predict/0/val").unwrap();
        assert_eq!(dir, base.join("predict").join("0").join("val"));
        for d in [base.join("predict"), base.join("predict/0"), dir.clone()] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
        // an intermediate directory others can write is refused
        std::fs::set_permissions(base.join("predict"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = task_dir(&base, "predict/0/val").unwrap_err();
        assert!(
            e.to_string().contains("writable by its group or by others"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
