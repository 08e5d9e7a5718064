//! What one block cost, measured by whoever ran it: [`BlockStats`] and the
//! [`BlockProfiler`] that takes them. RUN_STATS.md explains the figures.
//!
//! Every figure is process-wide, because a worker process runs one block at
//! a time and only process-wide counters see work handed to other threads
//! (zarr's IO threads, thread pools):
//!
//! * wall: a monotonic clock around the block;
//! * CPU: `getrusage(RUSAGE_SELF)` user + system time, all threads;
//! * IO: `rchar` / `wchar` of `/proc/self/io` (bytes through read/write
//!   syscalls, page-cache hits included), read with `pread` on a file
//!   descriptor kept open (2.4 µs instead of 12 µs for open+read+close);
//! * peak RSS: the kernel's high-water mark is reset at block start by
//!   writing `5` to `/proc/self/clear_refs` (Linux >= 4.0; flat in RSS, a
//!   few µs) and read back at the end as `VmHWM` from `/proc/self/status`
//!   (`pread` on a descriptor kept open, about 8 µs, the one line parsed
//!   without allocating). Not from `ru_maxrss`: that one keeps, for good,
//!   the largest RSS the process had before it exec'd, which for a worker
//!   is the forked copy of the driver (a driver holding 400 MB made every
//!   block read 400 MB). Where `/proc/self/status` cannot be read the figure
//!   falls back to `ru_maxrss`;
//! * run-queue wait: the second field of `/proc/self/schedstat` (the
//!   main thread's nanoseconds runnable but waiting for a core, Linux with
//!   schedstats, on by default since 4.x), `pread` on a descriptor kept
//!   open (about 2 µs): what tells a block that waited for a core apart
//!   from one that waited for IO, both "not CPU". The main thread's only:
//!   a Python block function runs there, and summing every thread's would
//!   cost a directory walk per block. NaN where the file is missing;
//! * GPU: only for tasks that ask ([`BlockProfiler::with_gpu`]), by the
//!   [`GpuProfiler`] (NVML, see [`crate::gpu_profile`]); otherwise NaN / 0,
//!   never a fake measurement.
//!
//! A full sample costs two `getrusage`, two `pread` and one `clear_refs`
//! write: about 5 µs. The two files are opened once per process and shared
//! by every profiler in it (a worker's own and each `profile_block`); a
//! forked child opens its own, since `/proc/self` named the parent when they
//! were opened. Unsupported platforms report zeros and never fail.

use crate::gpu_profile::GpuProfiler;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What one block cost.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockStats {
    /// Elapsed seconds in the block.
    pub wall_seconds: f64,
    /// User + system CPU seconds of the whole process during the block.
    pub cpu_seconds: f64,
    /// Peak resident set size of the process while the block ran, bytes.
    pub peak_rss_bytes: u64,
    /// Bytes read through syscalls during the block.
    pub io_read_bytes: u64,
    /// Bytes written through syscalls during the block.
    pub io_write_bytes: u64,
    /// Mean GPU (SM) utilisation of the process over the block, percent;
    /// NaN when not measured (no GPU tracking, no NVML, no GPU used).
    pub gpu_util_pct: f32,
    /// Peak GPU memory the process used during the block, bytes; 0 when
    /// not measured.
    pub gpu_mem_bytes: u64,
    /// Seconds the worker's main thread was runnable but waiting for a
    /// core during the block (`/proc/self/schedstat`); NaN when not
    /// measured.
    pub run_queue_seconds: f64,
}

struct Snapshot {
    wall: Instant,
    cpu: f64,
    io: (u64, u64),
    /// `ru_maxrss` right after the high-water mark was reset, bytes.
    maxrss: u64,
    /// Whether that `ru_maxrss` was no more than the resident size read
    /// just after it: then nothing the process inherited (see
    /// [`BlockProfiler::stop`]) lies above this block's peak.
    clean: bool,
    /// Seconds waited on the run queue so far (None: not readable).
    queued: Option<f64>,
}

