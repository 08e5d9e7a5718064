//! A pipeline of tasks: the task DAG, validated and topologically ordered.
//! [`Pipeline`] owns task identity (ids to dense indices), duplicate and
//! cycle detection, and the upstream/downstream task lists.
//!
//! Tasks arrive in any order and possibly more than once (a task reachable
//! through two paths of `a + b | c`); the same id with the same spec is one
//! task, the same id with a different spec is a [`DaisyError::DuplicateTask`].
//! Edges listed twice collapse to one. A cycle is reported with the ids on
//! it.

use crate::block::TaskIndex;
use crate::error::DaisyError;
use crate::task_spec::TaskSpec;
use std::collections::HashMap;

/// A validated task DAG in topological order (upstream before downstream).
#[derive(Clone, Debug)]
pub struct Pipeline {
    specs: Vec<TaskSpec>,
    index: HashMap<String, TaskIndex>,
    upstream: Vec<Vec<TaskIndex>>,
    downstream: Vec<Vec<TaskIndex>>,
}

impl Pipeline {
    /// Build and validate a pipeline. Every upstream id must be one of the
    /// given tasks.
    pub fn new(specs: Vec<TaskSpec>) -> Result<Self, DaisyError> {
        let (unique, seen) = Self::deduplicated(specs)?;
        if unique.is_empty() {
            return Err(DaisyError::invalid(
                "tasks",
                "no tasks given; pass a daisy.Task or a list of tasks",
            ));
        }
        let n = unique.len();
        let up = Self::upstream_edges(&unique, &seen)?;
        let order = Self::dependency_order(&unique, &up)?;
        let mut new_index = vec![0usize; n];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let mut specs: Vec<Option<TaskSpec>> = unique.into_iter().map(Some).collect();
        let specs: Vec<TaskSpec> = order.iter().filter_map(|&old| specs[old].take()).collect();
        let mut upstream = vec![Vec::new(); n];
        let mut downstream = vec![Vec::new(); n];
        for old in 0..n {
            for &j in &up[old] {
                upstream[new_index[old]].push(new_index[j] as TaskIndex);
                downstream[new_index[j]].push(new_index[old] as TaskIndex);
            }
        }
        let index = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.task_id.clone(), i as TaskIndex))
            .collect();
        Ok(Self {
            specs,
            index,
            upstream,
            downstream,
        })
    }

    /// The specs with each task once (a task given twice, as the upstream
    /// of two others, is one task whose upstream lists are joined; two
    /// different tasks under one id are an error), and each id's index.
    fn deduplicated(
        specs: Vec<TaskSpec>,
    ) -> Result<(Vec<TaskSpec>, HashMap<String, usize>), DaisyError> {
        let mut unique: Vec<TaskSpec> = Vec::with_capacity(specs.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for spec in specs {
            match seen.get(&spec.task_id) {
                Some(&i) => {
                    let prev = &unique[i];
                    let same_geometry = prev.total_roi == spec.total_roi
                        && prev.read_roi == spec.read_roi
                        && prev.write_roi == spec.write_roi
                        && prev.fit == spec.fit
                        && prev.read_write_conflict == spec.read_write_conflict
                        && prev.max_retries == spec.max_retries;
                    if !same_geometry {
                        return Err(DaisyError::DuplicateTask(spec.task_id));
                    }
                    // union of upstream lists (same task seen twice)
                    for u in spec.upstream {
                        if !unique[i].upstream.contains(&u) {
                            unique[i].upstream.push(u);
                        }
                    }
                }
                None => {
                    crate::block_grid::BlockGrid::check_ids(&spec)?;
                    seen.insert(spec.task_id.clone(), unique.len());
                    unique.push(spec);
                }
            }
        }
        Ok((unique, seen))
    }

    /// Each task's upstream tasks, by index: every upstream id must be a
    /// task of the pipeline of the same number of axes, and not the task
    /// itself.
    fn upstream_edges(
        unique: &[TaskSpec],
        seen: &HashMap<String, usize>,
    ) -> Result<Vec<Vec<usize>>, DaisyError> {
        let n = unique.len();
        let mut up: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, spec) in unique.iter().enumerate() {
            for u in &spec.upstream {
                let Some(&j) = seen.get(u) else {
                    return Err(DaisyError::invalid(
                        "upstream_tasks",
                        format!(
                            "task {:?} lists upstream task {u:?}, which is not part of the pipeline; \
                             pass the upstream Task object itself",
                            spec.task_id
                        ),
                    ));
                };
                if j == i {
                    return Err(DaisyError::Cycle(format!("{:?}", spec.task_id)));
                }
                let (dims, up_dims) = (spec.total_roi.dims(), unique[j].total_roi.dims());
                if dims != up_dims {
                    return Err(DaisyError::invalid(
                        "upstream_tasks",
                        format!(
                            "task {:?} has {dims} axes but its upstream task {u:?} has {up_dims}; \
                             a block can only wait for blocks of the same space: give both tasks \
                             ROIs with the same number of axes",
                            spec.task_id
                        ),
                    ));
                }
                if !up[i].contains(&j) {
                    up[i].push(j);
                }
            }
        }
        Ok(up)
    }

    /// The tasks in dependency order (Kahn's algorithm; ties broken by
    /// input order so the order is stable), or the cycle's tasks.
    fn dependency_order(unique: &[TaskSpec], up: &[Vec<usize>]) -> Result<Vec<usize>, DaisyError> {
        let n = unique.len();
        let mut indeg: Vec<usize> = up.iter().map(Vec::len).collect();
        let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, ups) in up.iter().enumerate() {
            for &j in ups {
                down[j].push(i);
            }
        }
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        while order.len() < n {
            let Some(next) = (0..n).find(|&i| !placed[i] && indeg[i] == 0) else {
                let on_cycle: Vec<String> = (0..n)
                    .filter(|&i| !placed[i])
                    .map(|i| format!("{:?}", unique[i].task_id))
                    .collect();
                return Err(DaisyError::Cycle(on_cycle.join(", ")));
            };
            placed[next] = true;
            order.push(next);
            for &d in &down[next] {
                indeg[d] -= 1;
            }
        }
        Ok(order)
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// True if there are no tasks (never, for a constructed pipeline).
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Tasks in topological order.
    pub fn specs(&self) -> &[TaskSpec] {
        &self.specs
    }

    /// The spec of a task.
    pub fn spec(&self, task: TaskIndex) -> &TaskSpec {
        &self.specs[task as usize]
    }

    /// Index of a task id.
    pub fn index_of(&self, task_id: &str) -> Result<TaskIndex, DaisyError> {
        self.index.get(task_id).copied().ok_or_else(|| {
            DaisyError::UnknownTask(
                task_id.to_string(),
                self.specs
                    .iter()
                    .map(|s| format!("{:?}", s.task_id))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })
    }

    /// Direct upstream tasks.
    pub fn upstream_of(&self, task: TaskIndex) -> &[TaskIndex] {
        &self.upstream[task as usize]
    }

    /// Direct downstream tasks.
    pub fn downstream_of(&self, task: TaskIndex) -> &[TaskIndex] {
        &self.downstream[task as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_task_of_another_dimension_is_refused() {
        let flat = |id: &str, up: Vec<String>| {
            let r = crate::geometry::Roi::from_slices(&[0], &[10]).unwrap();
            TaskSpec::new(id, r, r, r, crate::task_spec::Fit::Valid, true, 0, up).unwrap()
        };
        let square = |id: &str, up: Vec<String>| {
            let r = crate::geometry::Roi::from_slices(&[0, 0], &[10, 10]).unwrap();
            TaskSpec::new(id, r, r, r, crate::task_spec::Fit::Valid, true, 0, up).unwrap()
        };
        let e = Pipeline::new(vec![flat("a", vec![]), square("b", vec!["a".into()])]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("upstream_tasks:") && text.contains("2 axes"),
            "{text}"
        );
    }
    use crate::geometry::Roi;
    use crate::task_spec::Fit;

    fn spec(id: &str, up: &[&str]) -> TaskSpec {
        let r = Roi::from_slices(&[0], &[10]).unwrap();
        let w = Roi::from_slices(&[0], &[5]).unwrap();
        TaskSpec::new(
            id,
            r,
            w,
            w,
            Fit::Valid,
            true,
            2,
            up.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap()
    }

    #[test]
    fn orders_topologically() {
        let p = Pipeline::new(vec![spec("c", &["b"]), spec("b", &["a"]), spec("a", &[])]).unwrap();
        let ids: Vec<&str> = p.specs().iter().map(|s| s.task_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(p.upstream_of(2), &[1]);
        assert_eq!(p.downstream_of(0), &[1]);
    }

    #[test]
    fn rejects_cycles_and_duplicates() {
        let e = Pipeline::new(vec![spec("a", &["b"]), spec("b", &["a"])]).unwrap_err();
        assert!(matches!(e, DaisyError::Cycle(_)));
        let mut other = spec("a", &[]);
        other.max_retries = 7;
        let e = Pipeline::new(vec![spec("a", &[]), other]).unwrap_err();
        assert!(matches!(e, DaisyError::DuplicateTask(_)));
        let e = Pipeline::new(vec![spec("a", &["zzz"])]).unwrap_err();
        assert!(e.to_string().contains("zzz"));
    }

    #[test]
    fn same_task_twice_and_duplicate_edges_are_harmless() {
        let p =
            Pipeline::new(vec![spec("a", &[]), spec("b", &["a", "a"]), spec("a", &[])]).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p.upstream_of(1), &[0]);
    }
}
