//! Worker processes: starting one ([`spawn`]), copying its output
//! ([`tee`]), killing its process group, and running a spawner's stop
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
//! the driver's console.

use super::config::{LogMode, WorkerCommand};
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// Size of the buffer [`tee`] copies a worker's output through: one pipe's
/// worth (64 KiB on Linux), so a burst is copied in one read.
const TEE_BUFFER: usize = 64 * 1024;

/// What a worker process is told and where its output goes.
pub struct Launch<'a> {
    /// The task it serves.
    pub task_id: &'a str,
    /// Its worker id.
    pub worker_id: u32,
    /// The `DAISY_CONTEXT` it gets (see [`context_json`]).
    pub context: String,
    /// Base directory of the worker logs (None: the driver's console).
    pub log_dir: &'a Option<PathBuf>,
    /// Where its output goes when there is a log directory.
    pub log_mode: LogMode,
}

/// A started worker: its pid, its stop command (expanded), and its child
/// handle, whose exit the caller awaits.
pub struct Spawned {
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
pub fn spawn(cmd: &WorkerCommand, launch: &Launch<'_>) -> io::Result<Spawned> {
    let (task_id, id) = (launch.task_id, launch.worker_id);
    let mut command = tokio::process::Command::new(&cmd.program);
    command
        .args(
            cmd.args
                .iter()
                .map(|a| WorkerCommand::expand(a, task_id, id)),
        )
        .envs(cmd.env.iter().cloned())
        .env("DAISY_CONTEXT", &launch.context)
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(die_with_parent);
    }
    let mut files = None;
    if let (Some(base), LogMode::File | LogMode::Both) = (launch.log_dir, launch.log_mode) {
        let dir = base.join(task_id);
        std::fs::create_dir_all(&dir)?;
        // appended, not truncated: a remote job (sbatch -o/-e) may write
        // to the same files as its local handle
        let open = |name: String| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(name))
        };
        let out = open(format!("worker_{id}.out"))?;
        let err = open(format!("worker_{id}.err"))?;
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
            tokio::task::spawn_local(tee(pipe, out, false));
        }
        if let Some(pipe) = child.stderr.take() {
            tokio::task::spawn_local(tee(pipe, err, true));
        }
    }
    if let Some(mut stdin) = child.stdin.take() {
        let payload = cmd.stdin.clone();
        tokio::task::spawn_local(async move {
            // a worker that dies before reading its function is seen by
            // whoever awaits its exit
            let _ = stdin.write_all(&payload).await;
        });
    }
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

/// The `DAISY_CONTEXT` a worker gets: where the server is, who it is, the
/// run token and the log directory (JSON, parsed by `daisy.Context`). The
/// log directory is `logdir`, the key daisy 1.x and 2.0.0 workers read
/// (volara finds its per-task state through it), and also `log_dir`, the
/// name earlier versions of this package wrote.
pub fn context_json(
    host: &str,
    port: u16,
    task_id: &str,
    worker_id: u32,
    token: &str,
    log_dir: &Option<PathBuf>,
) -> String {
    serde_json::json!({
        "hostname": host,
        "port": port,
        "task_id": task_id,
        "worker_id": worker_id,
        "token": token,
        "logdir": log_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
        "log_dir": log_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
    })
    .to_string()
}

/// Copy a worker's output pipe into its log file and the driver's
/// stdout (or stderr).
async fn tee(mut pipe: impl tokio::io::AsyncRead + Unpin, mut file: std::fs::File, stderr: bool) {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; TEE_BUFFER];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let _ = file.write_all(&buf[..n]);
                let _ = if stderr {
                    std::io::stderr().write_all(&buf[..n])
                } else {
                    std::io::stdout().write_all(&buf[..n])
                };
            }
        }
    }
}

/// Kill a worker's process group and run its stop command (which cancels
/// its remote part, if any).
pub fn kill(pid: Option<u32>, stop: &[String]) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) with a negative pid signals the process group the
        // worker leads; it has no memory-safety preconditions.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    run_stop_command(stop);
}

/// Run a stop command (a `scancel`, say) without blocking the run for
/// long: started, and reaped in the background.
pub fn run_stop_command(argv: &[String]) {
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

    #[test]
    fn the_context_is_json_a_worker_can_read() {
        let text = context_json("127.0.0.1", 4242, "seg", 3, "tok", &None);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["port"], 4242);
        assert_eq!(v["task_id"], "seg");
        assert_eq!(v["worker_id"], 3);
        assert!(v["log_dir"].is_null() && v["logdir"].is_null());
        let logs = Some(PathBuf::from("/runs/logs"));
        let text = context_json("127.0.0.1", 4242, "seg", 3, "tok", &logs);
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
            stdin: b"payload ".to_vec(),
            ..WorkerCommand::default()
        };
        let log_dir = Some(dir.clone());
        let status = local.block_on(&rt, async {
            let launch = Launch {
                task_id: "seg",
                worker_id: 5,
                context: "{}".into(),
                log_dir: &log_dir,
                log_mode: LogMode::File,
            };
            let mut spawned = spawn(&cmd, &launch).unwrap();
            assert!(spawned.pid.is_some());
            spawned.child.wait().await.unwrap()
        });
        assert!(status.success());
        let out = std::fs::read_to_string(dir.join("seg").join("worker_5.out")).unwrap();
        assert_eq!(out, "payload worker 5 of seg\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