/// This process's `/proc/self/io`, `/proc/self/clear_refs` and
/// `/proc/self/status`, opened once.
#[derive(Clone)]
struct ProcFiles {
    /// The process that opened them.
    pid: u32,
    io: Option<Arc<File>>,
    clear_refs: Option<Arc<File>>,
    status: Option<Arc<File>>,
    statm: Option<Arc<File>>,
    schedstat: Option<Arc<File>>,
    /// Bytes per page (`statm` counts pages).
    page_size: u64,
    /// Whether resetting the peak-RSS mark worked when they were opened.
    rss_reset_works: bool,
}

static PROC_FILES: Mutex<Option<ProcFiles>> = Mutex::new(None);

/// The current process's files (opened on first use, and again after a
/// fork).
fn proc_files() -> ProcFiles {
    let pid = std::process::id();
    let mut cache = PROC_FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let files = match cache.as_ref() {
        Some(files) if files.pid == pid => files,
        _ => {
            let clear_refs = std::fs::OpenOptions::new()
                .write(true)
                .open("/proc/self/clear_refs")
                .ok()
                .map(Arc::new);
            let rss_reset_works = clear_refs.as_deref().is_some_and(reset_peak_rss);
            cache.insert(ProcFiles {
                pid,
                io: File::open("/proc/self/io").ok().map(Arc::new),
                status: File::open("/proc/self/status").ok().map(Arc::new),
                statm: File::open("/proc/self/statm").ok().map(Arc::new),
                schedstat: File::open("/proc/self/schedstat").ok().map(Arc::new),
                page_size: page_size(),
                clear_refs,
                rss_reset_works,
            })
        }
    };
    files.clone()
}

fn page_size() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a constant of the system.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 {
            return n as u64;
        }
    }
    4096
}

/// The resident size now, bytes: the second field of `/proc/self/statm`
/// (pages), `pread` on a descriptor kept open (about 1.5 µs, where the
/// whole `/proc/self/status` costs about 10 µs). None where unreadable.
fn read_resident(file: &Option<Arc<File>>, page_size: u64) -> Option<u64> {
    #[cfg(unix)]
    if let Some(f) = file {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 128];
        let n = f.read_at(&mut buf, 0).ok()?;
        let field = buf[..n].split(|&b| b == b' ').nth(1)?;
        if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let pages = field.iter().fold(0u64, |n, &d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
        return Some(pages.saturating_mul(page_size));
    }
    let _ = (file, page_size);
    None
}

/// Where peak-RSS figures come from on this system, as the run report
/// names it: `"high_water_mark"` (the kernel's mark, reset at each block's
/// start: the peak while the block ran) or `"process_peak"` (no reset
/// possible, e.g. macOS or a restricted `/proc`: the process's peak so
/// far). Decided by the driver for its workers, which run the same kernel
/// in every setup daisy starts them in.
pub fn peak_rss_source() -> &'static str {
    if proc_files().rss_reset_works {
        "high_water_mark"
    } else {
        "process_peak"
    }
}

/// Reset the kernel's peak-RSS mark of this process; false where that is
/// not possible.
fn reset_peak_rss(clear_refs: &File) -> bool {
    use std::io::Write;
    let mut file = clear_refs;
    file.write_all(b"5").is_ok()
}

/// Takes [`BlockStats`]: `start` before a block, `stop` after it.
pub struct BlockProfiler {
    io_file: Option<Arc<File>>,
    schedstat_file: Option<Arc<File>>,
    clear_refs: Option<Arc<File>>,
    status_file: Option<Arc<File>>,
    statm_file: Option<Arc<File>>,
    page_size: u64,
    start: Option<Snapshot>,
    /// Whether resetting the peak-RSS mark works on this machine.
    rss_reset_works: bool,
    /// GPU figures, for tasks that asked for them.
    gpu: Option<GpuProfiler>,
}

impl Default for BlockProfiler {
    fn default() -> Self {
        Self::new()
    }
}

fn rusage() -> (f64, u64) {
    #[cfg(unix)]
    {
        // SAFETY: rusage is plain old data, for which all-zero bytes are a
        // valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct we own and pass by pointer.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            // ru_maxrss is KiB on Linux
            return (
                secs(ru.ru_utime) + secs(ru.ru_stime),
                (ru.ru_maxrss.max(0) as u64) * 1024,
            );
        }
    }
    (0.0, 0)
}

