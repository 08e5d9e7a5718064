//! Which arrays a store's done marks describe: for a task that declares its
//! outputs (`Task(outputs=[...])`), the group's attribute `daisy_outputs`
//! maps each output's directory to its [`OutputIdentity`] as the last run
//! found it. [`TrackingStore::check_outputs`] compares them when the run
//! opens the store: an output that is gone, or is another directory now,
//! while the store marks blocks done is refused
//! ([`DaisyError::OutputReplaced`]): the marks describe an array that no
//! longer exists, and a rerun would skip every block over an empty one.
//! Then the identities as they are now are recorded (an output that does
//! not exist yet is recorded by the next run that finds it). An output
//! the store never recorded (a store from before `outputs=`, an output
//! added since) is recorded without complaint: there is nothing to compare
//! it with.

use super::TrackingStore;
use super::zarr_array::{io_err, write_atomic};
use crate::error::DaisyError;
use crate::task_outputs::{DeclaredOutput, OutputIdentity};
use serde_json::{Map, Value};
use std::fs;
use std::path::Path;

/// The group attribute that holds the outputs' identities.
pub const OUTPUTS_ATTR: &str = "daisy_outputs";

/// The group metadata of the store at `path`, as JSON.
fn group_json(path: &Path) -> Result<Value, DaisyError> {
    let meta = path.join("zarr.json");
    let text = fs::read_to_string(&meta).map_err(|e| io_err(&meta, e))?;
    serde_json::from_str(&text)
        .map_err(|e| DaisyError::Io(format!("{}: not JSON: {e}", meta.display())))
}

/// The identities the store at `path` recorded, by output directory.
pub fn recorded(path: &Path) -> Result<Map<String, Value>, DaisyError> {
    Ok(group_json(path)?
        .get("attributes")
        .and_then(|a| a.get(OUTPUTS_ATTR))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default())
}

impl TrackingStore {
    /// Refuse the run if a declared output was deleted or made again since
    /// this store marked blocks done, then record the outputs as they are
    /// now (see the module docs).
    pub fn check_outputs(
        &self,
        task_id: &str,
        outputs: &[DeclaredOutput],
    ) -> Result<(), DaisyError> {
        if outputs.is_empty() {
            return Ok(());
        }
        let mut identities = recorded(&self.path)?;
        let before = identities.clone();
        for output in outputs {
            let key = output.path.display().to_string();
            let now = OutputIdentity::of(&output.path);
            let then = identities
                .get(&key)
                .and_then(|v| serde_json::from_value::<OutputIdentity>(v.clone()).ok());
            let how = match (&then, &now) {
                (Some(_), None) => Some("deleted"),
                (Some(t), Some(n)) if t != n => Some("deleted and made again"),
                _ => None,
            };
            // the marks are counted only where an output changed: a scan
            // of the done array, once per run at most
            if let Some(how) = how
                && let marked = self.done_count()
                && marked > 0
            {
                return Err(DaisyError::OutputReplaced {
                    store: self.path.display().to_string(),
                    task: task_id.to_string(),
                    output: key,
                    how: how.to_string(),
                    marked,
                });
            }
            match now {
                Some(n) => {
                    let value =
                        serde_json::to_value(n).map_err(|e| DaisyError::Io(e.to_string()))?;
                    identities.insert(key, value);
                }
                None => {
                    identities.remove(&key);
                }
            }
        }
        if identities != before {
            let mut group = group_json(&self.path)?;
            if let Some(attrs) = group.get_mut("attributes").and_then(Value::as_object_mut) {
                attrs.insert(OUTPUTS_ATTR.into(), Value::Object(identities));
            }
            let text =
                serde_json::to_string_pretty(&group).map_err(|e| DaisyError::Io(e.to_string()))?;
            write_atomic(&self.path.join("zarr.json"), text.as_bytes())?;
        }
        Ok(())
    }

    /// How many blocks the store marks done.
    pub fn done_count(&self) -> u64 {
        self.done.count_nonzero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_grid::BlockGrid;
    use crate::geometry::{Coord, Roi};
    use crate::task_spec::{Fit, TaskSpec};
    use std::path::PathBuf;

    fn spec() -> TaskSpec {
        let line = |o: i64, s: i64| Roi::from_slices(&[o], &[s]).unwrap();
        TaskSpec::new(
            "t",
            line(0, 40),
            line(0, 10),
            line(0, 10),
            Fit::Valid,
            true,
            0,
            vec![],
        )
        .unwrap()
    }

    fn output(path: &Path) -> DeclaredOutput {
        DeclaredOutput {
            path: path.to_path_buf(),
            chunk: None,
            offset: Coord::new(&[0]).unwrap(),
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("daisy-outputs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_output_made_again_under_done_marks_is_refused_and_reset_lets_it_run() {
        let dir = tmp("remade");
        let (store, out) = (dir.join("store"), dir.join("out.zarr"));
        fs::create_dir(&out).unwrap();
        let s = spec();
        {
            let mut t = TrackingStore::open(&store, &s, false).unwrap();
            t.check_outputs("t", &[output(&out)]).unwrap();
            t.mark_done(&BlockGrid::new(0, &s).block(0));
            t.flush().unwrap();
        }
        // the same array again: fine, and the marks stay
        {
            let t = TrackingStore::open(&store, &s, false).unwrap();
            t.check_outputs("t", &[output(&out)]).unwrap();
            assert_eq!(t.done_count(), 1);
        }
        // deleted: refused
        fs::remove_dir_all(&out).unwrap();
        let e = {
            let t = TrackingStore::open(&store, &s, false).unwrap();
            t.check_outputs("t", &[output(&out)]).unwrap_err()
        };
        assert!(
            matches!(&e, DaisyError::OutputReplaced { how, .. } if how == "deleted"),
            "{e}"
        );
        assert!(e.to_string().contains("task.reset()"), "{e}");
        // made again (another inode held busy): refused too
        let busy = dir.join("busy");
        fs::create_dir(&busy).unwrap();
        fs::create_dir(&out).unwrap();
        let e = {
            let t = TrackingStore::open(&store, &s, false).unwrap();
            t.check_outputs("t", &[output(&out)]).unwrap_err()
        };
        assert!(
            e.to_string().contains("was deleted and made again since"),
            "{e}"
        );
        // after a reset there is nothing to compare with
        TrackingStore::reset(&store, true).unwrap();
        let t = TrackingStore::open(&store, &s, false).unwrap();
        t.check_outputs("t", &[output(&out)]).unwrap();
        drop(t);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn outputs_of_a_store_without_marks_are_recorded_without_complaint() {
        let dir = tmp("fresh");
        let (store, out) = (dir.join("store"), dir.join("out.zarr"));
        let s = spec();
        let t = TrackingStore::open(&store, &s, false).unwrap();
        // not there yet: nothing recorded
        t.check_outputs("t", &[output(&out)]).unwrap();
        assert!(recorded(&store).unwrap().is_empty());
        fs::create_dir(&out).unwrap();
        t.check_outputs("t", &[output(&out)]).unwrap();
        assert!(
            recorded(&store)
                .unwrap()
                .contains_key(&out.display().to_string())
        );
        // made again before any block was done: recorded anew
        fs::remove_dir_all(&out).unwrap();
        fs::create_dir(dir.join("busy")).unwrap();
        fs::create_dir(&out).unwrap();
        t.check_outputs("t", &[output(&out)]).unwrap();
        drop(t);
        let _ = fs::remove_dir_all(&dir);
    }
}
