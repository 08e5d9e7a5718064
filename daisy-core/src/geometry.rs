//! Integer n-dimensional geometry: [`Coord`] and [`Roi`].
//!
//! This module owns the arithmetic every other part of the core is built on:
//! offsets and shapes in world units, intersection, growing, shifting,
//! snapping to a grid, containment and C-order indexing of a grid.
//!
//! It never allocates: a [`Coord`] is a fixed-capacity array of
//! [`MAX_DIMS`] `i64` plus a length, so a block (two ROIs) is a plain `Copy`
//! value and enumerating a million blocks touches no allocator. Eight axes is
//! far beyond any volume our users process (3D + channels + time is five);
//! more is rejected with [`DaisyError::InvalidArgument`] at the boundary.
//!
//! All ROIs here are bounded. Unbounded (`None`) axes exist only on the
//! Python side and are rejected when converted.

use crate::error::DaisyError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The most axes a [`Coord`] can hold.
pub const MAX_DIMS: usize = 8;

/// Largest magnitude of a ROI's offset, shape and end: 2^62, far beyond any
/// volume, and small enough that the grid arithmetic on it (position times
/// stride, offset plus shape) cannot overflow 64 bits.
pub const MAX_COORD: i64 = 1 << 62;

/// An n-dimensional integer coordinate (or extent), `n <= MAX_DIMS`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coord {
    values: [i64; MAX_DIMS],
    dims: u8,
}

impl Coord {
    /// A coordinate from a slice; fails beyond [`MAX_DIMS`] axes or with none.
    pub fn new(values: &[i64]) -> Result<Self, DaisyError> {
        if values.is_empty() || values.len() > MAX_DIMS {
            return Err(DaisyError::invalid(
                "coordinate",
                format!(
                    "has {} axes; daisy supports 1 to {MAX_DIMS} axes",
                    values.len()
                ),
            ));
        }
        let mut v = [0; MAX_DIMS];
        v[..values.len()].copy_from_slice(values);
        Ok(Self {
            values: v,
            dims: values.len() as u8,
        })
    }

    /// `dims` copies of `value`.
    pub fn splat(value: i64, dims: usize) -> Self {
        debug_assert!(dims <= MAX_DIMS && dims > 0);
        let mut v = [0; MAX_DIMS];
        v[..dims].fill(value);
        Self {
            values: v,
            dims: dims as u8,
        }
    }

    /// Number of axes.
    #[inline]
    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    /// The values as a slice of length [`Coord::dims`].
    #[inline]
    pub fn as_slice(&self) -> &[i64] {
        &self.values[..self.dims()]
    }

    #[inline]
    fn zip_map(&self, other: &Coord, f: impl Fn(i64, i64) -> i64) -> Coord {
        debug_assert_eq!(self.dims, other.dims);
        let mut out = *self;
        for d in 0..self.dims() {
            out.values[d] = f(self.values[d], other.values[d]);
        }
        out
    }

    /// Element-wise sum.
    #[inline]
    pub fn add(&self, other: &Coord) -> Coord {
        self.zip_map(other, |a, b| a + b)
    }

    /// Element-wise difference.
    #[inline]
    pub fn sub(&self, other: &Coord) -> Coord {
        self.zip_map(other, |a, b| a - b)
    }

    /// Element-wise product.
    #[inline]
    pub fn mul(&self, other: &Coord) -> Coord {
        self.zip_map(other, |a, b| a * b)
    }

    /// Element-wise floor division (rounds towards negative infinity, as
    /// Python's `//`). `other` must be positive on every axis.
    #[inline]
    pub fn div_floor(&self, other: &Coord) -> Coord {
        self.zip_map(other, i64::div_euclid)
    }

    /// Element-wise maximum.
    #[inline]
    pub fn max(&self, other: &Coord) -> Coord {
        self.zip_map(other, i64::max)
    }

    /// Element-wise minimum.
    #[inline]
    pub fn min(&self, other: &Coord) -> Coord {
        self.zip_map(other, i64::min)
    }

    /// Product of all values (the number of cells of a grid of this shape).
    pub fn product(&self) -> u64 {
        self.as_slice()
            .iter()
            .fold(1u64, |acc, &v| acc.saturating_mul(v.max(0) as u64))
    }