/// The unsigned number after `name` in `/proc/self/io` text (0 if absent),
/// parsed from the bytes without allocating: this runs after every block.
fn io_field(text: &[u8], name: &[u8]) -> u64 {
    proc_field(text, name).unwrap_or(0)
}

/// The unsigned number after `name` in `/proc` text, None if the field is
/// absent; parsed from the bytes without allocating.
fn proc_field(text: &[u8], name: &[u8]) -> Option<u64> {
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(name))
        .map(|rest| {
            rest.iter()
                .skip_while(|b| b.is_ascii_whitespace())
                .take_while(|b| b.is_ascii_digit())
                .fold(0u64, |n, &d| {
                    n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                })
        })
}

/// The process's peak RSS since the last reset, bytes: `VmHWM` (in kB) of
/// `/proc/self/status`, read with `pread` into a stack buffer (the field
/// sits in the first kilobyte or so). None where the file or the field is
/// missing.
fn read_hwm(file: &Option<Arc<File>>) -> Option<u64> {
    #[cfg(unix)]
    if let Some(f) = file {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 2048];
        let n = f.read_at(&mut buf, 0).ok()?;
        return proc_field(&buf[..n], b"VmHWM:").map(|kb| kb * 1024);
    }
    let _ = file;
    None
}

/// Seconds the main thread waited on a run queue so far: the second of
/// the three numbers of `/proc/self/schedstat` (nanoseconds). None where
/// the file or the figure is missing.
fn read_run_queue(file: &Option<Arc<File>>) -> Option<f64> {
    #[cfg(unix)]
    if let Some(f) = file {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        return parse_run_queue(&buf[..n]);
    }
    let _ = file;
    None
}

/// The run-queue wait of `/proc/<pid>/schedstat` text, in seconds.
fn parse_run_queue(text: &[u8]) -> Option<f64> {
    let field = text.split(|b| b.is_ascii_whitespace()).nth(1)?;
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ns = field.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Some(ns as f64 * 1e-9)
}

fn read_io(file: &Option<Arc<File>>) -> (u64, u64) {
    #[cfg(unix)]
    if let Some(f) = file {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        if let Ok(n) = f.read_at(&mut buf, 0) {
            let text = &buf[..n];
            return (io_field(text, b"rchar:"), io_field(text, b"wchar:"));
        }
    }
    let _ = file;
    (0, 0)
}

impl BlockProfiler {
    /// A profiler for this process (its `/proc/self/io` and
    /// `/proc/self/clear_refs`, where they exist, are opened once per
    /// process).
    pub fn new() -> Self {
        let ProcFiles {
            io: io_file,
            clear_refs,
            status: status_file,
            statm: statm_file,
            schedstat: schedstat_file,
            page_size,
            rss_reset_works,
            ..
        } = proc_files();
        Self {
            io_file,
            schedstat_file,
            clear_refs,
            status_file,
            statm_file,
            page_size,
            start: None,
            rss_reset_works,
            gpu: None,
        }
    }

    /// Also measure each block's GPU figures with `gpu`.
    pub fn with_gpu(mut self, gpu: GpuProfiler) -> Self {
        self.gpu = Some(gpu);
        self
    }

    /// Whether this profiler measures GPU figures.
    pub fn measures_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// Snapshot the counters before a block.
    pub fn start(&mut self) {
        if self.rss_reset_works {
            self.rss_reset_works = self.clear_refs.as_deref().is_some_and(reset_peak_rss);
        }
        if let Some(g) = self.gpu.as_mut() {
            g.start();
        }
        let (cpu, maxrss) = rusage();
        let clean = self.rss_reset_works
            && read_resident(&self.statm_file, self.page_size).is_some_and(|rss| maxrss <= rss);
        self.start = Some(Snapshot {
            wall: Instant::now(),
            cpu,
            io: read_io(&self.io_file),
            maxrss,
            clean,
            queued: read_run_queue(&self.schedstat_file),
        });
    }

    /// Restart the wall clock of a started measurement (the other counters
    /// keep their start): for a start snapshot taken while waiting for the
    /// block, so the wait does not count as the block's time.
    pub fn restart_wall(&mut self) {
        if let Some(s) = self.start.as_mut() {
            s.wall = Instant::now();
            if let Some(g) = self.gpu.as_mut() {
                g.restart();
            }
        }
    }

