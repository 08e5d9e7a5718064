//! The block dependency graph of a pipeline as Python sees it (daisy 1.x's
//! `DependencyGraph` and `BlockwiseDependencyGraph` queries) and the lazy
//! walk that streams its blocks: conversions around
//! `daisy_core::dependency_graph`, nothing computed here.

use crate::convert::roi_from_py;
use crate::errors::IntoPyResult;
use crate::py_block::PyBlock;
use crate::py_scheduler::{key_of, pipeline_from};
use crate::py_task_spec::PyTaskSpec;
use daisy_core::BlockKey;
use daisy_core::dependency_graph::{DependencyGraph, LevelWalk};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::sync::{Arc, Mutex};

/// The block dependency graph of a pipeline (daisy 1.x's
/// `DependencyGraph` queries).
#[pyclass(name = "DependencyGraph", module = "daisy._daisy", frozen)]
pub struct PyDependencyGraph {
    graph: Arc<DependencyGraph>,
    task_ids: Arc<Vec<String>>,
}

impl PyDependencyGraph {
    fn blocks_of(&self, py: Python<'_>, keys: &[BlockKey]) -> PyResult<Py<PyList>> {
        let items: Vec<PyBlock> = keys
            .iter()
            .map(|k| PyBlock::from_core(&self.graph.block(*k), &self.task_ids[k.task as usize]))
            .collect();
        Ok(PyList::new(py, items)?.unbind())
    }
}

#[pymethods]
impl PyDependencyGraph {
    #[new]
    fn new(specs: Vec<PyRef<'_, PyTaskSpec>>) -> PyResult<Self> {
        let pipeline = pipeline_from(&specs)?;
        let task_ids = pipeline.specs().iter().map(|s| s.task_id.clone()).collect();
        Ok(Self {
            graph: Arc::new(DependencyGraph::new(pipeline)),
            task_ids: Arc::new(task_ids),
        })
    }

    /// Task ids in pipeline (topological) order.
    #[getter]
    fn task_ids(&self) -> Vec<String> {
        self.task_ids.to_vec()
    }

    /// Number of blocks of a task.
    fn num_blocks(&self, task_id: &str) -> PyResult<u64> {
        Ok(self
            .graph
            .num_blocks(self.graph.pipeline().index_of(task_id).py()?))
    }

    /// Number of blocks of a task that wait for no other block.
    fn num_roots(&self, task_id: &str) -> PyResult<u64> {
        Ok(self
            .graph
            .count_roots(self.graph.pipeline().index_of(task_id).py()?))
    }

    /// Every block of a task, in C order of the block grid.
    fn blocks(&self, py: Python<'_>, task_id: &str) -> PyResult<Py<PyList>> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let keys: Vec<BlockKey> = (0..self.graph.num_blocks(t))
            .map(|index| BlockKey { task: t, index })
            .collect();
        self.blocks_of(py, &keys)
    }

    /// The blocks of a task that wait for no other block.
    fn roots(&self, py: Python<'_>, task_id: &str) -> PyResult<Py<PyList>> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let mut cursor = self.graph.root_cursor(t);
        let mut scratch = Vec::new();
        let mut keys = Vec::new();
        while let Some(b) = self.graph.next_root(&mut cursor, &mut scratch) {
            keys.push(b.key);
        }
        self.blocks_of(py, &keys)
    }

    /// The blocks this block waits for.
    fn upstream(&self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<Py<PyList>> {
        let key = key_of(self.graph.pipeline(), &self.graph, &block)?;
        let mut out = Vec::new();
        self.graph.upstream(&self.graph.block(key), &mut out);
        self.blocks_of(py, &out)
    }

    /// The blocks that wait for this block.
    fn downstream(&self, py: Python<'_>, block: PyRef<'_, PyBlock>) -> PyResult<Py<PyList>> {
        let key = key_of(self.graph.pipeline(), &self.graph, &block)?;
        let mut out = Vec::new();
        self.graph.downstream(&self.graph.block(key), &mut out);
        self.blocks_of(py, &out)
    }

    /// Number of levels of a task's block grid (1 without read/write
    /// conflicts): blocks of one level never conflict.
    fn num_levels(&self, task_id: &str) -> PyResult<usize> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        Ok(self.graph.grid(t).num_levels())
    }

