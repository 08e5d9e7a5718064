//! The memory a run's local workers may use, found without being told, and
//! what they use now: the budget the memory gate lets blocks in by and the
//! memory guard watches (see `server::memory_gate`).
//!
//! Where the budget comes from, first found wins:
//!
//! 1. a declared budget (`memory_budget=` of a run);
//! 2. the limit of this process's memory cgroup (v2 `memory.max`, v1
//!    `memory.limit_in_bytes`): what a SLURM job with `--mem` gets where
//!    SLURM enforces memory, a container's limit, a `systemd-run -p
//!    MemoryMax=`. Local workers are this process's children, in its
//!    cgroup, so the kernel's OOM killer judges them all against it;
//! 3. a SLURM job's allocation from its environment: `SLURM_MEM_PER_NODE`
//!    (MiB), else `SLURM_MEM_PER_CPU` (MiB) times `SLURM_CPUS_ON_NODE`
//!    (where SLURM does not enforce memory this is the promise the job
//!    made, which other jobs on the node count on);
//! 4. the machine's available memory when the run begins (`MemAvailable`).
//!
//! What is in use is read from the same place: the cgroup's working set
//! (its usage less the inactive file cache, which the kernel reclaims
//! before it kills anyone: `memory.current` / `memory.usage_in_bytes` less
//! `inactive_file` / `total_inactive_file` of `memory.stat`), else the
//! machine's (`MemTotal - MemAvailable`) less what was in use when the run
//! began, plus this process's own resident memory, for a budget from SLURM
//! or the machine.
//!
//! [`MIN_BUDGET`] is 128 MiB: one Python worker with numpy imported holds
//! about 60 MiB before its first block; a budget below two of them cannot
//! run a block beside the driver, and is a typo of units more often than a
//! real limit.

use crate::error::DaisyError;
use std::path::PathBuf;

/// The least budget a run accepts.
pub const MIN_BUDGET: u64 = 128 << 20;

/// Where a run's memory budget came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// Declared by the run (`memory_budget=`).
    Declared,
    /// This process's memory cgroup limit: the file it was read from.
    Cgroup(PathBuf),
    /// `SLURM_MEM_PER_NODE`.
    SlurmPerNode,
    /// `SLURM_MEM_PER_CPU` times this many CPUs (`SLURM_CPUS_ON_NODE`).
    SlurmPerCpu(u64),
    /// The machine's available memory when the run began.
    MachineAvailable,
}

impl std::fmt::Display for BudgetSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Declared => write!(f, "memory_budget"),
            Self::Cgroup(file) => write!(f, "the memory cgroup limit ({})", file.display()),
            Self::SlurmPerNode => write!(f, "the SLURM job's SLURM_MEM_PER_NODE"),
            Self::SlurmPerCpu(cpus) => {
                write!(f, "the SLURM job's SLURM_MEM_PER_CPU x {cpus} CPUs")
            }
            Self::MachineAvailable => write!(f, "the machine's available memory"),
        }
    }
}

/// The memory a run's local workers may use, and where that came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    /// Bytes.
    pub bytes: u64,
    /// Where it came from.
    pub source: BudgetSource,
}

impl MemoryBudget {
    /// The budget of a run on this machine: `declared` if given, else the
    /// first of the cgroup limit, a SLURM job's allocation and the
    /// machine's available memory (see the module's doc). An error names
    /// the figure and its source: a budget under [`MIN_BUDGET`], a SLURM
    /// variable that is not a number of MiB.
    pub fn find(declared: Option<u64>) -> Result<Self, DaisyError> {
        let env = |name: &str| std::env::var(name).ok();
        Self::find_with(
            declared,
            MemoryCgroup::of_this_process().and_then(|c| c.limit()),
            env,
            machine_memory("MemAvailable:"),
        )
    }

    /// [`Self::find`] from given facts (testable without a cgroup or a
    /// SLURM job).
    pub fn find_with(
        declared: Option<u64>,
        cgroup: Option<(PathBuf, u64)>,
        env: impl Fn(&str) -> Option<String>,
        available: Option<u64>,
    ) -> Result<Self, DaisyError> {
        let budget = if let Some(bytes) = declared {
            Self {
                bytes,
                source: BudgetSource::Declared,
            }
        } else if let Some((file, bytes)) = cgroup {
            Self {
                bytes,
                source: BudgetSource::Cgroup(file),
            }
        } else if let Some(per_node) = env("SLURM_MEM_PER_NODE") {
            Self {
                bytes: slurm_mib("SLURM_MEM_PER_NODE", &per_node)?,
                source: BudgetSource::SlurmPerNode,
            }
        } else if let Some(per_cpu) = env("SLURM_MEM_PER_CPU") {
            let cpus = env("SLURM_CPUS_ON_NODE")
                .and_then(|c| c.trim().parse::<u64>().ok())
                .unwrap_or(1)
                .max(1);
            Self {
                bytes: slurm_mib("SLURM_MEM_PER_CPU", &per_cpu)?.saturating_mul(cpus),
                source: BudgetSource::SlurmPerCpu(cpus),
            }
        } else {
            Self {
                bytes: available.unwrap_or(u64::MAX),
                source: BudgetSource::MachineAvailable,
            }
        };
        if budget.bytes < MIN_BUDGET {
            return Err(DaisyError::invalid(
                "memory_budget",
                format!(
                    "{} from {} is less than one Python worker beside the driver needs \
                     ({}); give the budget in bytes (e.g. 3 * 2**30 for 3 GiB), or run where \
                     more memory is allowed",
                    mib(budget.bytes),
                    budget.source,
                    mib(MIN_BUDGET)
                ),
            ));
        }
        Ok(budget)
    }

