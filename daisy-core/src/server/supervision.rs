//! Worker processes: starting one ([`spawn`]), copying its output
//! (through [`super::output`]), killing its process group, and running a spawner's stop
//! command. Supervision acts and never decides: whether to start or kill a
//! worker is policy's call (`server/policy.rs`), and a worker's exit is
//! reported back to the main loop as an event, not handled here.
//!
//! Each worker is the leader of its own process group, so the terminal's
//! Ctrl-C reaches only the driver and killing a worker kills what it
//! started; it dies with the driver however the driver dies
//! (`PR_SET_PDEATHSIG`). Its stdout/stderr go straight into
//! `<log dir>/<task>/worker_<id>.out|.err` (appended, since a remote job may
//! write to the same files), or through a pipe copied to both the file and
//! the driver's console. A task's launcher (warm starts, see
//! `server::launcher`) is started here too; the workers it forks get the
//! same outputs, passed to it as descriptors ([`worker_outputs`]).

use super::config::{LogMode, WorkerCommand};
use super::memory_watch::KillFacts;
use super::output::{Console, OutputQueue, tee};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// What a worker process is told and where its output goes.
pub(super) struct Launch<'a> {
    /// The task it serves.
    pub task_id: &'a str,
    /// Its worker id.
    pub worker_id: u32,
    /// The `DAISY_CONTEXT` it gets (see [`WorkerContext::to_json`]).
    pub context: String,
    /// Base directory of the worker logs (None: the driver's console).
    pub log_dir: &'a Option<PathBuf>,
    /// Where its output goes when there is a log directory.
    pub log_mode: LogMode,
    /// Where its output is copied when it goes to both its log files and
    /// the console.
    pub output: &'a OutputQueue,
}

/// A started worker: its pid, its stop command (expanded), and its child
/// handle, whose exit the caller awaits.
pub(super) struct Spawned {
    /// The process id (None if the platform would not say).
    pub pid: Option<u32>,
    /// The command that cancels its remote part, expanded.
    pub stop: Vec<String>,
    /// The process; await its exit.
    pub child: tokio::process::Child,
}

/// Start one worker process of `cmd`, write its stdin payload in the
/// background, and copy its output where `launch` says. Must run inside a
/// tokio `LocalSet`.
pub(super) fn spawn(cmd: &WorkerCommand, launch: &Launch<'_>) -> io::Result<Spawned> {
    let (task_id, id) = (launch.task_id, launch.worker_id);
    let mut command = process_command(cmd, task_id, id);
    command.env("DAISY_CONTEXT", &launch.context);
    let mut files = None;
    if let (Some(base), LogMode::File | LogMode::Both) = (launch.log_dir, launch.log_mode) {
        let (out, err) = open_logs(base, task_id, &format!("worker_{id}"))?;
        if launch.log_mode == LogMode::File {
            command.stdout(Stdio::from(out)).stderr(Stdio::from(err));
        } else {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            files = Some((out, err));
        }
    }
    let mut child = command.spawn()?;
    if let Some((out, err)) = files {
        if let Some(pipe) = child.stdout.take() {
            tokio::task::spawn_local(tee(pipe, out, Console::Stdout, launch.output.clone()));
        }
        if let Some(pipe) = child.stderr.take() {
            tokio::task::spawn_local(tee(pipe, err, Console::Stderr, launch.output.clone()));
        }
    }
    feed_stdin(&mut child, cmd);
    Ok(Spawned {
        pid: child.id(),
        stop: cmd
            .stop
            .iter()
            .map(|a| WorkerCommand::expand(a, task_id, id))
            .collect(),
        child,
    })
}

/// The process of `cmd` as every worker and launcher is started: its own
/// process group, killed with the driver, killed when dropped, its stdin a
/// pipe for the payload. `{worker_id}`/`{task_id}` are expanded.
fn process_command(cmd: &WorkerCommand, task_id: &str, id: u32) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&cmd.program);
    command
        .args(
            cmd.args
                .iter()
                .map(|a| WorkerCommand::expand(a, task_id, id)),
        )
        .envs(cmd.env.iter().cloned())
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(die_with_parent);
    }
    command
}

/// Write the command's stdin payload to the child in the background: a
/// child that dies before reading it is seen by whoever awaits its exit.
fn feed_stdin(child: &mut tokio::process::Child, cmd: &WorkerCommand) {
    if let Some(mut stdin) = child.stdin.take() {
        let payload = cmd.stdin.clone();
        tokio::task::spawn_local(async move {
            let _ = stdin.write_all(&payload).await;
        });
    }
}

