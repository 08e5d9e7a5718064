//! GPU figures of one block: [`GpuProfiler`], which a worker's
//! [`crate::block_profile::BlockProfiler`] carries when its task asked for
//! them, and [`GpuSource`], the few NVML questions it asks.
//!
//! NVML (`libnvidia-ml.so.1`, or the file `DAISY_NVML_LIBRARY` names) is
//! loaded at run time through `nvml-wrapper`
//! (which uses `libloading`): nothing links against it, so the wheel installs
//! and runs on machines without a GPU or driver, where [`GpuProfiler::open`]
//! fails once with [`NVML_NOT_FOUND`] and every figure stays NaN / 0.
//!
//! What each figure is (RUN_STATS.md repeats it for users):
//!
//! * `gpu_mem_bytes`: the largest GPU memory this process used during the
//!   block, summed over the devices it has a context on: its entry in NVML's
//!   running compute processes, read at the block's start and end and every
//!   [`MEMORY_SAMPLE_PERIOD`] in between by a sampler thread, started at
//!   the first block and asleep between blocks (a thread started per block
//!   cost 160 µs a block; waking the kept one costs about 1 µs). NVML's own per-process accounting keeps a peak
//!   for the process's whole life, which cannot be reset per block, hence
//!   the sampler; a peak shorter than the period between two samples can be
//!   missed (caching allocators, as in PyTorch and CuPy, keep memory, so
//!   their peaks stay visible).
//! * `gpu_util_pct`: the mean SM utilisation of this process over the block,
//!   from NVML's per-process samples (`nvmlDeviceGetProcessUtilization`,
//!   asked for the samples since the block's start), averaged over the
//!   devices this process uses. A device with no sample of this process in
//!   a block of at least [`IDLE_AFTER`] counts as 0 % (NVML lists only
//!   processes that ran kernels); in a shorter block it gives no figure.
//!   Where the driver does not offer per-process samples, the sampler thread
//!   reads the whole device's utilisation instead (which then includes other
//!   processes on that device).
//!
//! Devices watched: those named by `CUDA_VISIBLE_DEVICES` (indices, or
//! `GPU-` UUID prefixes; MIG instances are not watched), or every device
//! when it is unset; of these, only the devices this process has a context
//! on count. NVML names processes by their pid in the host's namespace: in
//! a container with its own pid namespace the process is not found and the
//! figures stay NaN / 0.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The environment variable naming NVML's library where it is not on the
/// loader's path (`libnvidia-ml.so.1` otherwise).
pub const NVML_LIBRARY_VAR: &str = "DAISY_NVML_LIBRARY";

/// What the report says, once, when NVML cannot be loaded.
pub const NVML_NOT_FOUND: &str = "no GPU figures: NVML not found";

/// Time between two memory samples while a block runs: 100 ms keeps a
/// sampler's cost (one NVML call per device, tens of µs) under 0.1 % of a
/// core while catching any allocation that lives a tenth of a second.
pub const MEMORY_SAMPLE_PERIOD: Duration = Duration::from_millis(100);

/// NVML samples a process's utilisation every 1/6 s to 1 s depending on the
/// device: a block at least this long with no sample of this process saw
/// the process idle.
pub const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Why an NVML question had no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceError {
    /// The driver or device does not offer this figure.
    NotSupported,
    /// Anything else (a lost device, a driver error): the figure is missing
    /// for this block.
    Failed(String),
}

/// One per-process utilisation sample of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessSample {
    /// The process.
    pub pid: u32,
    /// When NVML took it, µs since the UNIX epoch.
    pub timestamp_us: u64,
    /// SM utilisation of the process, percent.
    pub sm_util: u32,
}

