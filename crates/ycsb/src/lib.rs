//! YCSB core workloads as key/op choosers, store-agnostic (Cooper et al.,
//! SoCC'10): A = 50 % reads / 50 % updates, B = 95/5, C = 100/0, and the
//! DDP paper's W = 5/95. Keys are Zipfian (θ = 0.99, YCSB's default) or
//! uniform over `records`.

use tandem_sim::Rng;

mod zipf;

pub use zipf::Zipf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YcsbOp {
    Read(u64),
    Update(u64),
}

#[derive(Clone, Debug)]
pub struct Ycsb {
    pub name: String,
    pub records: u64,
    pub read_ratio: f64,
    zipf: Option<Zipf>,
}

impl Ycsb {
    pub const NAMES: [&'static str; 4] = ["ycsb-a", "ycsb-b", "ycsb-c", "ycsb-w"];

    /// `ycsb-a|b|c|w` over `records` keys; `uniform` replaces the Zipfian choice.
    pub fn new(name: &str, records: u64, uniform: bool) -> Result<Ycsb, String> {
        Ycsb::skewed(name, records, (!uniform).then_some(0.99))
    }

    /// `ycsb-a|b|c|w` over `records` keys, Zipfian with exponent `theta`
    /// (YCSB's default is 0.99), or uniform with None.
    pub fn skewed(name: &str, records: u64, theta: Option<f64>) -> Result<Ycsb, String> {
        let read_ratio = match name {
            "ycsb-a" => 0.5,
            "ycsb-b" => 0.95,
            "ycsb-c" => 1.0,
            "ycsb-w" => 0.05,
            other => {
                return Err(format!(
                    "unknown workload '{other}' (known: {})",
                    Ycsb::NAMES.join(", ")
                ))
            }
        };
        if records == 0 {
            return Err("a YCSB workload needs at least one record".into());
        }
        if theta.is_some_and(|t| !(t > 0.0 && t < 1.0)) {
            return Err(format!(
                "a Zipfian exponent must lie in (0, 1), not {theta:?}"
            ));
        }
        let zipf = theta.filter(|_| records > 1).map(|t| Zipf::new(records, t));
        Ok(Ycsb {
            name: name.to_string(),
            records,
            read_ratio,
            zipf,
        })
    }

    pub fn key(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            Some(z) => z.sample(rng),
            None => rng.below(self.records),
        }
    }

    pub fn next(&self, rng: &mut Rng) -> YcsbOp {
        let key = self.key(rng);
        if rng.chance(self.read_ratio) {
            YcsbOp::Read(key)
        } else {
            YcsbOp::Update(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_and_skew_are_as_named() {
        let mut rng = Rng::new(1);
        let a = Ycsb::new("ycsb-a", 1000, false).unwrap();
        let reads = (0..10_000)
            .filter(|_| matches!(a.next(&mut rng), YcsbOp::Read(_)))
            .count();
        assert!((4_500..5_500).contains(&reads), "{reads}");
        let hot = (0..10_000).filter(|_| a.key(&mut rng) < 10).count();
        assert!(
            hot > 2_000,
            "zipfian: the 1 % hottest keys get {hot} of 10 000"
        );
        let u = Ycsb::new("ycsb-w", 1000, true).unwrap();
        let hot = (0..10_000).filter(|_| u.key(&mut rng) < 10).count();
        assert!(hot < 300, "uniform: {hot}");
        assert!(Ycsb::new("ycsb-z", 10, false).is_err());
    }
}
