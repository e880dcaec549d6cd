use tandem_lrp::bench::{bench, BenchOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::PolicyKind;
#[test]
fn probe() {
    let size: usize = std::env::var("SIZE").ok().and_then(|s| s.parse().ok()).unwrap_or(4096);
    let threads: usize = std::env::var("THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    let ops: usize = std::env::var("OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let only = std::env::var("LFDS").unwrap_or_default();
    for lfd in LfdKind::ALL.into_iter().filter(|l| only.is_empty() || only.contains(l.name())) {
        let mut nop = 0;
        for policy in [PolicyKind::Nop, PolicyKind::Lrp] {
            let r = bench(&BenchOpts { lfd, policy, threads, size, ops, nvm: 120, ret_watermark: std::env::var("WM").ok().and_then(|s| s.parse().ok()).unwrap_or(28), seed: 1 });
            if policy == PolicyKind::Nop { nop = r.cycles; }
            eprintln!("{:8} {:5} cycles {:>10} ({:.3}x) persists {:>7} crit {:.2} stall dg {} dir {} ev {} pol {} acc {:>9} dgs {} ev {}", lfd.name(), policy.name(), r.cycles, r.cycles as f64 / nop as f64, r.stats.persists, r.critical_share, r.stats.stall_downgrade, r.stats.stall_directory, r.stats.stall_evict, r.stats.stall_policy, r.stats.accesses, r.stats.downgrades, r.stats.evictions);
        }
    }
}
