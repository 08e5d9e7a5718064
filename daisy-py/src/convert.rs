//! Conversions between Python geometry (`funlib.geometry.Roi`, plain
//! `(offset, shape)` pairs, coordinate tuples) and the core's [`Roi`] /
//! [`Coord`].
//!
//! Inputs are checked here, once, with errors that name the parameter:
//! unbounded axes (`None`), non-integers, and wrong structure; a ROI's own
//! rules (dimensions agree, no negative extent) are the core's `Roi::new`,
//! and whether one may be empty is the rule of what it belongs to (a task,
//! a block: `Roi::check_covers`). Python ROIs
//! are built only when user code asks for one (see `py_block`), because
//! creating a funlib `Roi` costs microseconds and most blocks handed
//! through the scheduler never need it on the Rust side.

use crate::errors::to_pyerr;
use daisy_core::{Coord, DaisyError, Roi};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyAny, PyTuple};

static ROI_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `funlib.geometry.Roi`, imported once.
fn roi_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    ROI_CLASS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("funlib.geometry")?.getattr("Roi")?.unbind())
        })
        .map(|c| c.bind(py))
}

/// A coordinate from any sequence of Python ints.
pub fn coord_from_py(obj: &Bound<'_, PyAny>, param: &str, what: &str) -> PyResult<Coord> {
    let mut values = Vec::new();
    let iter = obj.try_iter().map_err(|_| {
        crate::errors::wrong_type(format!(
            "{param}: {what} must be a sequence of integers, got {}",
            type_name(obj)
        ))
    })?;
    for item in iter {
        let item = item?;
        if item.is_none() {
            return Err(crate::errors::bad_value(format!(
                "{param}: {what} {} is unbounded (None) on some axis; daisy needs a bounded \
                 ROI here: give every axis a finite offset and shape",
                repr(obj)
            )));
        }
        if item.is_instance_of::<pyo3::types::PyBool>() {
            return Err(crate::errors::wrong_type(format!(
                "{param}: {what} {} contains a bool; use integers",
                repr(obj)
            )));
        }
        let v: i64 = item.extract().map_err(|_| {
            crate::errors::wrong_type(format!(
                "{param}: {what} {} contains {} of type {}; use integers (world units)",
                repr(obj),
                repr(&item),
                type_name(&item)
            ))
        })?;
        values.push(v);
    }
    Coord::new(&values).map_err(|e| crate::errors::bad_value(format!("{param}: {what} {e}")))
}

/// A core ROI from a funlib `Roi` (anything with `offset` and `shape`) or an
/// `(offset, shape)` pair. Errors name `param`.
pub fn roi_from_py(obj: &Bound<'_, PyAny>, param: &str) -> PyResult<Roi> {
    let (offset, shape) = if obj.hasattr("offset")? && obj.hasattr("shape")? {
        (obj.getattr("offset")?, obj.getattr("shape")?)
    } else if let Some(pair) = pair_of(obj) {
        pair
    } else {
        return Err(crate::errors::wrong_type(format!(
            "{param}: expected a daisy.Roi (funlib.geometry.Roi) or an (offset, shape) pair, \
             got {}",
            type_name(obj)
        )));
    };
    if offset.is_none() || shape.is_none() {
        return Err(crate::errors::bad_value(format!(
            "{param}: {} is unbounded; daisy needs a bounded ROI here: give it a finite offset \
             and shape",
            repr(obj)
        )));
    }
    let offset = coord_from_py(&offset, param, "offset")?;
    let shape = coord_from_py(&shape, param, "shape")?;
    // the structure (dimensions agree, no negative extent, in range) is the
    // core's Roi's; whether it may be empty is the caller's rule
    Roi::new(offset, shape).map_err(|e| match e {
        DaisyError::InvalidArgument { message, .. } => {
            crate::errors::bad_value(format!("{param}: {message}"))
        }
        other => to_pyerr(other),
    })
}

/// The two items of a tuple or list of length two.
fn pair_of<'py>(obj: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        return (t.len() == 2).then(|| Some((t.get_item(0).ok()?, t.get_item(1).ok()?)))?;
    }
    let l = obj.cast::<pyo3::types::PyList>().ok()?;
    (l.len() == 2).then(|| Some((l.get_item(0).ok()?, l.get_item(1).ok()?)))?
}

/// A Python tuple of ints.
pub fn coord_to_py<'py>(py: Python<'py>, c: &Coord) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, c.as_slice())
}

/// A `funlib.geometry.Roi` for a core ROI.
pub fn roi_to_py<'py>(py: Python<'py>, roi: &Roi) -> PyResult<Bound<'py, PyAny>> {
    roi_class(py)?.call1((
        coord_to_py(py, &roi.offset())?,
        coord_to_py(py, &roi.shape())?,
    ))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unprintable>".into())
}
