//! A block's cost from where it is: [`SpatialModel`], the nearest
//! measured block of the same task in space.
//!
//! Block costs in this field follow the data (tissue against background,
//! a dense region against a sparse one), so a block is most like its
//! neighbours in space. A block's figures are those of its nearest measured
//! block (the mean of those at the same least distance, in block cells); a
//! measured block's are its own. With the forecast's sample, one block at
//! the centre of each stratum, that is the stratified estimate: each
//! measured block stands for the blocks of its stratum. Weighting several
//! neighbours was tried and dropped: on a 200 ms disk in 40 ms background
//! (the accuracy benchmark) inverse-distance weighting over the four
//! nearest smeared the disk over the ring around it and forecast the wall
//! 15 % high, the nearest block 0 to 9 % high over seven runs (see
//! `benchmarks/RESULTS.md`). The
//! model's own error is measured by leaving each measured block out and
//! predicting it from the rest ([`SpatialModel::loo_residuals`]): what the
//! forecast's interval is made from.
//!
//! Where it is wrong: a cost that does not follow space (a block's cost set
//! by its id, or by what another task left), and a costly region smaller
//! than the spacing of the sample, which it cannot see.

use crate::geometry::Coord;

/// One measured block: its cell on the task's grid and its figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The block's position on its task's block grid.
    pub cell: Coord,
    /// Seconds from its dispatch to its return (the round trip: what a
    /// worker slot is busy for), or its wall time where that is unknown.
    pub seconds: f64,
    /// CPU seconds the block used.
    pub cpu_seconds: f64,
    /// Its peak resident memory, bytes.
    pub peak_rss_bytes: f64,
}

/// Predicts a block's figures from the measured blocks around it.
#[derive(Clone, Debug)]
pub struct SpatialModel {
    measured: Vec<Measured>,
}

/// A prediction: seconds, CPU seconds and peak RSS bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Predicted {
    /// Seconds a worker is busy with it.
    pub seconds: f64,
    /// CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident memory, bytes.
    pub peak_rss_bytes: f64,
}

fn distance2(a: &Coord, b: &Coord) -> f64 {
    a.as_slice()
        .iter()
        .zip(b.as_slice())
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum()
}

impl SpatialModel {
    /// The model of the measured blocks (none: every prediction is None).
    pub fn new(measured: Vec<Measured>) -> Self {
        Self { measured }
    }

    /// How many blocks it was measured on.
    pub fn len(&self) -> usize {
        self.measured.len()
    }

    /// True when nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.measured.is_empty()
    }

    /// The measured blocks.
    pub fn measured(&self) -> &[Measured] {
        &self.measured
    }

    /// The figures of the block at `cell`, leaving out measured block
    /// `skip` (for the leave-one-out error); None without measurements.
    fn predict_without(&self, cell: &Coord, skip: Option<usize>) -> Option<Predicted> {
        let nearest: Vec<(f64, usize)> = self
            .measured
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(i, m)| (distance2(cell, &m.cell), i))
            .collect();
        if nearest.is_empty() {
            return None;
        }
        let least = nearest.iter().map(|n| n.0).fold(f64::INFINITY, f64::min);
        let ties: Vec<&Measured> = nearest
            .iter()
            .filter(|n| n.0 == least)
            .map(|n| &self.measured[n.1])
            .collect();
        let k = ties.len() as f64;
        Some(Predicted {
            seconds: ties.iter().map(|m| m.seconds).sum::<f64>() / k,
            cpu_seconds: ties.iter().map(|m| m.cpu_seconds).sum::<f64>() / k,
            peak_rss_bytes: ties.iter().map(|m| m.peak_rss_bytes).sum::<f64>() / k,
        })
    }

    /// The figures of the block at `cell`: its own where it was measured,
    /// else its nearest measured block's (the mean of the nearest, on a
    /// tie). None without measurements.
    pub fn predict(&self, cell: &Coord) -> Option<Predicted> {
        self.predict_without(cell, None)
    }

    /// Each measured block's seconds minus what the others predict for it
    /// (empty with fewer than two measured blocks).
    pub fn loo_residuals(&self) -> Vec<f64> {
        if self.measured.len() < 2 {
            return Vec::new();
        }
        (0..self.measured.len())
            .filter_map(|i| {
                let m = &self.measured[i];
                self.predict_without(&m.cell, Some(i))
                    .map(|p| m.seconds - p.seconds)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(x: i64, y: i64, seconds: f64) -> Measured {
        Measured {
            cell: Coord::new(&[x, y]).unwrap(),
            seconds,
            cpu_seconds: seconds / 2.0,
            peak_rss_bytes: seconds * 1e9,
        }
    }

    #[test]
    fn a_block_takes_its_nearest_measured_blocks_figures_and_a_tie_their_mean() {
        let m = SpatialModel::new(vec![at(0, 0, 1.0), at(10, 0, 3.0)]);
        let own = m.predict(&Coord::new(&[0, 0]).unwrap()).unwrap();
        assert_eq!(own.seconds, 1.0);
        let near_first = m.predict(&Coord::new(&[2, 0]).unwrap()).unwrap();
        assert_eq!(near_first.seconds, 1.0);
        assert_eq!(near_first.cpu_seconds, 0.5);
        let halfway = m.predict(&Coord::new(&[5, 0]).unwrap()).unwrap();
        assert!((halfway.seconds - 2.0).abs() < 1e-12);
        assert!((halfway.peak_rss_bytes - 2e9).abs() < 1.0);
    }

    #[test]
    fn a_costly_middle_is_predicted_costly_and_the_rim_cheap() {
        // 5 x 5 samples on a 20 x 20 grid, costly within 5 cells of the centre
        let mut ms = Vec::new();
        for x in (2..20).step_by(4) {
            for y in (2..20).step_by(4) {
                let inside = (x - 10) * (x - 10) + (y - 10) * (y - 10) <= 25;
                ms.push(at(x, y, if inside { 0.2 } else { 0.04 }));
            }
        }
        let m = SpatialModel::new(ms);
        let centre = m.predict(&Coord::new(&[9, 9]).unwrap()).unwrap();
        let corner = m.predict(&Coord::new(&[0, 19]).unwrap()).unwrap();
        assert!(
            centre.seconds > 0.15 && corner.seconds < 0.05,
            "{centre:?} {corner:?}"
        );
    }

    #[test]
    fn leave_one_out_residuals_are_zero_on_a_flat_field_and_large_on_an_outlier() {
        let flat = SpatialModel::new((0..5).map(|i| at(i * 3, 0, 0.06)).collect());
        assert!(flat.loo_residuals().iter().all(|r| r.abs() < 1e-12));
        let mut ms: Vec<Measured> = (0..5).map(|i| at(i * 3, 0, 0.05)).collect();
        ms.push(at(20, 0, 1.5));
        let spiky = SpatialModel::new(ms);
        let r = spiky.loo_residuals();
        assert_eq!(r.len(), 6);
        assert!(r.iter().any(|x| *x > 1.0));
        assert!(
            SpatialModel::new(vec![at(0, 0, 1.0)])
                .loo_residuals()
                .is_empty()
        );
        assert!(
            SpatialModel::new(vec![])
                .predict(&Coord::new(&[0, 0]).unwrap())
                .is_none()
        );
    }
}
