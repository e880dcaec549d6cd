//! The recovery-time sweep carried past the stores the simulator can hold
//! (HEAL §IX-A: HEAL about flat, the full copy linear in the store).
//!
//! Two laws, each fitted on the measured sweep and checked on a larger
//! store measured apart:
//!
//! - **What HEAL ships.** The `MissedUpdates` buffer keeps the latest update
//!   per key written during the absence. With `W` writes on uniform keys
//!   over `N` records that is `N (1 − e^(−W/N))` distinct keys: all of a
//!   small store, and `W` at most. `W` is fitted on the entries shipped.
//!   HEAL's recovery is then a straight line in the entries shipped.
//! - **The full copy** is a straight line in the records.

use serde::Serialize;

/// One measured store size.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Point {
    pub records: u64,
    pub heal_us: f64,
    pub full_copy_us: f64,
    /// Entries HEAL's Buddy shipped.
    pub entries: f64,
}

/// The two laws with their fitted coefficients.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Extension {
    /// Writes during the absence (the entries a huge store would ship).
    pub absence_writes: f64,
    pub heal_base_us: f64,
    pub heal_us_per_entry: f64,
    pub copy_base_us: f64,
    pub copy_us_per_record: f64,
}

impl Extension {
    /// Fit on `points` (at least two sizes).
    pub fn fit(points: &[Point]) -> Result<Extension, String> {
        if points.len() < 2 {
            return Err("extending the sweep needs two measured sizes at least".into());
        }
        let absence_writes = fit_writes(points);
        let entries: Vec<f64> = points
            .iter()
            .map(|p| distinct(absence_writes, p.records as f64))
            .collect();
        let heal: Vec<f64> = points.iter().map(|p| p.heal_us).collect();
        let (heal_base_us, heal_us_per_entry) = line(&entries, &heal);
        let records: Vec<f64> = points.iter().map(|p| p.records as f64).collect();
        let copy: Vec<f64> = points.iter().map(|p| p.full_copy_us).collect();
        let (copy_base_us, copy_us_per_record) = line(&records, &copy);
        Ok(Extension {
            absence_writes,
            heal_base_us,
            heal_us_per_entry,
            copy_base_us,
            copy_us_per_record,
        })
    }

    pub fn entries(&self, records: u64) -> f64 {
        distinct(self.absence_writes, records as f64)
    }

    pub fn heal_us(&self, records: u64) -> f64 {
        self.heal_base_us + self.heal_us_per_entry * self.entries(records)
    }

    pub fn full_copy_us(&self, records: u64) -> f64 {
        self.copy_base_us + self.copy_us_per_record * records as f64
    }

    pub fn ratio(&self, records: u64) -> f64 {
        self.full_copy_us(records) / self.heal_us(records).max(1e-9)
    }

    /// The smallest store of `from` records or more (to 1 %) where the
    /// full copy takes `ratio` times HEAL's recovery, if one below 10^12
    /// records does (`from`: the largest size measured; the laws are
    /// for beyond it).
    pub fn records_for_ratio(&self, ratio: f64, from: u64) -> Option<u64> {
        let mut hi = from.max(1);
        if self.ratio(hi) >= ratio {
            return Some(hi);
        }
        while self.ratio(hi) < ratio {
            hi = hi.checked_mul(2).filter(|&h| h < 1_000_000_000_000)?;
        }
        let mut lo = (hi / 2).max(from);
        while hi - lo > hi / 100 {
            let mid = lo + (hi - lo) / 2;
            match self.ratio(mid) >= ratio {
                true => hi = mid,
                false => lo = mid,
            }
        }
        Some(hi)
    }

    /// Each side's growth between two store sizes, in ms per million records.
    pub fn slopes_ms_per_million(&self, from: u64, to: u64) -> (f64, f64) {
        let per_m = |f: &dyn Fn(u64) -> f64| (f(to) - f(from)) / 1e3 / ((to - from) as f64 / 1e6);
        (
            per_m(&|n| self.heal_us(n)),
            per_m(&|n| self.full_copy_us(n)),
        )
    }
}

/// Distinct keys among `writes` uniform draws over `records` keys.
fn distinct(writes: f64, records: f64) -> f64 {
    records * -(-writes / records).exp_m1()
}

/// The absence's writes that best explain the entries shipped (least
/// squares, golden-section search on a log scale).
fn fit_writes(points: &[Point]) -> f64 {
    let err = |lw: f64| -> f64 {
        let w = lw.exp();
        points
            .iter()
            .map(|p| (distinct(w, p.records as f64) - p.entries).powi(2))
            .sum()
    };
    let top = points.iter().map(|p| p.entries).fold(1.0, f64::max);
    let (mut a, mut b) = (top.ln(), (top * 1e3).ln());
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..200 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        match err(c) < err(d) {
            true => b = d,
            false => a = c,
        }
    }
    ((a + b) / 2.0).exp()
}

/// Least-squares line `y = a + b x`.
fn line(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - b * mx, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points drawn from known laws give those laws back, and HEAL's
    /// recovery stops growing once the store is far larger than the
    /// writes of the absence while the full copy keeps growing.
    #[test]
    fn known_laws_are_recovered_and_extended() {
        let truth = Extension {
            absence_writes: 30_000.0,
            heal_base_us: 100.0,
            heal_us_per_entry: 0.25,
            copy_base_us: 0.0,
            copy_us_per_record: 0.2,
        };
        let points: Vec<Point> = [10_000, 30_000, 100_000, 300_000]
            .map(|n| Point {
                records: n,
                heal_us: truth.heal_us(n),
                full_copy_us: truth.full_copy_us(n),
                entries: truth.entries(n),
            })
            .to_vec();
        let fit = Extension::fit(&points).unwrap();
        assert!(
            (fit.absence_writes / 30_000.0 - 1.0).abs() < 1e-3,
            "{fit:?}"
        );
        assert!((fit.heal_us_per_entry / 0.25 - 1.0).abs() < 1e-3, "{fit:?}");
        assert!((fit.copy_us_per_record / 0.2 - 1.0).abs() < 1e-6, "{fit:?}");
        let (heal, copy) = fit.slopes_ms_per_million(1_000_000, 10_000_000);
        assert!((copy - 200.0).abs() < 1e-6 && heal < 0.2, "{heal} {copy}");
        let n = fit.records_for_ratio(100.0, 300_000).unwrap();
        assert!(
            fit.ratio(n) >= 100.0 && fit.ratio(n * 98 / 100) < 100.0,
            "{n}"
        );
    }

    /// Entries shipped saturate at the absence's writes: a store of ten
    /// times the writes ships about 95 % of them, a huge one all of them
    /// and never more; a store a tenth of them ships nearly every key.
    #[test]
    fn entries_saturate_at_the_absence_writes() {
        assert!((distinct(1_000.0, 10_000.0) / 1_000.0 - 0.95).abs() < 0.01);
        let huge = distinct(1_000.0, 1e12);
        assert!(huge <= 1_000.0 + 1e-6 && huge > 999.9, "{huge}");
        assert!((distinct(1_000.0, 100.0) - 100.0).abs() < 0.01);
    }
}
