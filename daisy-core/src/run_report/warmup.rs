//! What a worker's first block tells about its warm-up: whether it was
//! mostly imports, measured in the worker (the time spent in `import`
//! statements during its first block), and what to say about it. The
//! report's warm-up line (each worker's first block against the others)
//! cannot tell an import from set-up in the function; this note can, and
//! its advice differs: an import the function runs on every call is loaded
//! once by the task's launcher when it stands before the function's first
//! branch, or at the top of the function's module.
//!
//! [`IMPORT_SHARE`] is a half: the note names imports only where they are
//! most of the first block. [`IMPORT_MIN_SECONDS`] is 0.1 s: below it a
//! first block's imports cost less than the workers' own start and the
//! note would be noise. At most [`NAMED_PACKAGES`] packages are named.

/// The least share of the first block spent importing for the note.
pub const IMPORT_SHARE: f64 = 0.5;

/// The least time spent importing, seconds, for the note.
pub const IMPORT_MIN_SECONDS: f64 = 0.1;

/// The most packages the note names.
pub const NAMED_PACKAGES: usize = 3;

/// The note a worker sends about its first block (`block_seconds` long, of
/// which `import_seconds` in imports of `packages`, top-level names, the
/// costliest first), or None where the imports were not most of it. The
/// text is the same from every worker of a task that imported the same
/// packages, so the report keeps it once.
pub fn import_note(import_seconds: f64, block_seconds: f64, packages: &[String]) -> Option<String> {
    if !(import_seconds >= IMPORT_MIN_SECONDS && import_seconds >= IMPORT_SHARE * block_seconds) {
        return None;
    }
    let mut named: Vec<&str> = packages.iter().map(String::as_str).collect();
    named.truncate(NAMED_PACKAGES);
    let what = if named.is_empty() {
        "modules".to_string()
    } else {
        let more = if packages.len() > NAMED_PACKAGES {
            ", ..."
        } else {
            ""
        };
        format!("{}{more}", named.join(", "))
    };
    Some(format!(
        "warm-up: a worker's first block was mostly imports ({what}); import them at the top \
         of the function, before any branch (its launcher then loads them once, before the \
         first block), or at the top of its module"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_block_of_imports_is_named_and_set_up_is_not() {
        let pkgs: Vec<String> = ["funlib", "zarr", "dask", "numcodecs"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let note = import_note(0.9, 1.0, &pkgs).unwrap();
        assert!(note.contains("(funlib, zarr, dask, ...)"), "{note}");
        assert!(note.contains("before any branch"), "{note}");
        // set-up in the function, not imports: no note
        assert_eq!(import_note(0.2, 1.0, &pkgs), None);
        // a fast first block: nothing worth saying
        assert_eq!(import_note(0.05, 0.06, &pkgs), None);
        assert!(import_note(0.3, 0.4, &[]).unwrap().contains("(modules)"));
    }
}