/// `<base>/<task>/<stem>.out` and `.err` (a nested task id's directories
/// made private on the way, [`crate::task_id::task_dir`]), created, opened
/// for appending:
/// appended, not truncated, since a remote job (sbatch -o/-e) may write to
/// the same files as its local handle (and a later run's `worker_0`
/// appends to an earlier run's). Each opening first writes [`log_header`],
/// so a reader tells the runs and the processes in one file apart. In a
/// private directory, never through a planted link
/// (`crate::private_files`).
fn open_logs(base: &Path, task_id: &str, stem: &str) -> io::Result<(File, File)> {
    use std::io::Write;
    let dir = crate::task_id::task_dir(base, task_id)?;
    let header = log_header(stem, task_id, crate::clock::wall_clock());
    let open = |suffix: &str| -> io::Result<File> {
        let mut f = crate::private_files::open_append(&dir.join(format!("{stem}.{suffix}")))?;
        f.write_all(header.as_bytes())?;
        Ok(f)
    };
    Ok((open("out")?, open("err")?))
}

/// The line that opens a process's part of a log file: which process of
/// which task, when, and the driver's pid (the run's: worker numbers start
/// again at 0 in every run, and a file keeps every run's output).
pub(super) fn log_header(stem: &str, task_id: &str, at: f64) -> String {
    format!(
        "--- daisy: {stem} of task {task_id} started {} (driver pid {}) ---\n",
        crate::clock::utc_datetime(at),
        std::process::id()
    )
}

/// The stdout and stderr a warm worker forked by a launcher gets, as a
/// cold one of the same `launch` would: its log files, pipes copied to the
/// log files and the console, or (no log directory) the driver's own
/// console. The caller passes them to the launcher and drops its copies.
pub(super) fn worker_outputs(launch: &Launch<'_>) -> io::Result<(OwnedFd, OwnedFd)> {
    let console = || -> io::Result<(OwnedFd, OwnedFd)> {
        Ok((
            io::stdout().as_fd().try_clone_to_owned()?,
            io::stderr().as_fd().try_clone_to_owned()?,
        ))
    };
    let Some(base) = launch.log_dir else {
        return console();
    };
    let stem = format!("worker_{}", launch.worker_id);
    match launch.log_mode {
        LogMode::Console => console(),
        LogMode::File => {
            let (out, err) = open_logs(base, launch.task_id, &stem)?;
            Ok((out.into(), err.into()))
        }
        LogMode::Both => {
            let (out, err) = open_logs(base, launch.task_id, &stem)?;
            let (out_write, out_read) = tokio::net::unix::pipe::pipe()?;
            let (err_write, err_read) = tokio::net::unix::pipe::pipe()?;
            tokio::task::spawn_local(tee(out_read, out, Console::Stdout, launch.output.clone()));
            tokio::task::spawn_local(tee(err_read, err, Console::Stderr, launch.output.clone()));
            Ok((out_write.into_blocking_fd()?, err_write.into_blocking_fd()?))
        }
    }
}

/// A started launcher: the process, and the server's end of the socket
/// it was given.
pub(super) struct SpawnedLauncher {
    /// The launcher process; await its exit.
    pub child: tokio::process::Child,
    /// The server's end of the control socket.
    pub socket: std::os::unix::net::UnixStream,
}

/// Name of the environment variable that tells a launcher the number of
/// its end of the control socket.
pub(super) const LAUNCHER_FD_VARIABLE: &str = "DAISY_LAUNCHER_FD";

/// Start the launcher of `task_id` from `cmd`: the payload on its stdin,
/// one end of a Unix socket pair kept open across exec (its number in
/// [`LAUNCHER_FD_VARIABLE`]), its own output in `launcher.out|.err` of the
/// task's log directory (the console without one).
pub(super) fn spawn_launcher(
    cmd: &WorkerCommand,
    task_id: &str,
    log_dir: &Option<PathBuf>,
) -> io::Result<SpawnedLauncher> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let fd = theirs.as_raw_fd();
    let mut command = process_command(cmd, task_id, 0);
    command.env(LAUNCHER_FD_VARIABLE, fd.to_string());
    if let Some(base) = log_dir {
        let (out, err) = open_logs(base, task_id, "launcher")?;
        command.stdout(Stdio::from(out)).stderr(Stdio::from(err));
    }
    // SAFETY: runs in the forked child before exec; fcntl is
    // async-signal-safe and only clears close-on-exec on the launcher's
    // end of the socket, so that exactly this one descriptor survives.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    drop(theirs);
    feed_stdin(&mut child, cmd);
    Ok(SpawnedLauncher {
        child,
        socket: ours,
    })
}

/// Name of the environment variable that tells a job's node launcher
/// where the server is and which job it is ([`WorkerContext::to_job_json`]).
pub(super) const JOB_CONTEXT_VARIABLE: &str = "DAISY_JOB_CONTEXT";

