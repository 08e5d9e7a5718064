//! The server end to end over loopback, with external clients on threads:
//! every block is processed exactly once; failures are retried; a wrong
//! token, garbage and an oversized frame close only their own connection.

// A test helper that unwraps fails its test, with the location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daisy_core::client::Client;
use daisy_core::server::{
    BlockCheck, RunHooks, RunSnapshot, ServerConfig, TaskRuntime, run_server,
};
use daisy_core::{Block, BlockStatus, DaisyError, Fit, Pipeline, Roi, Scheduler, TaskSpec};
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};

struct Hooks {
    addr: mpsc::Sender<SocketAddr>,
    /// Blocks done per task at the last tick the hook saw.
    last_tick: Arc<Mutex<Vec<u64>>>,
    check: Option<Arc<dyn BlockCheck>>,
}

impl RunHooks for Hooks {
    fn block_check(&self) -> Option<Arc<dyn BlockCheck>> {
        self.check.clone()
    }
    fn tick(&mut self, snapshot: &RunSnapshot) -> Result<(), DaisyError> {
        *self.last_tick.lock().unwrap() =
            snapshot.states.iter().map(|s| s.completed_count).collect();
        Ok(())
    }
    fn on_listening(&mut self, addr: SocketAddr) -> Result<(), DaisyError> {
        self.addr.send(addr).map_err(|_| DaisyError::Stopped)
    }
}

fn pipeline() -> Pipeline {
    let roi = |o: &[i64], s: &[i64]| Roi::from_slices(o, s).unwrap();
    let a = TaskSpec::new(
        "a",
        roi(&[0, 0], &[40, 40]),
        roi(&[-1, -1], &[6, 6]),
        roi(&[0, 0], &[4, 4]),
        Fit::Shrink,
        true,
        1,
        vec![],
    )
    .unwrap();
    let b = TaskSpec::new(
        "b",
        roi(&[0, 0], &[40, 40]),
        roi(&[0, 0], &[8, 8]),
        roi(&[0, 0], &[8, 8]),
        Fit::Valid,
        false,
        1,
        vec!["a".into()],
    )
    .unwrap();
    Pipeline::new(vec![a, b]).unwrap()
}

fn config(token: &str) -> ServerConfig {
    let rt = TaskRuntime {
        max_workers: 2,
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
    };
    ServerConfig {
        host: "127.0.0.1".into(),
        port: 0,
        tasks: vec![rt.clone(), rt].into(),
        resources: BTreeMap::new(),
        log_dir: None,
        log_mode: Default::default(),
        token: token.into(),
        advertise_host: None,
        stop_all: Vec::new(),
        wait_all: Vec::new(),
        tick: daisy_core::server::TICK,
        liveness_timeout: daisy_core::liveness::DEFAULT_TIMEOUT,
        idle_timeout: None,
        memory: Default::default(),
        forecast_sample: false,
    }
}

/// The thread a test's server runs on.
type ServerThread = std::thread::JoinHandle<Result<daisy_core::server::RunOutcome, DaisyError>>;

/// A server for the two-task pipeline on its own thread, with `token`
/// (each test its own: the token names the run's local socket, and the
/// tests run at once), and the address it listens on.
fn start(token: &'static str) -> (ServerThread, SocketAddr) {
    let (server, addr, _) = start_ticking(token, daisy_core::server::TICK);
    (server, addr)
}

/// A server for the two-task pipeline asking `check` of ready blocks.
fn start_checking(token: &'static str, check: Arc<dyn BlockCheck>) -> (ServerThread, SocketAddr) {
    let (tx, rx) = mpsc::channel();
    let hooks = Hooks {
        addr: tx,
        last_tick: Arc::new(Mutex::new(Vec::new())),
        check: Some(check),
    };
    let server =
        std::thread::spawn(move || run_server(Scheduler::new(pipeline()), config(token), hooks));
    (server, rx.recv().unwrap())
}

/// The same, with the main loop ticking every `tick`; also what the tick
/// hook saw last.
fn start_ticking(
    token: &'static str,
    tick: std::time::Duration,
) -> (ServerThread, SocketAddr, Arc<Mutex<Vec<u64>>>) {
    let (tx, rx) = mpsc::channel();
    let last_tick = Arc::new(Mutex::new(Vec::new()));
    let hooks = Hooks {
        addr: tx,
        last_tick: last_tick.clone(),
        check: None,
    };
    let server = std::thread::spawn(move || {
        let config = ServerConfig {
            tick,
            ..config(token)
        };
        run_server(Scheduler::new(pipeline()), config, hooks)
    });
    (server, rx.recv().unwrap(), last_tick)
}