    /// Snap every value to a multiple of `step`, rounding down.
    pub fn snap_down(&self, step: &Coord) -> Coord {
        self.zip_map(step, |a, s| a.div_euclid(s) * s)
    }

    /// Snap every value to a multiple of `step`, rounding up.
    pub fn snap_up(&self, step: &Coord) -> Coord {
        self.zip_map(step, |a, s| -((-a).div_euclid(s)) * s)
    }
}

impl Serialize for Coord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Coord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<i64>::deserialize(d)?;
        Coord::new(&v).map_err(serde::de::Error::custom)
    }
}

impl std::ops::Index<usize> for Coord {
    type Output = i64;
    #[inline]
    fn index(&self, i: usize) -> &i64 {
        &self.as_slice()[i]
    }
}

impl std::ops::IndexMut<usize> for Coord {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut i64 {
        let n = self.dims();
        &mut self.values[..n][i]
    }
}

impl fmt::Debug for Coord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Coord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, v) in self.as_slice().iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{v}")?;
        }
        if self.dims() == 1 {
            write!(f, ",")?;
        }
        write!(f, ")")
    }
}

/// A bounded, axis-aligned region: `offset` (inclusive begin) and `shape`.
/// Shapes are never negative; a zero extent on any axis makes it empty.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Roi {
    offset: Coord,
    shape: Coord,
}

impl Roi {
    /// A ROI from an offset and a shape of the same dimension; negative
    /// extents are rejected (the caller names the parameter).
    pub fn new(offset: Coord, shape: Coord) -> Result<Self, DaisyError> {
        if offset.dims() != shape.dims() {
            return Err(DaisyError::invalid(
                "roi",
                format!(
                    "offset {offset} has {} axes but shape {shape} has {}",
                    offset.dims(),
                    shape.dims()
                ),
            ));
        }
        if shape.as_slice().iter().any(|&s| s < 0) {
            return Err(DaisyError::invalid(
                "roi",
                format!("shape {shape} is negative on some axis"),
            ));
        }
        let in_range = |v: i64| (-MAX_COORD..=MAX_COORD).contains(&v);
        let fits = (0..offset.dims())
            .all(|d| in_range(offset[d]) && in_range(shape[d]) && in_range(offset[d] + shape[d]));
        if !fits {
            return Err(DaisyError::invalid(
                "roi",
                format!(
                    "offset {offset} and shape {shape} reach beyond +-2^62; daisy needs \
                     coordinates within that range"
                ),
            ));
        }
        Ok(Self { offset, shape })
    }

    /// A ROI from slices; convenience for tests and conversions.
    pub fn from_slices(offset: &[i64], shape: &[i64]) -> Result<Self, DaisyError> {
        Self::new(Coord::new(offset)?, Coord::new(shape)?)
    }

    /// A ROI whose inputs are known valid (same dims, non-negative shape).
    #[inline]
    pub(crate) fn new_unchecked(offset: Coord, shape: Coord) -> Self {
        debug_assert_eq!(offset.dims(), shape.dims());
        Self { offset, shape }
    }

    /// Number of axes.
    #[inline]
    pub fn dims(&self) -> usize {
        self.offset.dims()
    }

    /// Inclusive begin.
    #[inline]
    pub fn offset(&self) -> Coord {
        self.offset
    }

    /// Extent per axis.
    #[inline]
    pub fn shape(&self) -> Coord {
        self.shape
    }

    /// Inclusive begin (alias of [`Roi::offset`]).
    #[inline]
    pub fn begin(&self) -> Coord {
        self.offset
    }

    /// Exclusive end.
    #[inline]
    pub fn end(&self) -> Coord {
        self.offset.add(&self.shape)
    }