    /// True between `start` and `stop`.
    pub fn is_running(&self) -> bool {
        self.start.is_some()
    }

    /// Stop, and attach the figures to a block's `stats` unless it already
    /// carries a measurement: the first measurement attached wins, since a
    /// `profile_block` inside the block function measures the block more
    /// narrowly than the worker (or serial runner) around it. Every runner
    /// settles a block's figures through here.
    pub fn stop_into(&mut self, stats: &mut Option<BlockStats>) {
        let outer = self.stop();
        if stats.is_none() {
            *stats = outer;
        }
    }

    /// The block's figures since `start` (None if not started).
    ///
    /// The peak is the current memory map's high-water mark since the reset
    /// in `start`, `h`. `ru_maxrss` is `max(B, h)`, where `B` is what the
    /// process inherited: the peak of the memory map it had before `exec`
    /// (for a worker, the forked copy of its driver), raised when a thread
    /// exits to the high-water mark of that moment. So `ru_maxrss` is `h`,
    /// exactly, when it rose above its value at the start (`B` was below it
    /// then, and a thread exit during the block cannot lift `B` above `h`),
    /// or when at the start it was no higher than the resident size
    /// (`B` is below `h`). Only otherwise (a worker of a big driver whose
    /// block stayed below the driver's size) is `VmHWM` read from
    /// `/proc/self/status`, the one read that costs 10 µs.
    pub fn stop(&mut self) -> Option<BlockStats> {
        let s = self.start.take()?;
        let wall = s.wall.elapsed().as_secs_f64();
        let (cpu, maxrss) = rusage();
        let (r, w) = read_io(&self.io_file);
        let peak = if self.rss_reset_works && (s.clean || maxrss > s.maxrss) {
            maxrss
        } else {
            read_hwm(&self.status_file).unwrap_or(maxrss)
        };
        let (gpu_util_pct, gpu_mem_bytes) = self
            .gpu
            .as_mut()
            .and_then(GpuProfiler::stop)
            .unwrap_or((f32::NAN, 0));
        Some(BlockStats {
            wall_seconds: wall,
            cpu_seconds: (cpu - s.cpu).max(0.0),
            peak_rss_bytes: peak,
            io_read_bytes: r.saturating_sub(s.io.0),
            io_write_bytes: w.saturating_sub(s.io.1),
            gpu_util_pct,
            gpu_mem_bytes,
            run_queue_seconds: match (s.queued, read_run_queue(&self.schedstat_file)) {
                (Some(before), Some(after)) => (after - before).max(0.0),
                _ => f64::NAN,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_high_water_mark_is_read_from_status_text() {
        let text = b"Name:\tpython\nVmPeak:\t 900000 kB\nVmSize:\t 800000 kB\nVmHWM:\t   61440 kB\nVmRSS:\t 50000 kB\n";
        assert_eq!(proc_field(text, b"VmHWM:"), Some(61440));
        assert_eq!(proc_field(text, b"VmSwap:"), None, "absent, not zero");
        let here = File::open("/proc/self/status").ok().map(Arc::new);
        if here.is_some() {
            let hwm = read_hwm(&here).unwrap();
            assert!(
                hwm > 1 << 20,
                "this test process has a peak above 1 MiB: {hwm}"
            );
        }
    }

    #[test]
    fn the_run_queue_wait_is_the_second_schedstat_figure() {
        assert_eq!(
            parse_run_queue(b"91234567 170000000 42\n"),
            Some(0.17),
            "nanoseconds to seconds"
        );
        assert_eq!(parse_run_queue(b"91234567\n"), None, "too short");
        assert_eq!(parse_run_queue(b"1 x 2\n"), None, "not a number");
        let here = File::open("/proc/self/schedstat").ok().map(Arc::new);
        if here.is_some() {
            assert!(read_run_queue(&here).is_some_and(|s| s >= 0.0));
        }
    }

    #[test]
    fn io_fields_parse_from_proc_text() {
        let text = b"rchar: 1234\nwchar: 56\nsyscr: 7\nread_bytes: 0\n";
        assert_eq!(io_field(text, b"rchar:"), 1234);
        assert_eq!(io_field(text, b"wchar:"), 56);
        assert_eq!(io_field(text, b"cancelled_write_bytes:"), 0, "absent field");
        assert_eq!(io_field(b"rchar: x\n", b"rchar:"), 0, "not a number");
        assert_eq!(
            io_field(b"rchar: 99999999999999999999999\n", b"rchar:"),
            u64::MAX
        );
    }

    #[test]
    fn profilers_of_a_process_share_its_files() {
        let (a, b) = (BlockProfiler::new(), BlockProfiler::new());
        if cfg!(target_os = "linux") {
            let same = |x: &Option<Arc<File>>, y: &Option<Arc<File>>| match (x, y) {
                (Some(x), Some(y)) => Arc::ptr_eq(x, y),
                (None, None) => true,
                _ => false,
            };
            assert!(a.io_file.is_some());
            assert!(same(&a.io_file, &b.io_file) && same(&a.clear_refs, &b.clear_refs));
        }
    }

    #[test]
    fn measures_wall_cpu_and_io() {
        let mut p = BlockProfiler::new();
        p.start();
        assert!(p.is_running());
        // burn some CPU and write some bytes
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        let path = std::env::temp_dir().join(format!("daisy-profile-{}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![x as u8; 100_000]).unwrap();
        drop(f);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let s = p.stop().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(s.wall_seconds >= 0.02, "{s:?}");
        assert!(s.cpu_seconds > 0.0, "{s:?}");
        assert!(s.gpu_util_pct.is_nan() && s.gpu_mem_bytes == 0);
        if cfg!(target_os = "linux") {
            assert!(s.io_write_bytes >= 100_000, "{s:?}");
            assert!(s.peak_rss_bytes > 0, "{s:?}");
        }
        assert!(p.stop().is_none(), "stop without start gives nothing");
    }

    #[test]
    fn peak_rss_follows_the_block_after_a_reset() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let mut p = BlockProfiler::new();
        if !p.rss_reset_works {
            return; // restricted /proc: the fallback is the process peak
        }
        // a block that touches 64 MiB, then a block that touches nothing
        p.start();
        let big = vec![1u8; 64 << 20];
        assert_eq!(big.iter().map(|&b| b as u64).sum::<u64>(), 64 << 20);
        let heavy = p.stop().unwrap();
        drop(big);
        p.start();
        let light = p.stop().unwrap();
        // the heavy block's peak includes its 64 MiB; the light block's
        // peak was reset, so it does not carry the heavy one's
        assert!(
            heavy.peak_rss_bytes >= 64 << 20,
            "heavy {}",
            heavy.peak_rss_bytes
        );
        assert!(
            light.peak_rss_bytes < heavy.peak_rss_bytes,
            "heavy {} light {}",
            heavy.peak_rss_bytes,
            light.peak_rss_bytes
        );
    }

    #[test]
    fn the_resident_size_is_parsed_from_statm() {
        let here = File::open("/proc/self/statm").ok().map(Arc::new);
        if here.is_none() {
            return;
        }
        let rss = read_resident(&here, page_size()).unwrap();
        assert!(rss > 1 << 20, "resident {rss}");
        assert_eq!(read_resident(&None, 4096), None);
    }

    #[test]
    fn the_cheap_peak_is_the_high_water_mark() {
        // whichever path `stop` takes, its peak is VmHWM read right after
        if !cfg!(target_os = "linux") {
            return;
        }
        let mut p = BlockProfiler::new();
        if !p.rss_reset_works {
            return;
        }
        for mib in [0usize, 8, 40, 1, 0] {
            p.start();
            let v = vec![1u8; mib << 20];
            assert_eq!(v.len(), mib << 20);
            let s = p.stop().unwrap();
            let hwm = read_hwm(&p.status_file).unwrap();
            drop(v);
            let slack = 1 << 20;
            assert!(
                s.peak_rss_bytes <= hwm && hwm - s.peak_rss_bytes <= slack,
                "{mib} MiB block: profiler {} VmHWM {hwm}",
                s.peak_rss_bytes
            );
        }
    }
}