/// Start the local handle of job `job` of `task_id` (`sbatch --wait ...`,
/// see `server::jobs`): `{job}` and `{task_id}` expanded in its arguments
/// and stop command, its context in [`JOB_CONTEXT_VARIABLE`], its own
/// output in `job_<job>.out|.err` of the task's log directory.
pub(super) fn spawn_job(
    cmd: &WorkerCommand,
    task_id: &str,
    job: u32,
    context: &str,
    log_dir: &Option<PathBuf>,
) -> io::Result<Spawned> {
    let expanded = WorkerCommand {
        args: cmd
            .args
            .iter()
            .map(|a| WorkerCommand::expand_job(a, task_id, job))
            .collect(),
        ..cmd.clone()
    };
    let mut command = process_command(&expanded, task_id, job);
    command.env(JOB_CONTEXT_VARIABLE, context);
    if let Some(base) = log_dir {
        let (out, err) = open_logs(base, task_id, &format!("job_{job}"))?;
        command.stdout(Stdio::from(out)).stderr(Stdio::from(err));
    }
    let mut child = command.spawn()?;
    feed_stdin(&mut child, cmd);
    Ok(Spawned {
        pid: child.id(),
        stop: cmd
            .stop
            .iter()
            .map(|a| WorkerCommand::expand_job(a, task_id, job))
            .collect(),
        child,
    })
}

/// What a worker is told in its `DAISY_CONTEXT` ([`WorkerContext::to_json`]).
pub(super) struct WorkerContext<'a> {
    /// Where the server is.
    pub host: &'a str,
    /// Its port.
    pub port: u16,
    /// The task the worker serves.
    pub task_id: &'a str,
    /// Who the worker is.
    pub worker_id: u32,
    /// The run's secret token.
    pub token: &'a str,
    /// The log base directory, if any.
    pub log_dir: &'a Option<PathBuf>,
    /// How long a silent server is waited for (`crate::liveness`).
    pub liveness_timeout: std::time::Duration,
    /// SHA-256 of the payload file the worker loads, if it loads one.
    pub payload_sha256: Option<&'a str>,
}

impl WorkerContext<'_> {
    /// The `DAISY_CONTEXT` JSON, parsed by `daisy.Context`. The log
    /// directory is `logdir`, the key daisy 1.x and 2.0.0 workers read
    /// (volara finds its per-task state through it), and also `log_dir`,
    /// the name earlier versions of this package wrote.
    pub(super) fn to_json(&self) -> String {
        let log_dir = self
            .log_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        serde_json::json!({
            "liveness_timeout": self.liveness_timeout.as_secs_f64(),
            "payload_sha256": self.payload_sha256,
            "hostname": self.host,
            "port": self.port,
            "task_id": self.task_id,
            "worker_id": self.worker_id,
            "token": self.token,
            "logdir": log_dir,
            "log_dir": log_dir,
        })
        .to_string()
    }

    /// The context of job `job`'s node launcher: the worker context's
    /// keys (its `worker_id` is meaningless) and the job's number.
    pub(super) fn to_job_json(&self, job: u32) -> String {
        let mut v: serde_json::Value =
            serde_json::from_str(&self.to_json()).unwrap_or(serde_json::Value::Null);
        if let Some(map) = v.as_object_mut() {
            map.remove("worker_id");
            map.insert("job".into(), job.into());
        }
        v.to_string()
    }
}

/// What a worker's death by SIGKILL that daisy did not send most likely
/// was, for its failure text: the kernel's OOM killer ends a process that
/// way when memory runs out, and the worker's log then says nothing. Names
/// the worker's last measured peak RSS and the memory limit where known
/// (the cgroup's `memory.max`, else the machine's memory).
pub(super) fn sigkill_hint(facts: KillFacts, last_peak_rss: Option<u64>) -> String {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / f64::from(1u32 << 20));
    let limit = crate::memory_budget::MemoryCgroup::of_this_process()
        .and_then(|c| c.limit())
        .map(|(file, b)| format!("its memory limit (cgroup {}) is {}", file.display(), mib(b)))
        .or_else(|| {
            crate::memory_budget::machine_memory("MemTotal:")
                .map(|b| format!("the machine has {}", mib(b)))
        });
    let mut hint = String::from(match facts.oom {
        Some(true) => {
            "; killed by the OOM killer (its cgroup counts the kill: the kernel ended it \
             when memory ran out, and its log says nothing)"
        }
        Some(false) => {
            "; not by the OOM killer (its cgroup counts no kill): something else sent \
             SIGKILL (a batch system enforcing a limit, or a person)"
        }
        None => {
            "; likely killed by the OOM killer (the kernel ends a process with SIGKILL when \
             memory runs out, and its log says nothing)"
        }
    });
    if facts.oom == Some(false) {
        return hint;
    }
    match (facts.held, last_peak_rss) {
        (Some(held), _) => hint.push_str(&format!(
            "; it held at least {} while running its block (sampled each second)",
            mib(held)
        )),
        (None, Some(peak)) => {
            hint.push_str(&format!("; its previous block peaked at {} RSS", mib(peak)));
        }
        (None, None) => {}
    }
    if let Some(limit) = limit {
        hint.push_str(&format!("; {limit}"));
    }
    hint.push_str(
        "; give its workers more memory (fewer workers, or a larger job) or make its blocks \
         smaller",
    );
    hint
}