    /// True if any axis has zero extent.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.shape.as_slice().iter().any(|&s| s <= 0)
    }

    /// The rule for a ROI that is or places a block (a task's three ROIs,
    /// the ROIs of a block made or changed by hand, a region blocks are
    /// looked up in): it covers something, every axis of its shape
    /// positive. `param` names it in the error, `whose` says whose it is
    /// (`task "t"`, `the block`).
    pub fn check_covers(&self, param: &str, whose: &str) -> Result<(), DaisyError> {
        if self.is_empty() {
            return Err(DaisyError::invalid(
                param,
                format!(
                    "{whose}: {param} {self} has a zero extent; every axis of its shape must \
                     be positive"
                ),
            ));
        }
        Ok(())
    }

    /// The ROI as numpy slices, `[begin:end, ...]` per axis, as a user
    /// would index an array with it (`[128:196, 192:256]`).
    pub fn slices(&self) -> String {
        let end = self.end();
        let parts: Vec<String> = (self.offset.as_slice().iter().zip(end.as_slice()))
            .map(|(b, e)| format!("{b}:{e}"))
            .collect();
        format!("[{}]", parts.join(", "))
    }

    /// Number of unit cells covered.
    pub fn size(&self) -> u64 {
        self.shape.product()
    }

    /// The ROI moved by `by`.
    #[inline]
    pub fn shift(&self, by: &Coord) -> Roi {
        Roi::new_unchecked(self.offset.add(by), self.shape)
    }

    /// The ROI grown by `lower` before its begin and `upper` after its end
    /// (negative values shrink it). A shape that would become negative is
    /// clamped to zero at its begin.
    pub fn grow(&self, lower: &Coord, upper: &Coord) -> Roi {
        let begin = self.offset.sub(lower);
        let end = self.end().add(upper);
        let end = end.max(&begin);
        Roi::new_unchecked(begin, end.sub(&begin))
    }

    /// The overlap of two ROIs (empty, with zero shape, if they do not
    /// overlap).
    pub fn intersect(&self, other: &Roi) -> Roi {
        let begin = self.offset.max(&other.offset);
        let end = self.end().min(&other.end());
        let end = end.max(&begin);
        Roi::new_unchecked(begin, end.sub(&begin))
    }

    /// True if the two ROIs share at least one cell.
    #[inline]
    pub fn intersects(&self, other: &Roi) -> bool {
        if self.is_empty() || other.is_empty() {
            return false;
        }
        let (a0, a1, b0, b1) = (self.offset, self.end(), other.offset, other.end());
        (0..self.dims()).all(|d| a0[d] < b1[d] && b0[d] < a1[d])
    }

    /// True if `other` lies entirely inside `self`. An empty `other`
    /// is contained if its offset is inside the closed box of `self`.
    pub fn contains_roi(&self, other: &Roi) -> bool {
        let (a0, a1, b0, b1) = (self.offset, self.end(), other.offset, other.end());
        (0..self.dims()).all(|d| a0[d] <= b0[d] && b1[d] <= a1[d])
    }

    /// True if the point lies inside.
    pub fn contains_point(&self, p: &Coord) -> bool {
        let (a0, a1) = (self.offset, self.end());
        (0..self.dims()).all(|d| a0[d] <= p[d] && p[d] < a1[d])
    }

    /// The smallest ROI whose begin and end are multiples of `step`
    /// containing this one.
    pub fn snap_to_grid(&self, step: &Coord) -> Roi {
        let begin = self.offset.snap_down(step);
        let end = self.end().snap_up(step);
        Roi::new_unchecked(begin, end.sub(&begin))
    }
}

impl fmt::Debug for Roi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Roi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}:{}] ({})", self.offset, self.end(), self.shape)
    }
}

/// C-order (row-major) indexing of a grid of the given shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridIndexer {
    shape: Coord,
    /// Elements to skip per unit step along each axis.
    strides: [u64; MAX_DIMS],
    len: u64,
}

impl GridIndexer {
    /// Indexer for a grid with `shape` cells per axis (non-negative).
    pub fn new(shape: Coord) -> Self {
        let n = shape.dims();
        let mut strides = [0u64; MAX_DIMS];
        let mut acc = 1u64;
        for d in (0..n).rev() {
            strides[d] = acc;
            acc = acc.saturating_mul(shape[d].max(0) as u64);
        }
        Self {
            shape,
            strides,
            len: acc,
        }
    }

    /// Cells per axis.
    pub fn shape(&self) -> Coord {
        self.shape
    }

    /// Total number of cells.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the grid has no cells.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if `pos` is a valid grid position.
    #[inline]
    pub fn contains(&self, pos: &Coord) -> bool {
        (0..self.shape.dims()).all(|d| pos[d] >= 0 && pos[d] < self.shape[d])
    }

    /// Flat C-order index of a valid position.
    #[inline]
    pub fn flat(&self, pos: &Coord) -> u64 {
        debug_assert!(self.contains(pos));
        (0..self.shape.dims()).fold(0u64, |acc, d| acc + pos[d] as u64 * self.strides[d])
    }

