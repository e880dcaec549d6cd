use tandem_bench::sim_run::{run, SimConfig};
use tandem_dkvs::{BugSwitches, Mode};
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(50);
    let mut found = 0;
    let mut commits = 0;
    let mut aborts = 0;
    for seed in 0..n {
        let mut cfg = SimConfig::bank(Mode::Traditional, seed);
        cfg.bank_mut().customers = std::env::args()
            .nth(2)
            .map(|s| s.parse().unwrap())
            .unwrap_or(6);
        cfg.hot_sibling_pair = true;
        cfg.bugs = BugSwitches {
            relaxed_locks: true,
            ..Default::default()
        };
        let r = run(&cfg);
        commits += r.committed;
        aborts += r.aborted;
        if !r.violations.is_empty() {
            found += 1;
            println!("seed {seed}");
        }
        if seed == 0 {
            println!("{:?}", r.stats.aborts_by_reason);
        }
    }
    println!("{found}/{n} caught; commits {commits} aborts {aborts}");
}
