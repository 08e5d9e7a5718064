//! The server at many workers, simulated: the real server (`run_server`)
//! over the real protocol (the core's `Client`, on the run's local socket)
//! with N client threads, each acquiring and releasing no-op blocks as fast
//! as it can. For each N it prints blocks/s over the whole run, the p50 and
//! p99 of one release-and-acquire round trip as a client sees it, and the
//! process's resident memory with all N connected (server and clients
//! together, so an upper bound on the server's).
//!
//! `cargo bench -p daisy-core --bench simulated_clients` (add `-- 1 10`
//! for other N). Figures and the limits they show are in docs/scaling.md.
//!
//! Every client is a thread with its own single-threaded tokio runtime, as
//! each worker process has: at N = 1000 the machine runs 1000 threads on
//! its cores, so the figure includes the operating system's scheduling of
//! them, as a real run with that many workers on one host would.

// A benchmark's setup that fails should stop it, with the location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daisy_core::client::Client;
use daisy_core::server::{RunHooks, RunSnapshot, ServerConfig, TaskRuntime, run_server};
use daisy_core::{BlockStatus, DaisyError, Fit, Pipeline, Roi, Scheduler, TaskSpec};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Barrier, mpsc};
use std::time::Instant;

/// Blocks per run: enough that the slowest N runs a second or more.
const BLOCKS: i64 = 200_000;

/// Stack of a client thread: the client needs little, and 1000 threads of
/// the default 2 MiB would reserve 2 GiB of address space for nothing.
const CLIENT_STACK: usize = 256 << 10;

struct Hooks {
    addr: mpsc::Sender<SocketAddr>,
}

impl RunHooks for Hooks {
    fn tick(&mut self, _snapshot: &RunSnapshot) -> Result<(), DaisyError> {
        Ok(())
    }
    fn on_listening(&mut self, addr: SocketAddr) -> Result<(), DaisyError> {
        self.addr.send(addr).map_err(|_| DaisyError::Stopped)
    }
}

fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Figures {
    blocks_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    rss_connected_mib: f64,
    rss_before_mib: f64,
    cut_off: usize,
}

fn run(n: usize) -> Figures {
    let spec = TaskSpec::new(
        "noop",
        Roi::from_slices(&[0], &[BLOCKS]).unwrap(),
        Roi::from_slices(&[0], &[1]).unwrap(),
        Roi::from_slices(&[0], &[1]).unwrap(),
        Fit::Valid,
        false,
        0,
        vec![],
    )
    .unwrap();
    let token = format!("sim{n}x{}", std::process::id());
    let config = ServerConfig {
        host: "127.0.0.1".into(),
        port: 0,
        tasks: vec![TaskRuntime {
            max_workers: n as u32,
            auto_workers: false,
            timeout: None,
            max_worker_restarts: 0,
            requires: BTreeMap::new(),
            worker: None,
            launcher: None,
            job: None,
            resource_tracking: false,
            gpu_tracking: false,
            spawner: "external".into(),
            payload_sha256: None,
            function_sha256: None,
            idle_timeout: None,
            spawner_idle_timeout: None,
        }]
        .into(),
        resources: BTreeMap::new(),
        log_dir: None,
        log_mode: Default::default(),
        token: token.clone(),
        advertise_host: None,
        stop_all: Vec::new(),
        wait_all: Vec::new(),
        tick: daisy_core::server::TICK,
        liveness_timeout: daisy_core::liveness::DEFAULT_TIMEOUT,
        idle_timeout: None,
        memory: Default::default(),
        forecast_sample: false,
    };
    let rss_before = resident_kib();
    let (tx, rx) = mpsc::channel();
    let pipeline = Pipeline::new(vec![spec]).unwrap();
    let server = std::thread::spawn(move || {
        run_server(Scheduler::new(pipeline), config, Hooks { addr: tx })
    });
    let addr = rx.recv().unwrap();
    // everyone connects, then the clock starts
    let connected = Arc::new(Barrier::new(n + 1));
    let go = Arc::new(Barrier::new(n + 1));
    let mut threads = Vec::new();
    for _ in 0..n {
        let (connected, go, token) = (connected.clone(), go.clone(), token.clone());
        let host = addr.ip().to_string();
        let port = addr.port();
        threads.push(
            std::thread::Builder::new()
                .stack_size(CLIENT_STACK)
                .spawn(move || {
                    let mut c = Client::connect(&host, port, &token, "noop", None).unwrap();
                    connected.wait();
                    go.wait();
                    let mut round_trips = Vec::new();
                    let mut next = c.acquire_block().unwrap();
                    while let Some(mut block) = next {
                        block.status = BlockStatus::Success;
                        let t = Instant::now();
                        match c.release_and_acquire(block, None) {
                            Ok(b) => next = b,
                            // a closed connection instead of "no more
                            // blocks" (the server used to stop with
                            // requests in flight; see docs/scaling.md):
                            // counted as cut off, expected 0
                            Err(_) => return (round_trips, true),
                        }
                        round_trips.push(t.elapsed().as_secs_f64());
                    }
                    c.disconnect();
                    (round_trips, false)
                })
                .unwrap(),
        );
    }
    connected.wait();
    let rss_connected = resident_kib();
    let start = Instant::now();
    go.wait();
    let mut round_trips: Vec<f64> = Vec::new();
    let mut cut_off = 0;
    for t in threads {
        let (mine, cut) = t.join().unwrap();
        round_trips.extend(mine);
        cut_off += usize::from(cut);
    }
    let outcome = server.join().unwrap().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(outcome.states[0].completed_count, BLOCKS as u64);
    round_trips.sort_by(f64::total_cmp);
    let pct = |p: f64| round_trips[((round_trips.len() - 1) as f64 * p) as usize] * 1e6;
    Figures {
        blocks_per_s: BLOCKS as f64 / seconds,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        rss_connected_mib: rss_connected as f64 / 1024.0,
        rss_before_mib: rss_before as f64 / 1024.0,
        cut_off,
    }
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![1, 10, 100, 1000]
    } else {
        counts
    };
    println!("{BLOCKS} no-op blocks per run, one task, no conflicts");
    println!(
        "{:>6} {:>12} {:>10} {:>10} {:>14} {:>16} {:>9}",
        "N", "blocks/s", "p50 µs", "p99 µs", "RSS conn. MiB", "per client KiB", "cut off"
    );
    for n in counts {
        let f = run(n);
        let per_client = (f.rss_connected_mib - f.rss_before_mib) * 1024.0 / n as f64;
        println!(
            "{:>6} {:>12.0} {:>10.1} {:>10.1} {:>14.1} {:>16.1} {:>9}",
            n, f.blocks_per_s, f.p50_us, f.p99_us, f.rss_connected_mib, per_client, f.cut_off
        );
    }
}