    /// The run header's words: "3.0 GiB (the memory cgroup limit (...))".
    pub fn describe(&self) -> String {
        format!("{} ({})", mib(self.bytes), self.source)
    }
}

/// A SLURM memory variable: a whole number of MiB (SLURM writes plain
/// MiB; a unit suffix is accepted as `sbatch --mem` takes it).
fn slurm_mib(name: &str, text: &str) -> Result<u64, DaisyError> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" => 20,
        "K" | "KB" => 10,
        "G" | "GB" => 30,
        "T" | "TB" => 40,
        _ => 64,
    };
    match digits.parse::<u64>() {
        Ok(n) if shift < 64 => Ok(n.saturating_mul(1 << shift)),
        _ => Err(DaisyError::invalid(
            "memory_budget",
            format!(
                "{name}={text:?} is not a number of MiB (SLURM writes one, e.g. 3072); unset it \
                 or give memory_budget= in bytes"
            ),
        )),
    }
}

/// A size in MiB or GiB, for messages.
pub fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{bytes} bytes")
    } else if bytes >= 10 << 30 {
        format!("{:.0} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// A `/proc/meminfo` figure (`MemTotal:`, `MemAvailable:`) in bytes.
pub fn machine_memory(key: &str) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_value(&info, key)
}

fn meminfo_value(info: &str, key: &str) -> Option<u64> {
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The cgroup version a memory cgroup's files follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The unified hierarchy (`memory.max`, `memory.current`).
    V2,
    /// The memory controller's own hierarchy (`memory.limit_in_bytes`).
    V1,
}

/// This process's memory cgroup: its directory and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryCgroup {
    /// Its directory.
    pub dir: PathBuf,
    /// Its version.
    pub version: CgroupVersion,
}

impl MemoryCgroup {
    /// This process's memory cgroup, where one is found. Inside a
    /// container the path `/proc/self/cgroup` names starts above the
    /// mounted hierarchy, so its leading parts are dropped until the
    /// directory holds the version's files.
    pub fn of_this_process() -> Option<Self> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        Self::find(&cgroup, |dir, file| dir.join(file).exists())
    }

    /// [`Self::of_this_process`] from a `/proc/self/cgroup` text and a test
    /// of which files exist.
    pub fn find(cgroup: &str, exists: impl Fn(&std::path::Path, &str) -> bool) -> Option<Self> {
        let mut places = Vec::new();
        for line in cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if controllers.is_empty() {
                places.push(("/sys/fs/cgroup", CgroupVersion::V2, path));
            } else if controllers.split(',').any(|c| c == "memory") {
                places.push(("/sys/fs/cgroup/memory", CgroupVersion::V1, path));
            }
        }
        // v1's controller first: where both are mounted (a hybrid host) the
        // memory controller lives in v1's hierarchy
        places.sort_by_key(|(_, v, _)| *v == CgroupVersion::V2);
        for (root, version, path) in places {
            let probe = match version {
                CgroupVersion::V2 => "memory.current",
                CgroupVersion::V1 => "memory.usage_in_bytes",
            };
            let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
            for skip in 0..=parts.len() {
                let dir = PathBuf::from(root).join(parts[skip..].join("/"));
                if exists(&dir, probe) {
                    return Some(Self { dir, version });
                }
            }
        }
        None
    }

    /// The text of one of its files named per version.
    pub fn read(&self, v2: &str, v1: &str) -> Option<String> {
        let file = match self.version {
            CgroupVersion::V2 => v2,
            CgroupVersion::V1 => v1,
        };
        std::fs::read_to_string(self.dir.join(file)).ok()
    }

    /// Its memory limit and the file it was read from, where it has one
    /// below the machine's memory (v2's "max" and v1's huge "no limit" are
    /// none).
    pub fn limit(&self) -> Option<(PathBuf, u64)> {
        let file = match self.version {
            CgroupVersion::V2 => "memory.max",
            CgroupVersion::V1 => "memory.limit_in_bytes",
        };
        let limit = std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()?;
        (limit < machine_memory("MemTotal:").unwrap_or(u64::MAX))
            .then(|| (self.dir.join(file), limit))
    }

    /// Its working set in bytes: its usage less the inactive file cache
    /// (what the kernel reclaims before it kills).
    pub fn working_set(&self) -> Option<u64> {
        let usage: u64 = self
            .read("memory.current", "memory.usage_in_bytes")?
            .trim()
            .parse()
            .ok()?;
        let stat = self.read("memory.stat", "memory.stat").unwrap_or_default();
        let key = match self.version {
            CgroupVersion::V2 => "inactive_file ",
            CgroupVersion::V1 => "total_inactive_file ",
        };
        let inactive = stat
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        Some(usage.saturating_sub(inactive))
    }

    /// How many of its processes the kernel's OOM killer has killed
    /// (`oom_kill N` of v2 `memory.events`, v1 `memory.oom_control`).
    pub fn oom_kills(&self) -> Option<u64> {
        parse_oom_kill(&self.read("memory.events", "memory.oom_control")?)
    }
}