/// The NVML questions a [`GpuProfiler`] asks, so that recorded answers can
/// stand in for a driver in tests.
pub trait GpuSource: Send + Sync {
    /// How many devices NVML sees.
    fn device_count(&self) -> Result<u32, SourceError>;
    /// A device's UUID (`GPU-…`).
    fn uuid(&self, device: u32) -> Result<String, SourceError>;
    /// `pid`'s used memory on a device, bytes; `None` when the process has
    /// no context there (or NVML cannot say how much it uses).
    fn process_memory(&self, device: u32, pid: u32) -> Result<Option<u64>, SourceError>;
    /// Per-process utilisation samples taken after `since_us`.
    fn process_samples(
        &self,
        device: u32,
        since_us: u64,
    ) -> Result<Vec<ProcessSample>, SourceError>;
    /// The whole device's utilisation now, percent.
    fn device_utilisation(&self, device: u32) -> Result<u32, SourceError>;
}

/// Which devices `CUDA_VISIBLE_DEVICES` names, as NVML indices; `None`
/// when it is unset (every device). Entries are CUDA indices (taken as NVML
/// indices, which agree under `CUDA_DEVICE_ORDER=PCI_BUS_ID`) or UUID
/// prefixes; CUDA stops at the first entry it cannot use, and so does this.
pub fn visible_devices(value: Option<&str>, uuids: &[String]) -> Option<Vec<u32>> {
    let value = value?;
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let found = if let Ok(i) = entry.parse::<u32>() {
            (i < uuids.len() as u32).then_some(i)
        } else if entry.starts_with("GPU-") {
            uuids
                .iter()
                .position(|u| u.starts_with(entry))
                .map(|i| i as u32)
        } else {
            None // MIG-…, a name, or empty: CUDA stops here
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            Some(_) => {}
            None => break,
        }
    }
    Some(out)
}

/// What was seen at a block's start or end, or by the sampler thread in
/// between.
#[derive(Default)]
struct Samples {
    /// Largest summed memory of this process, bytes.
    peak_mem: u64,
    /// Per watched device: whether the process had a context there.
    context: Vec<bool>,
    /// Per watched device: whole-device utilisation samples (only where
    /// per-process samples are not offered).
    device_util: Vec<Vec<u32>>,
    /// Whether the sampler should read the whole devices' utilisation.
    device_util_wanted: bool,
}

impl Samples {
    /// Fold another sample in.
    fn merge(&mut self, other: Samples) {
        self.peak_mem = self.peak_mem.max(other.peak_mem);
        if self.context.len() < other.context.len() {
            self.context.resize(other.context.len(), false);
            self.device_util.resize(other.context.len(), Vec::new());
        }
        for (k, c) in other.context.into_iter().enumerate() {
            self.context[k] |= c;
        }
        for (k, u) in other.device_util.into_iter().enumerate() {
            self.device_util[k].extend(u);
        }
    }
}

/// What the sampler thread and the profiler share.
#[derive(Default)]
struct SamplerState {
    /// Which block is running (0: none); bumped by every `start`.
    block: u64,
    /// What was seen during that block.
    seen: Samples,
    /// The profiler is gone: the thread ends.
    shutdown: bool,
}

/// The sampler's state and the signal that wakes its thread (a block
/// started, or the profiler is gone).
#[derive(Default)]
struct SamplerShared {
    state: Mutex<SamplerState>,
    wake: Condvar,
}

impl SamplerShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SamplerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A thread that samples while a block runs and sleeps otherwise: started
/// at the first block and kept (starting a thread per block cost 160 µs).
struct Sampler {
    shared: Arc<SamplerShared>,
    handle: Option<JoinHandle<()>>,
}