    /// The blocks of a task, level by level and row-major within a level
    /// (daisy 1.x's order), or of one level; lazily.
    #[pyo3(signature = (task_id, level = None))]
    fn walk(&self, task_id: &str, level: Option<usize>) -> PyResult<PyLevelWalk> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        Ok(PyLevelWalk {
            walk: Mutex::new(self.graph.level_walk(t, level)),
            graph: Arc::clone(&self.graph),
            task_ids: Arc::clone(&self.task_ids),
            with_upstream: false,
        })
    }

    /// Every block of a task with the blocks it waits for, as
    /// `(block, [upstream blocks])`, in the order of `walk`; lazily, so
    /// memory stays flat in the number of blocks.
    fn dependencies(&self, task_id: &str) -> PyResult<PyLevelWalk> {
        let mut walk = self.walk(task_id, None)?;
        walk.with_upstream = true;
        Ok(walk)
    }

    /// A task's levels in world units: `(level stride, per-level read
    /// offsets relative to the total read ROI, per-level conflict
    /// offsets)`, as daisy 1.x's `compute_level_*` report them.
    #[allow(clippy::type_complexity)]
    fn level_layout(
        &self,
        task_id: &str,
    ) -> PyResult<(Vec<i64>, Vec<Vec<i64>>, Vec<Vec<Vec<i64>>>)> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let layout = self.graph.grid(t).level_layout();
        let v = |c: &daisy_core::Coord| c.as_slice().to_vec();
        Ok((
            v(&layout.stride),
            layout.offsets.iter().map(v).collect(),
            layout
                .conflicts
                .iter()
                .map(|l| l.iter().map(v).collect())
                .collect(),
        ))
    }

    /// The offsets from a block of the level at `level` to the blocks of
    /// the level at `prev` it conflicts with, levels repeating every
    /// `stride` (daisy 1.x's `get_conflict_offsets`).
    #[staticmethod]
    fn conflict_offsets(
        level: Vec<i64>,
        prev: Vec<i64>,
        stride: Vec<i64>,
    ) -> PyResult<Vec<Vec<i64>>> {
        let coord = |name: &str, c: &[i64]| {
            daisy_core::Coord::new(c).map_err(|e| crate::errors::bad_value(format!("{name}: {e}")))
        };
        let (level, prev, stride) = (
            coord("level_offset", &level)?,
            coord("prev_level_offset", &prev)?,
            coord("level_stride", &stride)?,
        );
        if level.dims() != prev.dims() || level.dims() != stride.dims() {
            return Err(crate::errors::bad_value(
                "level_offset, prev_level_offset, level_stride: give them the same number of dimensions",
            ));
        }
        let (_, combos) = daisy_core::block_grid::conflict_offsets(&level, &prev, &stride);
        Ok(combos.iter().map(|c| c.as_slice().to_vec()).collect())
    }

    /// The blocks of a task whose write ROI (with `read`, read ROI)
    /// intersects `roi`, row-major over the grid.
    #[pyo3(signature = (task_id, roi, read = false))]
    fn blocks_touching(
        &self,
        py: Python<'_>,
        task_id: &str,
        roi: &Bound<'_, PyAny>,
        read: bool,
    ) -> PyResult<Py<PyList>> {
        let t = self.graph.pipeline().index_of(task_id).py()?;
        let roi = roi_from_py(roi, "roi")?;
        roi.check_covers("roi", "the region blocks are looked up in")
            .py()?;
        if roi.dims() != self.graph.grid(t).grid_shape().dims() {
            return Err(crate::errors::bad_value(format!(
                "roi: has {} dimensions, the task's blocks have {}",
                roi.dims(),
                self.graph.grid(t).grid_shape().dims()
            )));
        }
        let mut out = Vec::new();
        self.graph.blocks_touching(t, &roi, read, &mut out);
        self.blocks_of(py, &out)
    }
}

/// A lazy walk over a task's blocks (see `DependencyGraph.walk`): yields
/// blocks, or `(block, [upstream blocks])` pairs for `dependencies`.
#[pyclass(name = "LevelWalk", module = "daisy._daisy", frozen)]
pub struct PyLevelWalk {
    walk: Mutex<LevelWalk>,
    graph: Arc<DependencyGraph>,
    task_ids: Arc<Vec<String>>,
    with_upstream: bool,
}

#[pymethods]
impl PyLevelWalk {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let next = {
            let mut walk = self
                .walk
                .lock()
                .map_err(|_| crate::errors::bad_value("walk: used from two threads at once"))?;
            self.graph.next_in_walk(&mut walk)
        };
        let Some(block) = next else {
            return Ok(None);
        };
        let py_block =
            |b: &daisy_core::Block| PyBlock::from_core(b, &self.task_ids[b.key.task as usize]);
        let item = Py::new(py, py_block(&block))?.into_any();
        if !self.with_upstream {
            return Ok(Some(item));
        }
        let mut upstream: Vec<BlockKey> = Vec::new();
        self.graph.upstream(&block, &mut upstream);
        let ups: Vec<PyBlock> = upstream
            .iter()
            .map(|k| py_block(&self.graph.block(*k)))
            .collect();
        let list = PyList::new(py, ups)?;
        Ok(Some(
            PyTuple::new(py, [item, list.into_any().unbind()])?
                .into_any()
                .unbind(),
        ))
    }
}
