//! DART against Tandem over the tcp and shm fabrics (real sockets or
//! memfd regions, memory servers on their own threads; `tandem dart
//! --fabric tcp|shm` starts them as processes): the correct protocols show
//! no violation.

use std::any::Any;
use std::sync::Arc;

use tandem_dart::campaign::{self, CampaignConfig, FabricKind, StoreKind};
use tandem_dart::tcp_run::TcpServers;
use tandem_dkvs::Mode;
use tandem_fabric::tcp::{MemoryServerHandle, TcpCluster};
use tandem_fabric::MemoryNode;

fn in_process_servers(shm: bool) -> TcpServers {
    Arc::new(move |count, bytes| {
        let keys = tandem_fabric::auth::MasterSecret::generate().keyring();
        let servers: Vec<MemoryServerHandle> = (0..count)
            .map(|_| {
                MemoryServerHandle::bind(
                    "127.0.0.1:0".parse().unwrap(),
                    Arc::new(match shm {
                        true => MemoryNode::shared(bytes).unwrap(),
                        false => MemoryNode::new(bytes),
                    }),
                    keys.clone(),
                )
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let cluster = TcpCluster::new(servers.iter().map(|s| s.local_addr()).collect(), keys)
            .shm(shm)
            .yielding(true);
        Ok((cluster, Box::new(servers) as Box<dyn Any>))
    })
}

#[test]
fn every_mode_passes_over_tcp() {
    every_mode_passes(false)
}

#[test]
fn every_mode_passes_on_shm() {
    every_mode_passes(true)
}

fn every_mode_passes(shm: bool) {
    for mode in [Mode::Pandora, Mode::Ford, Mode::Traditional] {
        let mut c = CampaignConfig::new(StoreKind::Tandem(mode));
        c.fabric = FabricKind::Tcp;
        c.seeds = Some(2);
        c.crash_rate = 0.0;
        c.txs_per_client = 40;
        c.shm = shm;
        c.tcp = Some(in_process_servers(shm));
        let rep = campaign::run(&c).expect("tcp campaign");
        assert_eq!(
            rep.violation_count,
            0,
            "{mode}: {:?}",
            rep.violations.first()
        );
        assert!(rep.committed > 300, "{mode}: {rep:?}");
        eprintln!(
            "{mode} over {}: {} tx, {} committed, {:.0} tx/s",
            rep.fabric, rep.transactions, rep.committed, rep.transactions_per_s
        );
    }
}
