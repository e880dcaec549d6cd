//! Workloads that drive a Tandem store, each with a post-run consistency check
//! computed from application state (docs/DESIGN.md §6). The OLTP ones are those
//! of FORD and Pandora; "Pandora §N" is a section of *Fast, Highly Available,
//! and Recoverable Transactions on Disaggregated Data Stores* (EDBT 2025).

pub mod bank;
pub mod ledger;
pub mod micro;
pub mod smallbank;
pub mod tatp;
#[cfg(test)]
mod testkit;
pub mod tpcc;

pub use tandem_ycsb::Zipf;

/// Draw a transaction type from a mix of `(name, percent)` entries summing to
/// 100: one `rng.below(100)` draw, so every client (and the peers of `tandem
/// compare`) consumes its random stream identically.
pub fn pick_from_mix(rng: &mut tandem_sim::Rng, mix: &[(&str, u64)]) -> usize {
    let mut roll = rng.below(100);
    for (k, (_, p)) in mix.iter().enumerate() {
        if roll < *p {
            return k;
        }
        roll -= p;
    }
    panic!("transaction mix does not sum to 100")
}