impl Sampler {
    fn start(source: Arc<dyn GpuSource>, pid: u32, devices: Vec<u32>) -> Option<Self> {
        let shared = Arc::new(SamplerShared::default());
        let theirs = shared.clone();
        let handle = std::thread::Builder::new()
            .name("daisy-gpu-sampler".into())
            .spawn(move || sampler_loop(&theirs, &*source, pid, &devices))
            .ok()?;
        Some(Self {
            shared,
            handle: Some(handle),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SamplerState> {
        self.shared.lock()
    }

    /// A block starts: sample for it from now on (`device_util`: also the
    /// whole devices' utilisation).
    fn begin(&self, block: u64, device_util: bool) {
        let mut st = self.lock();
        st.block = block;
        st.seen = Samples {
            device_util_wanted: device_util,
            ..Samples::default()
        };
        self.shared.wake.notify_all();
    }

    /// The block ended: what was seen during it.
    fn end(&self) -> Samples {
        let mut st = self.lock();
        st.block = 0;
        std::mem::take(&mut st.seen)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn sampler_loop(shared: &SamplerShared, source: &dyn GpuSource, pid: u32, devices: &[u32]) {
    let cvar = &shared.wake;
    let mut st = shared.lock();
    loop {
        if st.shutdown {
            return;
        }
        if st.block == 0 {
            st = cvar.wait(st).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        // a block runs: wait one period (or to be told it ended), then
        // sample outside the lock and keep it only for the same block
        let block = st.block;
        let (guard, timeout) = cvar
            .wait_timeout(st, MEMORY_SAMPLE_PERIOD)
            .unwrap_or_else(|p| p.into_inner());
        st = guard;
        if !timeout.timed_out() || st.block != block || st.shutdown {
            continue;
        }
        let want_util = st.seen.device_util_wanted;
        drop(st);
        let mut one = Samples::default();
        sample(source, pid, devices, &mut one, want_util);
        st = shared.lock();
        if st.block == block {
            st.seen.merge(one);
        }
    }
}

/// One block's measurement in progress.
struct Window {
    start_us: u64,
    first: Samples,
}

/// Measures the GPU figures of blocks of this process.
pub struct GpuProfiler {
    source: Arc<dyn GpuSource>,
    pid: u32,
    devices: Vec<u32>,
    /// Whether the driver gives per-process utilisation samples (learnt at
    /// the first block).
    per_process: bool,
    window: Option<Window>,
    /// Started at the first block; None if no thread could be started
    /// (then the start and end samples alone give the peak).
    sampler: Option<Sampler>,
    /// Blocks begun so far (the sampler's block number).
    blocks: u64,
}

/// Microseconds since the UNIX epoch: NVML's sample timestamps.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One memory (and, where needed, device utilisation) sample.
fn sample(
    source: &dyn GpuSource,
    pid: u32,
    devices: &[u32],
    into: &mut Samples,
    device_util: bool,
) {
    if into.context.len() != devices.len() {
        into.context = vec![false; devices.len()];
        into.device_util = vec![Vec::new(); devices.len()];
    }
    let mut total = 0u64;
    for (k, &d) in devices.iter().enumerate() {
        if let Ok(Some(bytes)) = source.process_memory(d, pid) {
            into.context[k] = true;
            total = total.saturating_add(bytes);
        }
        if device_util && let Ok(u) = source.device_utilisation(d) {
            into.device_util[k].push(u);
        }
    }
    into.peak_mem = into.peak_mem.max(total);
}

impl GpuProfiler {
    /// Load NVML and pick the devices to watch, or say why not (the text
    /// the report shows once).
    pub fn open() -> Result<Self, String> {
        let library = std::env::var_os(NVML_LIBRARY_VAR);
        let nvml = match &library {
            Some(path) => nvml_wrapper::Nvml::builder().lib_path(path).init(),
            None => nvml_wrapper::Nvml::init(),
        };
        let nvml = nvml.map_err(|e| match e {
            nvml_wrapper::error::NvmlError::LibloadingError(_) => NVML_NOT_FOUND.to_string(),
            other => format!("no GPU figures: NVML did not start ({other})"),
        })?;
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        Self::with_source(
            Arc::new(NvmlSource(nvml)),
            std::process::id(),
            visible.as_deref(),
        )
    }

    /// A profiler asking `source` about process `pid`, watching the devices
    /// `cuda_visible_devices` names (every device when `None`).
    pub fn with_source(
        source: Arc<dyn GpuSource>,
        pid: u32,
        cuda_visible_devices: Option<&str>,
    ) -> Result<Self, String> {
        let count = source
            .device_count()
            .map_err(|e| format!("no GPU figures: NVML lists no devices ({e:?})"))?;
        let uuids: Vec<String> = (0..count)
            .map(|d| source.uuid(d).unwrap_or_default())
            .collect();
        let devices =
            visible_devices(cuda_visible_devices, &uuids).unwrap_or_else(|| (0..count).collect());
        Ok(Self {
            source,
            pid,
            devices,
            per_process: true,
            window: None,
            sampler: None,
            blocks: 0,
        })
    }

    /// The devices watched, as NVML indices.
    pub fn devices(&self) -> &[u32] {
        &self.devices
    }

    /// Begin a block: the first memory sample, and the sampler's watch.
    pub fn start(&mut self) {
        let mut first = Samples::default();
        sample(
            &*self.source,
            self.pid,
            &self.devices,
            &mut first,
            !self.per_process,
        );
        if self.sampler.is_none() {
            self.sampler = Sampler::start(self.source.clone(), self.pid, self.devices.clone());
        }
        self.blocks += 1;
        if let Some(s) = &self.sampler {
            s.begin(self.blocks, !self.per_process);
        }
        self.window = Some(Window {
            start_us: now_us(),
            first,
        });
    }

    /// Restart the block's time window (the wait for the block is not the
    /// block's): the utilisation counts from here.
    pub fn restart(&mut self) {
        if let Some(w) = self.window.as_mut() {
            w.start_us = now_us();
        }
    }

    /// End the block: `(gpu_util_pct, gpu_mem_bytes)`, NaN / 0 when this
    /// process used no watched device. `None` when not started.
    pub fn stop(&mut self) -> Option<(f32, u64)> {
        let w = self.window.take()?;
        let during = self.sampler.as_ref().map(Sampler::end);
        let mut last = Samples::default();
        sample(
            &*self.source,
            self.pid,
            &self.devices,
            &mut last,
            !self.per_process,
        );
        let end_us = now_us();
        let long_enough = end_us.saturating_sub(w.start_us) >= IDLE_AFTER.as_micros() as u64;
        // the start, the sampler's and the end samples, as one
        let mut seen = w.first;
        if let Some(during) = during {
            seen.merge(during);
        }
        seen.merge(last);
        let mut per_device = Vec::new();
        for (k, &d) in self.devices.iter().enumerate() {
            if !seen.context.get(k).copied().unwrap_or(false) {
                continue;
            }
            let util = if self.per_process {
                match self.source.process_samples(d, w.start_us) {
                    Ok(samples) => {
                        process_mean(&samples, self.pid, w.start_us, end_us, long_enough)
                    }
                    Err(SourceError::NotSupported) => {
                        // learnt now: from the next block on, the sampler
                        // reads the whole device instead
                        self.per_process = false;
                        None
                    }
                    Err(SourceError::Failed(_)) => None,
                }
            } else {
                seen.device_util.get(k).and_then(|u| mean(u))
            };
            per_device.push(util);
        }
        let known: Vec<f64> = per_device.iter().flatten().copied().collect();
        let util = if known.is_empty() {
            f32::NAN
        } else {
            (known.iter().sum::<f64>() / known.len() as f64) as f32
        };
        Some((util, seen.peak_mem))
    }
}

fn mean(values: &[u32]) -> Option<f64> {
    (!values.is_empty())
        .then(|| values.iter().map(|&v| f64::from(v)).sum::<f64>() / values.len() as f64)
}

/// The mean SM utilisation of `pid` over its samples in
/// `(start_us, end_us]`; 0 when it has none in a block long enough that
/// NVML would have sampled it busy; `None` otherwise.
pub fn process_mean(
    samples: &[ProcessSample],
    pid: u32,
    start_us: u64,
    end_us: u64,
    long_enough: bool,
) -> Option<f64> {
    let mine: Vec<u32> = samples
        .iter()
        .filter(|s| s.pid == pid && s.timestamp_us > start_us && s.timestamp_us <= end_us)
        .map(|s| s.sm_util.min(100))
        .collect();
    match mean(&mine) {
        Some(m) => Some(m),
        None if long_enough => Some(0.0),
        None => None,
    }
}

/// The real driver, through `nvml-wrapper`.
struct NvmlSource(nvml_wrapper::Nvml);

fn failed(e: nvml_wrapper::error::NvmlError) -> SourceError {
    match e {
        nvml_wrapper::error::NvmlError::NotSupported
        | nvml_wrapper::error::NvmlError::FailedToLoadSymbol(_) => SourceError::NotSupported,
        other => SourceError::Failed(other.to_string()),
    }
}

impl GpuSource for NvmlSource {
    fn device_count(&self) -> Result<u32, SourceError> {
        self.0.device_count().map_err(failed)
    }

    fn uuid(&self, device: u32) -> Result<String, SourceError> {
        self.0
            .device_by_index(device)
            .and_then(|d| d.uuid())
            .map_err(failed)
    }

    fn process_memory(&self, device: u32, pid: u32) -> Result<Option<u64>, SourceError> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let d = self.0.device_by_index(device).map_err(failed)?;
        let procs = d.running_compute_processes().map_err(failed)?;
        Ok(procs
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            }))
    }

    fn process_samples(
        &self,
        device: u32,
        since_us: u64,
    ) -> Result<Vec<ProcessSample>, SourceError> {
        let d = self.0.device_by_index(device).map_err(failed)?;
        match d.process_utilization_stats(since_us) {
            Ok(v) => Ok(v
                .into_iter()
                .map(|s| ProcessSample {
                    pid: s.pid,
                    timestamp_us: s.timestamp,
                    sm_util: s.sm_util,
                })
                .collect()),
            // no process ran kernels since `since_us`
            Err(nvml_wrapper::error::NvmlError::NotFound) => Ok(Vec::new()),
            Err(e) => Err(failed(e)),
        }
    }

    fn device_utilisation(&self, device: u32) -> Result<u32, SourceError> {
        let d = self.0.device_by_index(device).map_err(failed)?;
        d.utilization_rates().map(|u| u.gpu).map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Recorded NVML answers: per device, this process's memory and the
    /// per-process samples the driver holds.
    #[derive(Default)]
    struct Recorded {
        uuids: Vec<String>,
        memory: Mutex<HashMap<(u32, u32), u64>>,
        samples: Mutex<HashMap<u32, Vec<ProcessSample>>>,
        device_util: HashMap<u32, u32>,
        per_process: bool,
    }

    impl GpuSource for Recorded {
        fn device_count(&self) -> Result<u32, SourceError> {
            Ok(self.uuids.len() as u32)
        }
        fn uuid(&self, device: u32) -> Result<String, SourceError> {
            self.uuids
                .get(device as usize)
                .cloned()
                .ok_or(SourceError::Failed("no such device".into()))
        }
        fn process_memory(&self, device: u32, pid: u32) -> Result<Option<u64>, SourceError> {
            Ok(self.memory.lock().unwrap().get(&(device, pid)).copied())
        }
        fn process_samples(
            &self,
            device: u32,
            since_us: u64,
        ) -> Result<Vec<ProcessSample>, SourceError> {
            if !self.per_process {
                return Err(SourceError::NotSupported);
            }
            let all = self.samples.lock().unwrap();
            Ok(all
                .get(&device)
                .map(|v| {
                    v.iter()
                        .filter(|s| s.timestamp_us > since_us)
                        .copied()
                        .collect()
                })
                .unwrap_or_default())
        }
        fn device_utilisation(&self, device: u32) -> Result<u32, SourceError> {
            self.device_util
                .get(&device)
                .copied()
                .ok_or(SourceError::NotSupported)
        }
    }

    fn two_gpus() -> Recorded {
        Recorded {
            uuids: vec!["GPU-aaaa-1111".into(), "GPU-bbbb-2222".into()],
            per_process: true,
            ..Recorded::default()
        }
    }

    const ME: u32 = 4242;
    const OTHER: u32 = 777;

    fn samples_now(device: u32, list: &[(u32, u32)], source: &Recorded) {
        // samples taken after the block's start and before now
        std::thread::sleep(Duration::from_millis(2));
        let t = now_us() - list.len() as u64;
        let mut all = source.samples.lock().unwrap();
        let v = all.entry(device).or_default();
        for (i, &(pid, util)) in list.iter().enumerate() {
            v.push(ProcessSample {
                pid,
                timestamp_us: t + i as u64,
                sm_util: util,
            });
        }
    }

    #[test]
    fn cuda_visible_devices_names_indices_and_uuid_prefixes() {
        let uuids = vec!["GPU-aaaa-1111".to_string(), "GPU-bbbb-2222".to_string()];
        assert_eq!(visible_devices(None, &uuids), None, "unset: every device");
        assert_eq!(visible_devices(Some("1"), &uuids), Some(vec![1]));
        assert_eq!(visible_devices(Some("1,0"), &uuids), Some(vec![1, 0]));
        assert_eq!(visible_devices(Some("GPU-bbbb"), &uuids), Some(vec![1]));
        assert_eq!(visible_devices(Some(""), &uuids), Some(vec![]), "hidden");
        assert_eq!(visible_devices(Some("-1"), &uuids), Some(vec![]));
        assert_eq!(
            visible_devices(Some("0,7,1"), &uuids),
            Some(vec![0]),
            "stops at 7"
        );
        assert_eq!(visible_devices(Some("MIG-x,1"), &uuids), Some(vec![]));
        assert_eq!(visible_devices(Some("0, 0"), &uuids), Some(vec![0]));
    }

    #[test]
    fn only_this_process_counts_and_its_samples_are_averaged_over_the_block() {
        let source = Arc::new(two_gpus());
        source.memory.lock().unwrap().insert((0, ME), 3 << 30);
        source.memory.lock().unwrap().insert((0, OTHER), 30 << 30);
        let mut p = GpuProfiler::with_source(source.clone(), ME, None).unwrap();
        assert_eq!(p.devices(), &[0, 1]);
        // a sample from before the block must not count
        source.samples.lock().unwrap().insert(
            0,
            vec![ProcessSample {
                pid: ME,
                timestamp_us: now_us() - 5_000_000,
                sm_util: 0,
            }],
        );
        p.start();
        samples_now(0, &[(ME, 80), (OTHER, 5), (ME, 100), (ME, 60)], &source);
        std::thread::sleep(Duration::from_millis(20));
        let (util, mem) = p.stop().unwrap();
        assert_eq!(
            util, 80.0,
            "mean of this process's samples on the one device it uses"
        );
        assert_eq!(mem, 3 << 30, "its own memory, not the other process's");
        assert!(p.stop().is_none(), "stop without start");
    }

    #[test]
    fn the_memory_peak_between_start_and_end_is_caught_by_the_sampler() {
        let source = Arc::new(two_gpus());
        source.memory.lock().unwrap().insert((1, ME), 1 << 20);
        let mut p = GpuProfiler::with_source(source.clone(), ME, None).unwrap();
        p.start();
        source.memory.lock().unwrap().insert((1, ME), 2 << 30);
        std::thread::sleep(MEMORY_SAMPLE_PERIOD * 3);
        source.memory.lock().unwrap().insert((1, ME), 1 << 20);
        let (_, mem) = p.stop().unwrap();
        assert_eq!(mem, 2 << 30, "the peak in the middle of the block");
    }

    #[test]
    fn several_devices_sum_memory_and_average_utilisation() {
        let source = Arc::new(two_gpus());
        source.memory.lock().unwrap().insert((0, ME), 1 << 30);
        source.memory.lock().unwrap().insert((1, ME), 2 << 30);
        let mut p = GpuProfiler::with_source(source.clone(), ME, None).unwrap();
        p.start();
        samples_now(0, &[(ME, 90)], &source);
        samples_now(1, &[(ME, 30), (ME, 50)], &source);
        let (util, mem) = p.stop().unwrap();
        assert_eq!(mem, 3 << 30);
        assert_eq!(util, 65.0, "(90 + 40) / 2");
    }

    #[test]
    fn cuda_visible_devices_limits_the_devices_watched() {
        let source = Arc::new(two_gpus());
        source.memory.lock().unwrap().insert((0, ME), 1 << 30);
        source.memory.lock().unwrap().insert((1, ME), 2 << 30);
        let mut p = GpuProfiler::with_source(source.clone(), ME, Some("GPU-bbbb")).unwrap();
        assert_eq!(p.devices(), &[1]);
        p.start();
        samples_now(0, &[(ME, 90)], &source);
        samples_now(1, &[(ME, 20)], &source);
        assert_eq!(p.stop().unwrap(), (20.0, 2 << 30));
    }

    #[test]
    fn no_context_gives_nan_and_zero_and_an_idle_long_block_gives_zero() {
        let source = Arc::new(two_gpus());
        let mut p = GpuProfiler::with_source(source.clone(), ME, None).unwrap();
        p.start();
        samples_now(0, &[(OTHER, 99)], &source);
        let (util, mem) = p.stop().unwrap();
        assert!(util.is_nan() && mem == 0, "this process used no GPU");
        // a context but no kernel: idle, once the block is long enough for
        // NVML to have sampled it
        assert_eq!(process_mean(&[], ME, 0, 10, true), Some(0.0));
        assert_eq!(process_mean(&[], ME, 0, 10, false), None);
        let s = |t, u| ProcessSample {
            pid: ME,
            timestamp_us: t,
            sm_util: u,
        };
        assert_eq!(
            process_mean(&[s(5, 40), s(11, 100), s(0, 100)], ME, 0, 10, false),
            Some(40.0),
            "only samples inside the block"
        );
        assert_eq!(
            process_mean(&[s(5, 250)], ME, 0, 10, false),
            Some(100.0),
            "capped"
        );
    }

    #[test]
    fn without_per_process_samples_the_sampler_reads_the_device() {
        let mut rec = two_gpus();
        rec.per_process = false;
        rec.device_util.insert(0, 70);
        let source = Arc::new(rec);
        source.memory.lock().unwrap().insert((0, ME), 1 << 30);
        let mut p = GpuProfiler::with_source(source.clone(), ME, None).unwrap();
        p.start();
        let (first, _) = p.stop().unwrap();
        assert!(
            first.is_nan(),
            "the first block learns that samples are missing"
        );
        p.start();
        std::thread::sleep(MEMORY_SAMPLE_PERIOD * 2);
        let (util, mem) = p.stop().unwrap();
        assert_eq!((util, mem), (70.0, 1 << 30));
    }

    #[test]
    fn a_source_without_devices_says_why() {
        struct Broken;
        impl GpuSource for Broken {
            fn device_count(&self) -> Result<u32, SourceError> {
                Err(SourceError::Failed("driver gone".into()))
            }
            fn uuid(&self, _: u32) -> Result<String, SourceError> {
                Err(SourceError::NotSupported)
            }
            fn process_memory(&self, _: u32, _: u32) -> Result<Option<u64>, SourceError> {
                Err(SourceError::NotSupported)
            }
            fn process_samples(&self, _: u32, _: u64) -> Result<Vec<ProcessSample>, SourceError> {
                Err(SourceError::NotSupported)
            }
            fn device_utilisation(&self, _: u32) -> Result<u32, SourceError> {
                Err(SourceError::NotSupported)
            }
        }
        let e = GpuProfiler::with_source(Arc::new(Broken), ME, None)
            .err()
            .unwrap();
        assert!(e.starts_with("no GPU figures"), "{e}");
    }

    #[test]
    fn without_a_driver_open_says_why_once() {
        // on a machine without the NVIDIA driver's device node NVML cannot
        // start; with one, it opens
        let driver = std::path::Path::new("/dev/nvidiactl").exists();
        match GpuProfiler::open() {
            Err(e) => {
                assert!(!driver, "NVML failed with a driver present: {e}");
                assert!(e.starts_with("no GPU figures"), "{e}");
            }
            Ok(_) => assert!(driver, "NVML opened without a driver"),
        }
    }
}
