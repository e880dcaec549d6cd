use std::collections::BTreeSet;
use tandem_lrp::litmus::{explore, random_program};
use tandem_lrp::{persist_order, Model, Mutant, PolicyKind};
use tandem_sim::Rng;

#[test]
fn probe() {
    let mut rng = Rng::new(7);
    let mut illegal_by_axiom = 0;
    let mut imgs = 0;
    for i in 0..200 {
        let p = random_program(&mut rng, 3, 6, 4);
        let o = explore(&p, PolicyKind::Lrp, None, 0..20, 64, |trace, present| {
            imgs += 1;
            if persist_order(trace, Model::Rp).check(trace, present).is_err() { illegal_by_axiom += 1; }
        });
        if let Some((img, w)) = o.illegal().next() { panic!("program {i} {:?}: {img:?} {w}", p); };
    }
    eprintln!("images {imgs}, axiom-illegal {illegal_by_axiom}");
    for m in Mutant::ALL.into_iter().filter(|m| m.is_mechanism()) {
        let mut rng = Rng::new(7);
        let mut caught = None;
        for i in 0..300 {
            let p = random_program(&mut rng, 3, 6, 4);
            let o = explore(&p, PolicyKind::Lrp, Some(m), 0..20, 64, |_, _| {});
            if o.illegal().next().is_some() { caught = Some(i); break; }
        }
        eprintln!("{:?}: caught at program {:?}", m, caught);
    }
    let _ = BTreeSet::<u8>::new();
}
