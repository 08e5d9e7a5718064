//! Which blocks a forecast runs for real: a sample spread over the volume.
//!
//! The grid is cut into about `n` strata, boxes of near-equal extent (each
//! axis cut in proportion to its length), and the block at the centre of
//! each stratum is taken. A costly region anywhere (tissue in the middle of
//! a volume, background around it) is seen in proportion to its size,
//! which the first blocks in scan order would not give. Strata that
//! already hold a measured block (history) need no new one. Where the cut
//! gives fewer strata than `n` (a prime `n` on a square grid), the rest
//! comes from a Halton sequence over the grid (bases 2, 3, 5, ...), which
//! fills the gaps between the centres without clustering.

use crate::geometry::{Coord, GridIndexer};

/// How many parts each axis of `shape` is cut into for about `n` strata:
/// the axis whose parts are longest is cut again while the product stays
/// at most `n` (and no axis into more parts than it has cells).
pub fn strata_counts(shape: &Coord, n: u64) -> Vec<i64> {
    let dims = shape.dims();
    let mut parts = vec![1i64; dims];
    loop {
        let total: i64 = parts.iter().product();
        let next = (0..dims)
            .filter(|&d| parts[d] < shape.as_slice()[d])
            .max_by(|&a, &b| {
                let la = shape.as_slice()[a] as f64 / parts[a] as f64;
                let lb = shape.as_slice()[b] as f64 / parts[b] as f64;
                la.total_cmp(&lb).then(b.cmp(&a))
            });
        let Some(d) = next else { break };
        if (total / parts[d]) * (parts[d] + 1) > n as i64 {
            break;
        }
        parts[d] += 1;
    }
    parts
}

/// The `i`-th element of the van der Corput sequence in `base`, in [0, 1).
fn radical_inverse(mut i: u64, base: u64) -> f64 {
    let step = 1.0 / base as f64;
    let (mut x, mut f) = (0.0, step);
    while i > 0 {
        x += (i % base) as f64 * f;
        i /= base;
        f *= step;
    }
    x
}

const PRIMES: [u64; 8] = [2, 3, 5, 7, 11, 13, 17, 19];

/// Up to `n` cells of a grid of `shape` (C-order flat indices), spread
/// over it, none of them `taken(flat)` (blocks already measured, or done):
/// the centres of about `n` strata that hold no taken cell, then Halton
/// points. Fewer than `n` only when the grid has fewer free cells.
pub fn spread_sample(shape: &Coord, n: u64, taken: &dyn Fn(u64) -> bool) -> Vec<u64> {
    let indexer = GridIndexer::new(*shape);
    let total = indexer.len();
    let mut chosen: Vec<u64> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    if n == 0 || total == 0 {
        return chosen;
    }
    let dims = shape.dims();
    let parts = strata_counts(shape, n);
    let strata = GridIndexer::new(Coord::new(&parts).unwrap_or(*shape));
    for s in 0..strata.len() {
        let at = strata.unflat(s);
        let (mut lo, mut hi, mut centre) = (vec![0; dims], vec![0; dims], vec![0; dims]);
        for d in 0..dims {
            let len = shape.as_slice()[d];
            let k = at.as_slice()[d];
            lo[d] = k * len / parts[d];
            hi[d] = (k + 1) * len / parts[d];
            centre[d] = (lo[d] + hi[d] - 1) / 2;
        }
        let Ok(lo) = Coord::new(&lo) else { continue };
        let Ok(span) = Coord::new(&hi).map(|h| h.sub(&lo)) else {
            continue;
        };
        let stratum = GridIndexer::new(span);
        let holds_taken =
            (0..stratum.len()).any(|i| taken(indexer.flat(&stratum.unflat(i).add(&lo))));
        if holds_taken {
            continue;
        }
        let Ok(c) = Coord::new(&centre) else { continue };
        let flat = indexer.flat(&c);
        if seen.insert(flat) {
            chosen.push(flat);
        }
    }
    // the rest from a Halton sequence; bounded so a nearly full grid ends
    let mut i = 1u64;
    let free = (0..total).filter(|&f| !taken(f)).count() as u64;
    while (chosen.len() as u64) < n.min(free) && i < 64 * total + 64 {
        let cell: Vec<i64> = (0..dims)
            .map(|d| {
                let base = PRIMES[d % PRIMES.len()];
                let len = shape.as_slice()[d];
                ((radical_inverse(i, base) * len as f64) as i64).min(len - 1)
            })
            .collect();
        i += 1;
        let Ok(c) = Coord::new(&cell) else { continue };
        let flat = indexer.flat(&c);
        if !taken(flat) && seen.insert(flat) {
            chosen.push(flat);
        }
    }
    // a grid smaller than the sequence reached: the free cells in order
    if (chosen.len() as u64) < n.min(free) {
        for f in 0..total {
            if (chosen.len() as u64) >= n {
                break;
            }
            if !taken(f) && seen.insert(f) {
                chosen.push(f);
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: &[i64]) -> Coord {
        Coord::new(v).unwrap()
    }

    #[test]
    fn a_square_grid_is_cut_into_near_square_strata() {
        assert_eq!(strata_counts(&c(&[20, 20]), 20), vec![5, 4]);
        assert_eq!(strata_counts(&c(&[100, 10]), 10), vec![10, 1]);
        assert_eq!(strata_counts(&c(&[2, 2]), 20), vec![2, 2]);
        assert_eq!(strata_counts(&c(&[8, 8, 8]), 8), vec![2, 2, 2]);
    }

    #[test]
    fn the_sample_covers_the_middle_and_the_edges_of_the_volume() {
        let shape = c(&[20, 20]);
        let s = spread_sample(&shape, 20, &|_| false);
        assert_eq!(s.len(), 20);
        let idx = GridIndexer::new(shape);
        let cells: Vec<Coord> = s.iter().map(|&f| idx.unflat(f)).collect();
        // one cell in each quadrant's inner part and one near the centre
        let near = |x: i64, y: i64| {
            cells
                .iter()
                .any(|p| (p.as_slice()[0] - x).abs() <= 2 && (p.as_slice()[1] - y).abs() <= 3)
        };
        assert!(near(10, 10) && near(2, 2) && near(17, 17) && near(2, 17) && near(17, 2));
        // not the first blocks in scan order
        assert!(s.iter().filter(|&&f| f < 20).count() <= 5);
    }

    #[test]
    fn strata_already_measured_get_no_new_block_and_the_rest_fills_up() {
        let shape = c(&[20, 20]);
        let idx = GridIndexer::new(shape);
        let measured = idx.flat(&c(&[10, 10]));
        let s = spread_sample(&shape, 20, &|f| f == measured);
        assert!(!s.contains(&measured));
        assert_eq!(s.len(), 20);
        let mut sorted = s.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 20, "no block twice");
    }

    #[test]
    fn a_sample_larger_than_the_grid_takes_every_free_block() {
        let shape = c(&[3, 3]);
        let s = spread_sample(&shape, 50, &|f| f == 4);
        assert_eq!(s.len(), 8);
        assert!(!s.contains(&4));
        assert!(spread_sample(&shape, 0, &|_| false).is_empty());
        assert!(spread_sample(&shape, 5, &|_| true).is_empty());
    }

    #[test]
    fn a_prime_count_is_filled_by_the_halton_points() {
        let s = spread_sample(&c(&[30, 30]), 7, &|_| false);
        assert_eq!(s.len(), 7);
        let one_axis = spread_sample(&c(&[1000]), 13, &|_| false);
        assert_eq!(one_axis.len(), 13);
    }
}
