//! Spatial block ids: the n-dimensional Cantor pairing of a block's grid
//! position, exactly as daisy 1.x numbers its blocks.
//!
//! A block's id must be the same in every run and every daisy version, so
//! that done markers, logs and reports written by one run identify the same
//! blocks in the next. daisy 1.x numbers a block by the Cantor-style
//! enumeration of its grid index `(write_roi.offset - total_roi.offset) //
//! write_roi.shape`: points are ordered by the sum of their coordinates
//! (the "diagonal" they lie on), and within one diagonal recursively by the
//! leading coordinates. The id of `x = (x_0, .., x_{n-1})` is
//!
//! ```text
//! cantor(x) = simplex(n, x_0 + .. + x_{n-1}) + cantor(x_0, .., x_{n-2}),   cantor((x_0,)) = x_0
//! ```
//!
//! where `simplex(n, s) = C(s + n - 1, n)` counts the non-negative integer
//! points of `n` axes whose coordinates sum to less than `s`.
//!
//! The arithmetic is exact (`u128` intermediates); daisy 1.x computes the
//! same numbers in floating point, which agrees for every grid that fits
//! in memory.

/// Number of non-negative integer points in `dims` axes with coordinate sum
/// `< s`, i.e. `C(s + dims - 1, dims)`; None if it does not fit in `u128`.
fn simplex_volume(dims: u32, s: u128) -> Option<u128> {
    if s == 0 {
        return Some(0);
    }
    // C(s + dims - 1, dims) = prod_{d=0}^{dims-1} (s + d) / (d + 1), computed
    // incrementally so every intermediate division is exact.
    let mut acc: u128 = 1;
    for d in 0..dims as u128 {
        acc = acc.checked_mul(s.checked_add(d)?)? / (d + 1);
    }
    Some(acc)
}

/// The Cantor number of a grid position with non-negative coordinates, or
/// None if it does not fit in 64 bits (a grid far beyond any real volume).
pub fn cantor_number_checked(position: &[i64]) -> Option<u64> {
    let mut id: u128 = 0;
    let mut n = position.len();
    let mut sum: u128 = position.iter().map(|&c| c.max(0) as u128).sum();
    while n > 1 {
        id = id.checked_add(simplex_volume(n as u32, sum)?)?;
        n -= 1;
        sum -= position[n].max(0) as u128;
    }
    id = id.checked_add(position.first().map_or(0, |&c| c.max(0) as u128))?;
    u64::try_from(id).ok()
}

/// The Cantor number of a grid position with non-negative coordinates.
/// Block grids are checked when their task is built (see `task_spec`), so
/// every id asked for fits; should one not, `u64::MAX` is returned.
pub fn cantor_number(position: &[i64]) -> u64 {
    cantor_number_checked(position).unwrap_or(u64::MAX)
}

/// `C(m, k)` for any integer `m` (the falling-factorial polynomial
/// `m (m-1) .. (m-k+1) / k!`, an integer for every integer `m`); None on
/// overflow.
fn binomial_poly(m: i128, k: u32) -> Option<i128> {
    let mut acc: i128 = 1;
    for j in 0..k as i128 {
        // acc = C(m, j) * (m - j) / (j + 1) = C(m, j + 1): exact at every step
        acc = acc.checked_mul(m.checked_sub(j)?)? / (j + 1);
    }
    Some(acc)
}

/// The Cantor polynomial extended to negative coordinates, as daisy 1.x
/// evaluates it for hand-made blocks that start before the total ROI:
/// `sum_{k=1..n} C(k - 1 + x_1 + .. + x_k, k)`. Equal to [`cantor_number`]
/// for non-negative positions. None if it does not fit in 64 bits.
pub fn cantor_number_signed(position: &[i64]) -> Option<i64> {
    let mut id: i128 = 0;
    let mut partial: i128 = 0;
    for (k, &x) in position.iter().enumerate() {
        partial = partial.checked_add(x as i128)?;
        id = id.checked_add(binomial_poly(k as i128 + partial, k as u32 + 1)?)?;
    }
    i64::try_from(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn signed_matches_unsigned_and_daisy_1x_on_negatives() {
        for x in 0..15 {
            for y in 0..15 {
                assert_eq!(
                    cantor_number_signed(&[x, y]).unwrap() as u64,
                    cantor_number(&[x, y])
                );
            }
        }
        // values observed from daisy 1.2.2
        assert_eq!(cantor_number_signed(&[3, 4]), Some(31));
        assert_eq!(cantor_number_signed(&[4, 3]), Some(32));
        assert_eq!(cantor_number_signed(&[1, 1, 1]), Some(14));
        assert_eq!(cantor_number_signed(&[-1, -1]), Some(0));
        assert_eq!(cantor_number_signed(&[-2, -2]), Some(4));
        assert_eq!(cantor_number_signed(&[-2, 0]), Some(-1));
        assert_eq!(cantor_number_signed(&[-2, 1]), Some(-2));
        assert_eq!(cantor_number_signed(&[0, -2]), Some(1));
        assert_eq!(cantor_number_signed(&[-3]), Some(-3));
    }

    #[test]
    fn ids_beyond_64_bits_are_refused() {
        assert_eq!(cantor_number_checked(&[1 << 33, 1 << 33]), None);
        assert!(cantor_number_checked(&[1 << 20, 1 << 20]).is_some());
        assert_eq!(cantor_number_signed(&[i64::MAX, i64::MAX]), None);
        assert_eq!(cantor_number_checked(&[i64::MAX; 8]), None);
    }

    #[test]
    fn one_dimension_is_identity() {
        for i in 0..100 {
            assert_eq!(cantor_number(&[i]), i as u64);
        }
    }

    #[test]
    fn two_dimensions_follow_diagonals() {
        // (0,0)=0; sum 1: (1,0),(0,1) get 1,2 in some order; sum 2 starts at 3
        assert_eq!(cantor_number(&[0, 0]), 0);
        let s1: HashSet<u64> = [cantor_number(&[1, 0]), cantor_number(&[0, 1])].into();
        assert_eq!(s1, [1, 2].into());
        let s2: HashSet<u64> = [
            cantor_number(&[2, 0]),
            cantor_number(&[1, 1]),
            cantor_number(&[0, 2]),
        ]
        .into();
        assert_eq!(s2, [3, 4, 5].into());
    }

    #[test]
    fn injective_on_a_3d_grid() {
        let mut seen = HashSet::new();
        for x in 0..12 {
            for y in 0..12 {
                for z in 0..12 {
                    assert!(seen.insert(cantor_number(&[x, y, z])));
                }
            }
        }
    }

    #[test]
    fn dense_on_simplices() {
        // every id below simplex_volume(3, s) is used by a point with sum < s
        let s = 9;
        let mut ids: Vec<u64> = Vec::new();
        for x in 0..s {
            for y in 0..s - x {
                for z in 0..s - x - y {
                    ids.push(cantor_number(&[x, y, z]));
                }
            }
        }
        ids.sort_unstable();
        let expect: Vec<u64> = (0..simplex_volume(3, s as u128).unwrap() as u64).collect();
        assert_eq!(ids, expect);
    }
}
