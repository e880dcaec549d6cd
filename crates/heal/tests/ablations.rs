//! HEAL's ablations change only what they claim to: Reactive ships the same
//! entries as HEAL but its Buddy answers an NVM scan later.

use tandem_ddp::Model;
use tandem_heal::{RecoverConfig, Scheme};

fn small(reactive_read_ns: u64) -> RecoverConfig {
    let mut cfg = RecoverConfig::new(Model::LIN_SYNCH, Scheme::Heal, 5_000);
    (cfg.downtime_ns, cfg.after_ns, cfg.reactive_read_ns) = (1_000_000, 4_000_000, reactive_read_ns);
    cfg
}

#[test]
fn the_reactive_buddy_answers_after_reading_every_entry_back_from_nvm() {
    let heal = tandem_heal::recover::run(&small(0)).expect("HEAL recovers");
    let reactive = tandem_heal::recover::run(&small(1_000)).expect("Reactive recovers");
    assert!(!heal.fell_back_to_full_copy && !reactive.fell_back_to_full_copy);
    assert!(reactive.missed_entries > 100, "{reactive:?}");
    let scan_us = reactive.missed_entries as f64; // 1 µs per entry
    let extra = reactive.catchup_to_resp_us - heal.catchup_to_resp_us;
    assert!(extra > 0.8 * scan_us, "the NVM scan of {} entries added only {extra:.0} µs", reactive.missed_entries);
    assert!(reactive.recovery_us > heal.recovery_us);
}
