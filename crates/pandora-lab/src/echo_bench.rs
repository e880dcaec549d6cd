//! The physical limit the tcp fabric is judged against: the same frames over
//! the same loopback sockets, answered by a server that does nothing but
//! echo a reply of the right size. `fabric-bench --fabric echo` runs it with
//! the threads, depth and servers of a `--fabric tcp` run.
//!
//! Request and reply are a real `Batch` frame of one read and its `Done`
//! frame (built by `tcp::wire`), so both sides move the bytes a verb moves.
//! Clients are blocking threads: the oldest request's reply is read first,
//! every reply already buffered is taken with it, and one write per server
//! carries the requests that replace them. Servers answer each connection
//! on its own thread and write when their input runs dry.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use tandem_fabric::tcp::wire;
use tandem_fabric::{Verb, VerbOutput};
use tandem_sim::Rng;

use crate::fabric_bench::{measure, FabricBenchResult, Shape};

/// Frame sizes of one read of `read_bytes`: (request, reply).
fn frame_sizes(read_bytes: u32) -> (usize, usize) {
    let mut req = Vec::new();
    wire::encode_batch(&mut req, 1, &[Verb::read(0, read_bytes)]);
    let mut rep = Vec::new();
    let start = wire::begin_done(&mut rep, 1, 1);
    let done = Ok(VerbOutput::Read(vec![0; read_bytes as usize]));
    wire::encode_completion(&mut rep, &done);
    wire::end_frame(&mut rep, start);
    (req.len(), rep.len())
}

/// An echo server on a loopback port; its threads end with the process.
fn start_server(req: usize, rep: usize) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream, req, rep));
        }
    });
    Ok(addr)
}

fn serve(stream: TcpStream, req: usize, rep: usize) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut rd = BufReader::with_capacity(64 << 10, stream);
    let mut wr = BufWriter::with_capacity(64 << 10, write_half);
    let (mut frame, reply) = (vec![0u8; req], vec![0u8; rep]);
    while rd.read_exact(&mut frame).is_ok() {
        if wr.write_all(&reply).is_err() {
            return;
        }
        if rd.buffer().len() < req && wr.flush().is_err() {
            return;
        }
    }
}

/// One client thread: `depth` requests in flight over one connection per server.
fn client(
    addrs: &[SocketAddr],
    depth: u32,
    (req, rep): (usize, usize),
    stop: &AtomicBool,
    seed: u64,
) -> Result<u64, String> {
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for a in addrs {
        let s = TcpStream::connect(a).map_err(|e| format!("echo connect {a}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        writers.push((s.try_clone().map_err(|e| e.to_string())?, Vec::new()));
        readers.push(BufReader::with_capacity(64 << 10, s));
    }
    let mut rng = Rng::new(seed);
    let (frame, mut reply) = (vec![7u8; req], vec![0u8; rep]);
    let mut in_flight: VecDeque<usize> = VecDeque::new();
    let mut send = |in_flight: &mut VecDeque<usize>, writers: &mut Vec<(TcpStream, Vec<u8>)>| {
        let c = rng.below(addrs.len() as u64) as usize;
        writers[c].1.extend_from_slice(&frame);
        in_flight.push_back(c);
    };
    let flush = |writers: &mut Vec<(TcpStream, Vec<u8>)>| -> Result<(), String> {
        for (s, buf) in writers.iter_mut().filter(|(_, b)| !b.is_empty()) {
            s.write_all(buf).map_err(|e| e.to_string())?;
            buf.clear();
        }
        Ok(())
    };
    (0..depth).for_each(|_| send(&mut in_flight, &mut writers));
    flush(&mut writers)?;
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // The oldest reply first; then every reply already here, in order.
        let mut answered = 0;
        while let Some(&c) = in_flight.front() {
            if answered > 0 && readers[c].buffer().len() < rep {
                break;
            }
            readers[c]
                .read_exact(&mut reply)
                .map_err(|e| format!("echo read: {e}"))?;
            in_flight.pop_front();
            answered += 1;
        }
        count += answered;
        (0..answered).for_each(|_| send(&mut in_flight, &mut writers));
        flush(&mut writers)?;
    }
    Ok(count)
}

/// Measure the echo limit with the shape of a fabric-bench run.
pub fn run(
    servers: usize,
    threads: u32,
    depth: u32,
    read_bytes: u32,
    duration: Duration,
) -> Result<FabricBenchResult, String> {
    if depth == 0 || threads == 0 || servers == 0 {
        return Err("depth, threads and servers must be positive".into());
    }
    let sizes = frame_sizes(read_bytes);
    let addrs: Vec<SocketAddr> = (0..servers)
        .map(|_| start_server(sizes.0, sizes.1))
        .collect::<Result<_, _>>()?;
    let shape = Shape {
        fabric: "echo".into(),
        threads,
        depth,
        read_bytes,
    };
    measure(shape, duration, |t, stop| {
        let addrs = addrs.clone();
        thread::spawn(move || client(&addrs, depth, sizes, &stop, t as u64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_frames_are_a_real_read_and_its_answer() {
        let (req, rep) = frame_sizes(64);
        let mut expected = Vec::new();
        wire::encode_batch(&mut expected, 9, &[Verb::read(128, 64)]);
        assert_eq!(req, expected.len());
        assert!(rep > 64, "the reply carries the 64 bytes read");
    }

    #[test]
    fn the_echo_bench_moves_requests_at_every_depth() {
        for depth in [1, 16] {
            let r = run(2, 1, depth, 64, Duration::from_millis(200)).unwrap();
            assert!(r.verbs > 0, "depth {depth}: nothing answered");
        }
    }
}
