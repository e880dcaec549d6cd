//! `tandem net echo` starts its peers on ports that no outgoing connection
//! can take first. The ports used to be ephemeral ones, released for a
//! peer to bind. Meanwhile the peers that started first dial out from
//! ephemeral source ports, and one of them could be a later peer's port,
//! which then never listened ("Connection refused"). In a namespace whose
//! ephemeral range is 41 ports wide, that happens on nearly every run.

use std::process::Command;

#[test]
fn the_echo_peers_listen_even_when_outgoing_connections_crowd_the_ephemeral_range() {
    let run = std::thread::spawn(|| {
        tandem_nemesis::enter_fresh_netns().expect("a network namespace (root needed)");
        std::fs::write("/proc/sys/net/ipv4/ip_local_port_range", "40000 40040")
            .expect("the namespace's ephemeral range");
        Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["net", "echo", "--nodes", "5", "--window", "20", "--seconds", "0.5"])
            .output()
            .expect("tandem runs")
    });
    let out = run.join().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("echo among 5 processes"), "{stdout}");
}