#[test]
fn external_clients_process_every_block_once() {
    let (server, addr) = start("s3cret");
    let seen = Arc::new(Mutex::new(Vec::<(u32, u64)>::new()));

    // hostile connections first: none of them may take a block or stop the run
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&[0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb])
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "garbage gets no reply");
    }
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "an oversized frame gets no reply"
        );
    }
    assert!(
        Client::connect(&addr.ip().to_string(), addr.port(), "wrong", "a", None).is_err(),
        "a wrong token is refused"
    );
    assert!(Client::connect(&addr.ip().to_string(), addr.port(), "s3cret", "nope", None).is_err());

    let failed_once = Arc::new(Mutex::new(HashSet::new()));
    let mut threads = Vec::new();
    // every client is in before any works: a run that ended first would
    // refuse the late ones
    let connected = Arc::new(Barrier::new(4));
    for task in ["a", "a", "b", "b"] {
        let seen = seen.clone();
        let failed_once = failed_once.clone();
        let connected = connected.clone();
        threads.push(std::thread::spawn(move || {
            let mut c =
                Client::connect(&addr.ip().to_string(), addr.port(), "s3cret", task, None).unwrap();
            connected.wait();
            while let Some(mut block) = c.acquire_block().unwrap() {
                // the first attempt at every 5th block fails: it must come back
                if block.spatial_id % 5 == 0 && failed_once.lock().unwrap().insert(block.key) {
                    c.block_failed(block, "boom".into()).unwrap();
                    continue;
                }
                seen.lock().unwrap().push((block.key.task, block.key.index));
                block.status = BlockStatus::Success;
                c.release_block(block).unwrap();
            }
            c.disconnect();
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let outcome = server.join().unwrap().map_err(|_| "run failed").unwrap();
    let seen = seen.lock().unwrap();
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a block was processed twice");
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
    let total: u64 = outcome.states.iter().map(|s| s.total_block_count).sum();
    assert_eq!(seen.len() as u64, total);
    assert_eq!(outcome.unmanaged_clients, 4);
    assert_eq!(outcome.reports.len(), 2);
    assert_eq!(outcome.reports[0].workers.unmanaged_clients, 2);
    assert_eq!(
        outcome.reports[0].blocks.count,
        outcome.states[0].completed_count
    );
    assert_eq!(
        outcome.reports[0].blocks.round_trip.n,
        outcome.states[0].completed_count
    );
    assert!(!outcome.failures.is_empty());
    assert_eq!(outcome.stopped, None);
}

/// A release that does not match the server's record of the block (another
/// grid position, of the wrong dimension even) closes that connection and
/// the block is retried; the run completes with every block done once.
#[test]
fn a_tampered_release_closes_its_connection_and_the_block_is_retried() {
    let (server, addr) = start("t4mper");
    let host = addr.ip().to_string();
    // a hostile client: takes a block, sends it back from another place
    let mut hostile = Client::connect(&host, addr.port(), "t4mper", "a", None).unwrap();
    let mut block = hostile.acquire_block().unwrap().unwrap();
    let tampered_id = block.spatial_id;
    block.position = daisy_core::Coord::new(&[7]).unwrap(); // 1-D on a 2-D task
    block.status = BlockStatus::Success;
    hostile.release_block(block).unwrap();
    assert!(
        hostile.acquire_block().is_err(),
        "the connection that broke the protocol is closed"
    );
    // honest clients finish the run, the tampered block included
    let mut done = Vec::new();
    for task in ["a", "b"] {
        let mut c = Client::connect(&host, addr.port(), "t4mper", task, None).unwrap();
        while let Some(mut b) = c.acquire_block().unwrap() {
            done.push((b.key.task, b.spatial_id));
            b.status = BlockStatus::Success;
            c.release_block(b).unwrap();
        }
        c.disconnect();
    }
    let outcome = server.join().unwrap().unwrap();
    assert_eq!(outcome.stopped, None);
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
    assert!(
        done.contains(&(0, tampered_id)),
        "the tampered block was redone"
    );
    assert_eq!(outcome.failures.len(), 1);
    assert_eq!(outcome.failures[0].spatial_id, tampered_id);
}

/// Figures that are not finite seconds break the protocol like a tampered
/// block: the connection is closed and the block is retried.
#[test]
fn non_finite_figures_close_the_connection() {
    let (server, addr) = start("n4n");
    let host = addr.ip().to_string();
    let mut hostile = Client::connect(&host, addr.port(), "n4n", "a", None).unwrap();
    let mut block = hostile.acquire_block().unwrap().unwrap();
    block.stats = Some(daisy_core::block_profile::BlockStats {
        wall_seconds: f64::NAN,
        cpu_seconds: 0.0,
        peak_rss_bytes: 0,
        io_read_bytes: 0,
        io_write_bytes: 0,
        gpu_util_pct: f32::NAN,
        gpu_mem_bytes: 0,
        run_queue_seconds: f64::NAN,
    });
    block.status = BlockStatus::Success;
    hostile.release_block(block).unwrap();
    assert!(hostile.acquire_block().is_err());
    for task in ["a", "b"] {
        let mut c = Client::connect(&host, addr.port(), "n4n", task, None).unwrap();
        while let Some(mut b) = c.acquire_block().unwrap() {
            b.status = BlockStatus::Success;
            c.release_block(b).unwrap();
        }
        c.disconnect();
    }
    let outcome = server.join().unwrap().unwrap();
    assert_eq!(outcome.failures.len(), 1);
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
}

/// More connections than `MAX_PENDING_HELLOS` waiting to say hello at
/// once (a thousand workers starting together) make the server close new
/// ones unanswered; a client tries again until there is room, instead of
/// failing its worker.
#[test]
fn a_client_refused_for_too_many_pending_hellos_gets_in_when_there_is_room() {
    let (server, addr) = start("cr0wd");
    let host = addr.ip().to_string();
    // through the door the client comes by: the run's local socket (each
    // door has its own allowance)
    let name = daisy_core::protocol::local_socket_name("cr0wd");
    // (bound just after the TCP port the test was told of: wait for it)
    let connect = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match daisy_core::protocol::connect_local_socket(&name) {
                Some(s) => return s,
                None if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                None => panic!("the run's local socket never took connections"),
            }
        }
    };
    let silent: Vec<_> = (0..daisy_core::server::MAX_PENDING_HELLOS)
        .map(|_| connect())
        .collect();
    // let the server count them all as pending
    std::thread::sleep(std::time::Duration::from_millis(300));
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(400));
        drop(silent);
    });
    let started = std::time::Instant::now();
    let mut c = Client::connect(&host, addr.port(), "cr0wd", "a", None)
        .expect("the client waits for room instead of failing");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(100),
        "the server had no room when the client first came"
    );
    releaser.join().unwrap();
    for task in ["a", "b"] {
        if task == "b" {
            c = Client::connect(&host, addr.port(), "cr0wd", task, None).unwrap();
        }
        while let Some(mut b) = c.acquire_block().unwrap() {
            b.status = BlockStatus::Success;
            c.release_block(b).unwrap();
        }
    }
    c.disconnect();
    let outcome = server.join().unwrap().unwrap();
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
}

