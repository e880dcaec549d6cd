//! The litmus programs of `src/litmus.rs` on the axiomatic models: each
//! image is allowed or forbidden exactly as thesis §3.4 says.

use std::collections::BTreeSet;

use tandem_lrp::{legal_images, persist_order, Model, Sync, Trace, Witness};

fn set(ids: &[usize]) -> BTreeSet<usize> {
    ids.iter().copied().collect()
}

/// MP-persist (Figure 3.1's shape): T0 writes x, then releases y; T1
/// acquires y (reading T0's release), then writes z.
fn mp() -> (Trace, [usize; 3]) {
    let mut t = Trace::new();
    let x = t.write(0, 1, Sync::Plain);
    let y = t.write(0, 2, Sync::Release);
    t.read(1, 2, Sync::Acquire, Some(y));
    let z = t.write(1, 3, Sync::Plain);
    (t, [x, y, z])
}

#[test]
fn mp_persist_under_rp_is_a_chain() {
    let (t, [x, y, z]) = mp();
    let p = persist_order(&t, Model::Rp);
    assert!(p.before(x, y) && p.before(y, z) && p.before(x, z));
    assert_eq!(
        p.check(&t, &set(&[y])),
        Err(Witness {
            missing: x,
            present: y
        }),
        "rule 1: the release cannot persist before x"
    );
    assert_eq!(
        p.check(&t, &set(&[x, z])),
        Err(Witness {
            missing: y,
            present: z
        }),
        "rules 3 and 2: z after the release"
    );
    let images = legal_images(&t, Model::Rp).unwrap();
    assert_eq!(
        images,
        vec![set(&[]), set(&[x]), set(&[x, y]), set(&[x, y, z])]
    );
}

/// ARP lets the release persist before the write it publishes (§1.5,
/// shortcoming 1), which RP forbids.
#[test]
fn arp_lets_the_release_persist_first() {
    let (t, [x, y, z]) = mp();
    let p = persist_order(&t, Model::Arp);
    assert!(
        p.check(&t, &set(&[y])).is_ok(),
        "ARP: the link may persist without the node"
    );
    assert_eq!(
        p.check(&t, &set(&[y, z])),
        Err(Witness {
            missing: x,
            present: z
        })
    );
    assert_eq!(legal_images(&t, Model::Arp).unwrap().len(), 6);
    assert!(
        legal_images(&t, Model::Rp)
            .unwrap()
            .iter()
            .all(|img| p.check(&t, img).is_ok()),
        "RP is stronger than ARP"
    );
}

/// One-way-ness (§1.6): a write after a release is not ordered after it,
/// nor after the writes before it (other addresses).
#[test]
fn a_write_after_a_release_may_persist_first() {
    let mut t = Trace::new();
    let w1 = t.write(0, 1, Sync::Plain);
    let rel = t.write(0, 2, Sync::Release);
    let w2 = t.write(0, 3, Sync::Plain);
    let p = persist_order(&t, Model::Rp);
    assert!(p.check(&t, &set(&[w2])).is_ok());
    assert!(p.before(w1, rel) && !p.before(rel, w2) && !p.before(w1, w2));
    let strict = persist_order(&t, Model::Strict);
    assert_eq!(
        strict.check(&t, &set(&[w2])),
        Err(Witness {
            missing: w1,
            present: w2
        })
    );
}

/// Rule 4: two writes of one thread to one address persist in order.
#[test]
fn same_address_writes_persist_in_program_order() {
    let mut t = Trace::new();
    let a = t.write(0, 7, Sync::Plain);
    let b = t.write(0, 7, Sync::Plain);
    let other = t.write(0, 8, Sync::Plain);
    let p = persist_order(&t, Model::Rp);
    assert_eq!(
        p.check(&t, &set(&[b])),
        Err(Witness {
            missing: a,
            present: b
        })
    );
    assert!(p.check(&t, &set(&[other])).is_ok());
}

/// A release synchronizing with an acquire-RMW: the released value, then
/// the RMW's write, then the writes after it (§1.3, note on acquires).
#[test]
fn an_acquire_rmw_chains_the_release_before_its_write() {
    let mut t = Trace::new();
    let w = t.write(0, 1, Sync::Plain);
    let rel = t.write(0, 2, Sync::Release);
    let cas = t.rmw(1, 2, Sync::AcqRel, Some(rel));
    let after = t.write(1, 3, Sync::Plain);
    let p = persist_order(&t, Model::Rp);
    assert!(p.before(w, rel) && p.before(rel, cas) && p.before(cas, after));
    assert_eq!(legal_images(&t, Model::Rp).unwrap().len(), 5);
}

/// Plain communication (a plain read of a plain write) orders nothing
/// under RP, and everything under strict persistency.
#[test]
fn plain_reads_do_not_order_persists() {
    let mut t = Trace::new();
    let x = t.write(0, 1, Sync::Plain);
    t.read(1, 1, Sync::Plain, Some(x));
    let z = t.write(1, 2, Sync::Plain);
    assert!(!persist_order(&t, Model::Rp).before(x, z));
    assert!(persist_order(&t, Model::Strict).before(x, z));
}

/// BEP (§1.5): barriers order epochs of a thread both ways (unlike RP's
/// one-way release), and a read orders the writer's epoch before the
/// reader's. With barriers around the release and after the acquire, MP is
/// ordered as under RP, and the write after the release is ordered too.
#[test]
fn bep_orders_whole_epochs() {
    let mut t = Trace::new();
    let x = t.write(0, 1, Sync::Plain);
    t.fence(0);
    let y = t.write(0, 2, Sync::Release);
    t.fence(0);
    let w = t.write(0, 4, Sync::Plain);
    t.read(1, 2, Sync::Acquire, Some(y));
    t.fence(1);
    let z = t.write(1, 3, Sync::Plain);
    let bep = persist_order(&t, Model::Bep);
    assert!(bep.before(x, y) && bep.before(y, w) && bep.before(y, z) && bep.before(x, z));
    assert!(
        !bep.before(w, z) && !bep.before(z, w),
        "the reader's epoch follows y's epoch, not later ones"
    );
    let rp = persist_order(&t, Model::Rp);
    assert!(
        rp.before(x, y) && rp.before(y, z) && !rp.before(y, w),
        "RP's release is one-way"
    );
    assert_eq!(
        bep.check(&t, &set(&[w])),
        Err(Witness {
            missing: x,
            present: w
        })
    );
    assert!(rp.check(&t, &set(&[w])).is_ok());
}