    /// Grid position of a flat index `< len()`.
    #[inline]
    pub fn unflat(&self, mut index: u64) -> Coord {
        let mut pos = Coord::splat(0, self.shape.dims());
        for d in 0..self.shape.dims() {
            let s = self.strides[d];
            pos[d] = (index / s) as i64;
            index %= s;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roi(o: &[i64], s: &[i64]) -> Roi {
        Roi::from_slices(o, s).unwrap()
    }

    #[test]
    fn slices_read_as_numpy_indexing() {
        assert_eq!(roi(&[30], &[10]).slices(), "[30:40]");
        assert_eq!(roi(&[-2, 0, 5], &[4, 1, 2]).slices(), "[-2:2, 0:1, 5:7]");
    }

    #[test]
    fn coord_rejects_bad_dims() {
        assert!(Coord::new(&[]).is_err());
        assert!(Coord::new(&[0; MAX_DIMS + 1]).is_err());
        assert_eq!(Coord::new(&[1, 2, 3]).unwrap().dims(), 3);
    }

    #[test]
    fn floor_division_matches_python() {
        let a = Coord::new(&[-7, 7, -1]).unwrap();
        let b = Coord::new(&[2, 2, 3]).unwrap();
        assert_eq!(a.div_floor(&b).as_slice(), &[-4, 3, -1]);
    }

    #[test]
    fn roi_rejects_mismatch_and_negative() {
        assert!(Roi::from_slices(&[0, 0], &[1]).is_err());
        assert!(Roi::from_slices(&[0], &[-1]).is_err());
    }

    #[test]
    fn roi_rejects_coordinates_beyond_range() {
        assert!(Roi::from_slices(&[MAX_COORD], &[1]).is_err());
        assert!(Roi::from_slices(&[i64::MAX - 1], &[10]).is_err());
        assert!(Roi::from_slices(&[-MAX_COORD], &[MAX_COORD]).is_ok());
    }

    #[test]
    fn intersect_and_intersects() {
        let a = roi(&[0, 0], &[10, 10]);
        let b = roi(&[5, -5], &[10, 10]);
        assert_eq!(a.intersect(&b), roi(&[5, 0], &[5, 5]));
        assert!(a.intersects(&b));
        let c = roi(&[10, 0], &[1, 1]);
        assert!(!a.intersects(&c));
        assert!(a.intersect(&c).is_empty());
    }

    #[test]
    fn grow_shift_contains() {
        let a = roi(&[0, 0], &[10, 10]);
        let g = a.grow(&Coord::new(&[1, 2]).unwrap(), &Coord::new(&[3, 4]).unwrap());
        assert_eq!(g, roi(&[-1, -2], &[14, 16]));
        assert!(g.contains_roi(&a));
        assert!(!a.contains_roi(&g));
        let shrunk = a.grow(&Coord::splat(-6, 2), &Coord::splat(-6, 2));
        assert!(shrunk.is_empty());
        let s = a.shift(&Coord::new(&[5, -5]).unwrap());
        assert_eq!(s.offset().as_slice(), &[5, -5]);
        assert!(a.contains_point(&Coord::new(&[9, 0]).unwrap()));
        assert!(!a.contains_point(&Coord::new(&[10, 0]).unwrap()));
    }

    #[test]
    fn snap_to_grid_rounds_outwards() {
        let a = roi(&[-3, 5], &[7, 1]);
        let s = a.snap_to_grid(&Coord::new(&[4, 4]).unwrap());
        assert_eq!(s, roi(&[-4, 4], &[8, 4]));
    }

    #[test]
    fn grid_indexer_is_c_order_and_invertible() {
        let g = GridIndexer::new(Coord::new(&[2, 3, 4]).unwrap());
        assert_eq!(g.len(), 24);
        assert_eq!(g.flat(&Coord::new(&[0, 0, 1]).unwrap()), 1);
        assert_eq!(g.flat(&Coord::new(&[0, 1, 0]).unwrap()), 4);
        assert_eq!(g.flat(&Coord::new(&[1, 0, 0]).unwrap()), 12);
        for i in 0..g.len() {
            assert_eq!(g.flat(&g.unflat(i)), i);
        }
        assert!(!g.contains(&Coord::new(&[2, 0, 0]).unwrap()));
    }
}