/// Clients whose last release ends the run, with their next request sent
/// with it (`release_and_acquire`, what every worker does), hear "no more
/// blocks" instead of a closed connection: the run waits for the requests
/// already in flight before it stops serving.
#[test]
fn requests_in_flight_when_the_run_ends_are_answered() {
    // more clients than blocks: most of them wait for one when the run ends
    const CLIENTS: usize = 300;
    let (server, addr) = start("in-flight");
    let mut threads = Vec::new();
    // every client is in before any works: the run, which now ends as its
    // last block comes back, would refuse those still connecting (a
    // connection reset, not a request in flight)
    let connected = Arc::new(Barrier::new(CLIENTS));
    for i in 0..CLIENTS {
        let task = if i % 2 == 0 { "a" } else { "b" };
        let connected = connected.clone();
        threads.push(std::thread::spawn(move || {
            let mut c =
                Client::connect(&addr.ip().to_string(), addr.port(), "in-flight", task, None)
                    .unwrap();
            connected.wait();
            let mut next = c.acquire_block();
            while let Ok(Some(mut block)) = next {
                block.status = BlockStatus::Success;
                next = c.release_and_acquire(block, None);
            }
            let ended = next.map(|_| ()).map_err(|e| e.to_string());
            c.disconnect();
            ended
        }));
    }
    let ends: Vec<Result<(), String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let outcome = server.join().unwrap().map_err(|_| "run failed").unwrap();
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
    let closed: Vec<&String> = ends.iter().filter_map(|e| e.as_ref().err()).collect();
    assert!(
        closed.is_empty(),
        "{} of 24 clients saw: {closed:?}",
        closed.len()
    );
}

