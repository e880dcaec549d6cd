//! Zipfian key chooser (Gray et al., "Quickly generating billion-record
//! synthetic databases", as used by YCSB), over keys `0..n`.

use tandem_sim::Rng;

#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipf {
    /// `theta` in (0, 1); larger is more skewed.
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(
            n > 0 && theta > 0.0 && theta < 1.0,
            "zipf needs n > 0 and 0 < theta < 1"
        );
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let v = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_towards_small_keys_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut low = 0;
        for _ in 0..10_000 {
            let k = z.sample(&mut rng);
            assert!(k < 1000);
            if k < 10 {
                low += 1;
            }
        }
        assert!(
            low > 2_000,
            "top 1% of keys should get far more than 1% of accesses, got {low}"
        );
    }
}
