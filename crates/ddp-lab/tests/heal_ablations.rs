//! HEAL's ablations change only what they claim to: Reactive ships the same
//! entries as HEAL but its Buddy answers an NVM scan later; NoShadow asks
//! its Buddy in rounds.

use tandem_ddp::Model;
use tandem_ddp_lab::heal::{RecoverConfig, Scheme};

fn small(reactive_read_ns: u64) -> RecoverConfig {
    let mut cfg = RecoverConfig::new(Model::LIN_SYNCH, Scheme::Heal, 5_000);
    (cfg.downtime_ns, cfg.after_ns, cfg.reactive_read_ns) =
        (1_000_000, 4_000_000, reactive_read_ns);
    cfg
}

#[test]
fn the_reactive_buddy_answers_after_reading_every_entry_back_from_nvm() {
    let heal = tandem_ddp_lab::heal::recover::run(&small(0)).expect("HEAL recovers");
    let reactive = tandem_ddp_lab::heal::recover::run(&small(1_000)).expect("Reactive recovers");
    assert!(!heal.fell_back_to_full_copy && !reactive.fell_back_to_full_copy);
    assert!(reactive.missed_entries > 100, "{reactive:?}");
    let scan_us = reactive.missed_entries as f64; // 1 µs per entry
    let extra = reactive.catchup_to_resp_us - heal.catchup_to_resp_us;
    assert!(
        extra > 0.8 * scan_us,
        "the NVM scan of {} entries added only {extra:.0} µs",
        reactive.missed_entries
    );
    assert!(reactive.recovery_us > heal.recovery_us);
}

/// NoShadow: the recovering node takes no writes while it catches up, so
/// one answer is not enough under a write load. It asks again (more than
/// one round), ships more than HEAL's single answer, and recovers later;
/// it still ends by the Buddy, not by the full-copy fallback.
#[test]
fn without_the_shadow_replica_the_buddy_is_chased_in_rounds() {
    let heal = tandem_ddp_lab::heal::recover::run(&small(0)).expect("HEAL recovers");
    let no_shadow = tandem_ddp_lab::heal::recover::run(&RecoverConfig {
        no_shadow: true,
        ..small(0)
    })
    .expect("NoShadow recovers");
    assert!(!no_shadow.fell_back_to_full_copy, "{no_shadow:?}");
    assert_eq!(heal.rounds, 1, "HEAL asks once: {heal:?}");
    assert!(no_shadow.rounds >= 2, "{no_shadow:?}");
    assert!(
        no_shadow.missed_entries > heal.missed_entries,
        "NoShadow shipped {} entries, HEAL {}",
        no_shadow.missed_entries,
        heal.missed_entries
    );
    assert!(
        no_shadow.recovery_us > heal.recovery_us,
        "NoShadow {:.0} us, HEAL {:.0} us",
        no_shadow.recovery_us,
        heal.recovery_us
    );
}