/// The `oom_kill N` line of a `memory.events` or `memory.oom_control`.
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_budget_comes_from_the_first_source_that_has_one() {
        let cg = Some((
            PathBuf::from("/sys/fs/cgroup/memory/job/memory.limit_in_bytes"),
            3 << 30,
        ));
        let slurm = env(&[("SLURM_MEM_PER_NODE", "2048")]);
        let declared = MemoryBudget::find_with(Some(1 << 30), cg.clone(), &slurm, Some(9 << 30));
        assert_eq!(declared.unwrap().source, BudgetSource::Declared);
        let from_cgroup = MemoryBudget::find_with(None, cg, &slurm, Some(9 << 30)).unwrap();
        assert_eq!(from_cgroup.bytes, 3 << 30);
        assert!(
            from_cgroup.describe().contains("memory.limit_in_bytes"),
            "{}",
            from_cgroup.describe()
        );
        let per_node = MemoryBudget::find_with(None, None, &slurm, Some(9 << 30)).unwrap();
        assert_eq!(
            (per_node.bytes, per_node.source),
            (2 << 30, BudgetSource::SlurmPerNode)
        );
        let per_cpu = env(&[("SLURM_MEM_PER_CPU", "1000"), ("SLURM_CPUS_ON_NODE", "4")]);
        let b = MemoryBudget::find_with(None, None, per_cpu, None).unwrap();
        assert_eq!(
            (b.bytes, b.source),
            (4000 << 20, BudgetSource::SlurmPerCpu(4))
        );
        let machine = MemoryBudget::find_with(None, None, env(&[]), Some(9 << 30)).unwrap();
        assert_eq!(
            (machine.bytes, machine.source),
            (9 << 30, BudgetSource::MachineAvailable)
        );
    }

    #[test]
    fn a_budget_in_the_wrong_units_or_too_small_is_refused_with_its_figure_and_source() {
        let e = MemoryBudget::find_with(Some(3000), None, env(&[]), None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("memory_budget") && text.contains("3000 bytes"),
            "{text}"
        );
        assert!(text.contains("in bytes"), "{text}");
        let e = MemoryBudget::find_with(None, None, env(&[("SLURM_MEM_PER_NODE", "lots")]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("SLURM_MEM_PER_NODE=\"lots\""), "{e}");
        let e = MemoryBudget::find_with(None, None, env(&[("SLURM_MEM_PER_NODE", "64")]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("64 MiB") && e.contains("SLURM_MEM_PER_NODE"),
            "{e}"
        );
        let g = MemoryBudget::find_with(None, None, env(&[("SLURM_MEM_PER_NODE", "3G")]), None);
        assert_eq!(g.unwrap().bytes, 3 << 30);
    }

    #[test]
    fn the_memory_cgroup_is_found_in_either_version_under_a_container_root() {
        let v1 = "4:memory:/slurm/uid_0/job_7/step_0\n0::/\n";
        let found = MemoryCgroup::find(v1, |dir, file| {
            dir == std::path::Path::new("/sys/fs/cgroup/memory/job_7/step_0")
                && file == "memory.usage_in_bytes"
        })
        .unwrap();
        assert_eq!(found.version, CgroupVersion::V1);
        let v2 = "0::/system.slice/job.scope\n";
        let found = MemoryCgroup::find(v2, |dir, file| {
            dir == std::path::Path::new("/sys/fs/cgroup/system.slice/job.scope")
                && file == "memory.current"
        })
        .unwrap();
        assert_eq!(found.version, CgroupVersion::V2);
        assert_eq!(MemoryCgroup::find("0::/\n", |_, _| false), None);
    }

    #[test]
    fn the_oom_kill_count_is_read_from_either_cgroup_version() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(v2), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n";
        assert_eq!(parse_oom_kill(v1), Some(7));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), None);
        assert_eq!(
            meminfo_value("MemAvailable:   1024 kB\n", "MemAvailable:"),
            Some(1 << 20)
        );
    }
}