/// Kill a worker's process group and run its stop command (which cancels
/// its remote part, if any).
pub(super) fn kill(pid: Option<u32>, stop: &[String]) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) with a negative pid signals the process group the
        // worker leads; it has no memory-safety preconditions.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    run_stop_command(stop);
}

/// Run `argv` (the spawner's `wait_all`) and wait for it to exit, at most
/// `limit`, after which it is killed and the run goes on.
pub(super) async fn run_wait_command(argv: &[String], limit: std::time::Duration) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    match child {
        Ok(mut child) => {
            if tokio::time::timeout(limit, child.wait()).await.is_err() {
                tracing::warn!(
                    "the run's remote jobs were still listed after {limit:?}; cancelling them"
                );
                let _ = child.kill().await;
            }
        }
        Err(e) => tracing::warn!("could not run {program}: {e}"),
    }
}

/// Run a stop command (a `scancel`, say) without blocking the run for
/// long: started, and reaped in the background.
pub(super) fn run_stop_command(argv: &[String]) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    match std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => tracing::warn!("could not run {program}: {e}"),
    }
}

/// In a worker, before exec: be killed when the driver dies, however it
/// dies (SIGKILL, SIGTERM without cleanup), so no worker outlives its run.
fn die_with_parent() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid have no memory-safety
    // preconditions; this runs in the child between fork and exec.
    unsafe {
        let parent = libc::getppid();
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            libc::_exit(1); // the driver died before the request took hold
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_context_is_json_a_worker_can_read() {
        let text = WorkerContext {
            host: "127.0.0.1",
            port: 4242,
            task_id: "seg",
            worker_id: 3,
            token: "tok",
            log_dir: &None,
            liveness_timeout: Duration::from_secs(60),
            payload_sha256: Some("ab12"),
        }
        .to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["port"], 4242);
        assert_eq!(v["task_id"], "seg");
        assert_eq!(v["worker_id"], 3);
        assert!(v["log_dir"].is_null() && v["logdir"].is_null());
        assert_eq!(v["liveness_timeout"], 60.0);
        assert_eq!(v["payload_sha256"], "ab12");
        let logs = Some(PathBuf::from("/runs/logs"));
        let text = WorkerContext {
            host: "127.0.0.1",
            port: 4242,
            task_id: "seg",
            worker_id: 3,
            token: "tok",
            log_dir: &logs,
            liveness_timeout: Duration::from_secs(60),
            payload_sha256: Some("ab12"),
        }
        .to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["logdir"], "/runs/logs",
            "the key 1.x and 2.0.0 workers read"
        );
        assert_eq!(v["log_dir"], "/runs/logs");
    }

    #[test]
    fn a_worker_writes_its_output_into_its_log_files() {
        let dir = std::env::temp_dir().join(format!("daisy-supervision-{}", std::process::id()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let cmd = WorkerCommand {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "cat; echo worker {worker_id} of {task_id}".into(),
            ],
            stdin: b"payload ".as_slice().into(),
            ..WorkerCommand::default()
        };
        let log_dir = Some(dir.clone());
        // two runs' worker 5: the second appends to the first's file, each
        // after a header that tells them apart
        for _ in 0..2 {
            let status = local.block_on(&rt, async {
                let output = OutputQueue::unused();
                let launch = Launch {
                    task_id: "seg",
                    worker_id: 5,
                    context: "{}".into(),
                    log_dir: &log_dir,
                    log_mode: LogMode::File,
                    output: &output,
                };
                let mut spawned = spawn(&cmd, &launch).unwrap();
                assert!(spawned.pid.is_some());
                spawned.child.wait().await.unwrap()
            });
            assert!(status.success());
        }
        let out = std::fs::read_to_string(dir.join("seg").join("worker_5.out")).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        for run in [0, 2] {
            assert!(
                lines[run].starts_with("--- daisy: worker_5 of task seg started 20"),
                "{out}"
            );
            assert!(lines[run].ends_with(&format!("(driver pid {}) ---", std::process::id())));
            assert_eq!(lines[run + 1], "payload worker 5 of seg");
        }
        let err = std::fs::read_to_string(dir.join("seg").join("worker_5.err")).unwrap();
        assert_eq!(
            err.lines().count(),
            2,
            "a header per run in the error log too"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