/// The run ends as soon as its last block is back, not at the main loop's
/// next tick: with a tick of an hour, a run whose blocks all came back
/// still ends (it used to wait for the tick, up to 50 ms in every run),
/// and the tick hook still sees its final counts (progress bars end full).
#[test]
fn the_run_ends_when_its_last_block_is_back_not_at_a_tick() {
    let (server, addr, last_tick) = start_ticking("no-tick", std::time::Duration::from_secs(3600));
    let mut threads = Vec::new();
    for task in ["a", "b"] {
        threads.push(std::thread::spawn(move || {
            let mut c = Client::connect(&addr.ip().to_string(), addr.port(), "no-tick", task, None)
                .unwrap();
            while let Some(mut block) = c.acquire_block().unwrap() {
                block.status = BlockStatus::Success;
                c.release_block(block).unwrap();
            }
            c.disconnect();
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    // generous: only a run waiting for its tick takes anywhere near this
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.join());
    });
    let outcome = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run did not end within 60 s of its last block")
        .unwrap()
        .map_err(|_| "run failed")
        .unwrap();
    for st in &outcome.states {
        assert_eq!(st.completed_count, st.total_block_count);
    }
    let totals: Vec<u64> = outcome.states.iter().map(|s| s.total_block_count).collect();
    assert_eq!(
        *last_tick.lock().unwrap(),
        totals,
        "the hook saw the final counts"
    );
}

/// Task b's check: its even blocks are done. Slow, and it records how many
/// calls ran at once.
struct EvenDone {
    running: Mutex<u32>,
    most_at_once: Mutex<u32>,
    calls: Mutex<u32>,
}

impl BlockCheck for EvenDone {
    fn checks(&self, task: daisy_core::TaskIndex) -> bool {
        task == 1
    }
    fn already_done(&self, block: &Block) -> Result<bool, DaisyError> {
        {
            let mut running = self.running.lock().unwrap();
            *running += 1;
            let mut most = self.most_at_once.lock().unwrap();
            *most = (*most).max(*running);
            *self.calls.lock().unwrap() += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        *self.running.lock().unwrap() -= 1;
        assert_eq!(block.key.task, 1, "only task b has a check");
        Ok(block.key.index.is_multiple_of(2))
    }
}

#[test]
fn a_check_skips_its_done_blocks_one_call_at_a_time_off_the_servers_thread() {
    let check = Arc::new(EvenDone {
        running: Mutex::new(0),
        most_at_once: Mutex::new(0),
        calls: Mutex::new(0),
    });
    let (server, addr) = start_checking("checking", check.clone());
    let seen = Arc::new(Mutex::new(Vec::<(u32, u64)>::new()));
    let connected = Arc::new(Barrier::new(4));
    let threads: Vec<_> = ["a", "a", "b", "b"]
        .into_iter()
        .map(|task| {
            let (seen, connected) = (seen.clone(), connected.clone());
            std::thread::spawn(move || {
                let mut c =
                    Client::connect(&addr.ip().to_string(), addr.port(), "checking", task, None)
                        .unwrap();
                connected.wait();
                while let Some(mut block) = c.acquire_block().unwrap() {
                    seen.lock().unwrap().push((block.key.task, block.key.index));
                    block.status = BlockStatus::Success;
                    c.release_block(block).unwrap();
                }
                c.disconnect();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let outcome = server.join().unwrap().map_err(|_| "run failed").unwrap();
    let seen = seen.lock().unwrap();
    let b: Vec<u64> = seen
        .iter()
        .filter(|(t, _)| *t == 1)
        .map(|(_, i)| *i)
        .collect();
    assert!(
        b.iter().all(|i| i % 2 == 1),
        "a block its check found done went out"
    );
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a block was processed twice");
    let (sa, sb) = (&outcome.states[0], &outcome.states[1]);
    assert_eq!(sa.completed_count, sa.total_block_count);
    assert_eq!(sa.skipped_count, 0, "task a has no check");
    assert_eq!(sb.completed_count, sb.total_block_count);
    assert_eq!(sb.skipped_count, sb.total_block_count.div_ceil(2));
    assert_eq!(b.len() as u64, sb.total_block_count / 2);
    // every block of b was asked once, never two at once
    assert_eq!(*check.calls.lock().unwrap() as u64, sb.total_block_count);
    assert_eq!(*check.most_at_once.lock().unwrap(), 1);
}

#[test]
fn settings_for_another_number_of_tasks_are_refused_before_the_server_starts() {
    let (tx, _rx) = mpsc::channel();
    let hooks = Hooks {
        addr: tx,
        last_tick: Arc::new(Mutex::new(Vec::new())),
        check: None,
    };
    let mut cfg = config("short");
    let fewer = cfg.tasks.len() - 1;
    cfg.tasks = cfg.tasks.iter().take(fewer).cloned().collect();
    let err = run_server(Scheduler::new(pipeline()), cfg, hooks)
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("config.tasks") && text.contains("1 tasks"),
        "{text}"
    );
}
