//! DART's blind spots of issue 9, each shown closed by a run that fails on
//! the old DART and passes (finds the planted bug) now.

use tandem_dart::campaign::{self, CampaignConfig, StoreKind};
use tandem_dkvs::Mode;

/// The seed-212 history: two committed transactions read the same version
/// of an insert/delete pair; one deleted both keys, the other overwrote
/// both. The pair's assertion holds either way; only the delete's `rw` edge
/// shows the lost update.
#[test]
fn a_lost_update_through_a_delete_is_a_g2_cycle() {
    let mut c = CampaignConfig::new(StoreKind::Tandem(Mode::Pandora));
    c.tests = "1".into();
    c.first_seed = 212;
    c.seeds = Some(1);
    c.crash_rate = 0.0;
    c.bug_names = vec!["complicit-abort".into()];
    let rep = campaign::run(&c).expect("campaign runs");
    let v = rep.violations.first().expect("seed 212 reports a violation");
    assert_eq!(v.test, "litmus-1-insert-delete", "{}", v.description);
    assert!(v.description.contains("G2") && v.description.contains("-rw("), "{}", v.description);
}
