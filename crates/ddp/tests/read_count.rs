//! The nodes count the client reads that meet a write not yet persisted
//! everywhere (DDP §8.1's measure of contention under ⟨RE, RE⟩).

use tandem_ddp::{Bugs, DdpNode, Model, Op, Params};
use tandem_net::{Config, Input, Protocol};

#[test]
fn a_read_behind_an_unpersisted_write_is_counted() {
    let (model, config) = (
        Model::parse("re-re").unwrap(),
        Config::new(1, vec![0, 1, 2]),
    );
    let mut n = DdpNode::new(0, model, Params::SIM, Bugs::default(), config);
    let mut out = Vec::new();
    let mut client = |n: &mut DdpNode, req, op| {
        n.step(
            0,
            Input::Client {
                session: 1,
                req,
                op,
            },
            &mut out,
        );
    };
    client(&mut n, 0, Op::read(7));
    client(&mut n, 1, Op::write(7, 42, 0));
    // Its write is neither acknowledged nor persisted anywhere yet.
    client(&mut n, 2, Op::read(7));
    client(&mut n, 3, Op::read(8));
    assert_eq!((n.reads.reads, n.reads.unpersisted), (3, 1));
}
