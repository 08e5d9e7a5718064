//! A task's run options and the rules they follow: [`TaskOptions`], built
//! from what the user gave ([`GivenOptions`]) by one constructor that
//! holds every rule on them, so the Python `Task` (at construction, to fail
//! early) and both runners (when a run starts, since a task's attributes
//! may have changed since) check them the same way.
//!
//! The geometry has its own home ([`crate::task_spec::TaskSpec`]); this is
//! everything else a task asks of a run: how many workers, how many deaths
//! and retries it tolerates, a block timeout, the resources one worker
//! holds and what is measured. The user's values arrive as wide integers
//! (`i128`) so that one out of range is refused with its name instead of
//! wrapping or overflowing in a conversion.
//!
//! Limits: counts are `u32` (what the scheduler and the server count in)
//! and resource amounts `u64`; a timeout is at most
//! [`MAX_TIMEOUT_SECS`], a year, far beyond any real block and far inside
//! what a [`Duration`] or the server's clock arithmetic holds.

use crate::error::DaisyError;
use crate::serial::Measure;
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest block timeout, in seconds (a year).
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// The resource whose request turns GPU figures on by default.
pub const GPU_RESOURCE: &str = "gpu";

/// A task's options as the user gave them (the Python layer has checked
/// their types; this checks their values).
#[derive(Clone, Debug)]
pub struct GivenOptions<'a> {
    /// The task, named in the messages.
    pub task_id: &'a str,
    /// Workers at once.
    pub max_workers: i128,
    /// The name the user gave `max_workers` under (`num_workers` in daisy
    /// 1.x code), which the message names.
    pub max_workers_name: &'a str,
    /// `max_workers="auto"`: the run chooses the count when it starts (see
    /// [`crate::worker_count`]); `max_workers` is then ignored.
    pub auto_workers: bool,
    /// Retries of a failed block.
    pub max_retries: i128,
    /// Unexpected worker deaths tolerated.
    pub max_worker_restarts: i128,
    /// Seconds a block may take; None: no timeout.
    pub timeout: Option<f64>,
    /// Seconds a worker may wait for a block before it is handed back;
    /// None: the run's or the spawner's setting.
    pub idle_timeout: Option<f64>,
    /// Resources one worker holds.
    pub requires: Vec<(String, i128)>,
    /// Whether blocks are measured.
    pub resource_tracking: bool,
    /// Whether with GPU figures; None: when `requires` names a GPU.
    pub gpu_tracking: Option<bool>,
}

/// A task's validated run options.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskOptions {
    /// At most this many workers at once (at least one); with
    /// `auto_workers`, 1 until the run chooses.
    pub max_workers: u32,
    /// `max_workers="auto"`: the run chooses the count from the cores and
    /// its memory budget when it starts (see [`crate::worker_count`]).
    pub auto_workers: bool,
    /// How often a failed block is retried.
    pub max_retries: u32,
    /// Unexpected worker deaths tolerated before the task is abandoned.
    pub max_worker_restarts: u32,
    /// A block out longer than this is reclaimed; None: no timeout.
    pub timeout: Option<Duration>,
    /// A worker that waited this long for a block is handed back (it
    /// leaves; another starts when blocks are ready again); None: the
    /// run's setting, else the spawner's.
    pub idle_timeout: Option<Duration>,
    /// Resources one worker holds.
    pub requires: BTreeMap<String, u64>,
    /// What is measured of each block.
    pub measure: Measure,
}

/// `value` as a count of at least `minimum`, or an error naming `param`.
pub fn count(param: &str, value: i128, minimum: u32) -> Result<u32, DaisyError> {
    bounded(param, value, minimum.into(), u32::MAX.into()).map(|v| v as u32)
}

/// `value` as an amount (`0..=u64::MAX`), or an error naming `param`.
pub fn amount(param: &str, value: i128) -> Result<u64, DaisyError> {
    bounded(param, value, 0, u64::MAX.into()).map(|v| v as u64)
}

fn bounded(param: &str, value: i128, minimum: i128, maximum: i128) -> Result<i128, DaisyError> {
    if value < minimum {
        return Err(DaisyError::invalid(
            param,
            format!("must be at least {minimum}, got {value}"),
        ));
    }
    if value > maximum {
        return Err(DaisyError::invalid(
            param,
            format!("must be at most {maximum}, got {value}"),
        ));
    }
    Ok(value)
}

/// A block timeout of `seconds`: positive, finite and at most
/// [`MAX_TIMEOUT_SECS`].
pub fn timeout(seconds: f64) -> Result<Duration, DaisyError> {
    duration("timeout", seconds)
}

/// An idle timeout of `seconds` (how long a worker may wait for a block
/// before it is handed back), under the same rule as a block timeout.
pub fn idle_timeout(seconds: f64) -> Result<Duration, DaisyError> {
    duration("idle_timeout", seconds)
}

/// `seconds` as a duration of parameter `param`: positive, finite and at
/// most [`MAX_TIMEOUT_SECS`].
fn duration(param: &str, seconds: f64) -> Result<Duration, DaisyError> {
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_TIMEOUT_SECS) {
        return Err(DaisyError::invalid(
            param,
            format!(
                "must be a positive, finite number of seconds up to {MAX_TIMEOUT_SECS:.0} \
                 (a year), or None; got {seconds}"
            ),
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Named amounts (a task's `requires`, a run's `resources`), each checked
/// under `param[name]`.
pub fn amounts(param: &str, given: &[(String, i128)]) -> Result<BTreeMap<String, u64>, DaisyError> {
    given
        .iter()
        .map(|(name, v)| Ok((name.clone(), amount(&format!("{param}[{name:?}]"), *v)?)))
        .collect()
}

impl TaskOptions {
    /// The options of `given`, every rule checked; errors name the
    /// parameter and the fix.
    pub fn new(given: &GivenOptions<'_>) -> Result<Self, DaisyError> {
        let requires = amounts("requires", &given.requires)?;
        if given.gpu_tracking == Some(true) && !given.resource_tracking {
            return Err(DaisyError::invalid(
                "gpu_tracking",
                format!(
                    "task {:?} asks for GPU figures, which are part of each block's \
                     measurements; add resource_tracking=True (and a tracking_path)",
                    given.task_id
                ),
            ));
        }
        let gpu = given
            .gpu_tracking
            .unwrap_or_else(|| requires.contains_key(GPU_RESOURCE));
        Ok(Self {
            max_workers: if given.auto_workers {
                1
            } else {
                count(given.max_workers_name, given.max_workers, 1)?
            },
            auto_workers: given.auto_workers,
            max_retries: count("max_retries", given.max_retries, 0)?,
            max_worker_restarts: count("max_worker_restarts", given.max_worker_restarts, 0)?,
            timeout: given.timeout.map(timeout).transpose()?,
            idle_timeout: given.idle_timeout.map(idle_timeout).transpose()?,
            requires,
            measure: Measure::of(given.resource_tracking, gpu),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given() -> GivenOptions<'static> {
        GivenOptions {
            task_id: "t",
            max_workers: 1,
            max_workers_name: "max_workers",
            auto_workers: false,
            max_retries: 2,
            max_worker_restarts: 10,
            timeout: None,
            idle_timeout: None,
            requires: Vec::new(),
            resource_tracking: false,
            gpu_tracking: None,
        }
    }

    fn refused(g: GivenOptions<'_>) -> String {
        TaskOptions::new(&g).unwrap_err().to_string()
    }

    #[test]
    fn counts_are_refused_below_their_minimum_and_beyond_u32_by_name() {
        assert_eq!(
            refused(GivenOptions {
                max_workers: 0,
                max_workers_name: "num_workers",
                ..given()
            }),
            "num_workers: must be at least 1, got 0"
        );
        assert!(
            refused(GivenOptions {
                max_retries: -1,
                ..given()
            })
            .starts_with("max_retries: must be at least 0")
        );
        assert!(
            refused(GivenOptions {
                max_worker_restarts: 1 << 40,
                ..given()
            })
            .starts_with("max_worker_restarts: must be at most 4294967295")
        );
        let ok = TaskOptions::new(&GivenOptions {
            max_retries: 0,
            max_worker_restarts: u32::MAX.into(),
            ..given()
        })
        .unwrap();
        assert_eq!((ok.max_retries, ok.max_worker_restarts), (0, u32::MAX));
    }

    #[test]
    fn a_timeout_is_positive_finite_and_at_most_a_year() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_TIMEOUT_SECS * 2.0] {
            let e = refused(GivenOptions {
                timeout: Some(bad),
                ..given()
            });
            assert!(e.starts_with("timeout: must be a positive, finite"), "{e}");
        }
        let ok = TaskOptions::new(&GivenOptions {
            timeout: Some(0.5),
            ..given()
        })
        .unwrap();
        assert_eq!(ok.timeout, Some(Duration::from_millis(500)));
    }

    #[test]
    fn an_idle_timeout_follows_the_timeout_rule_under_its_own_name() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_TIMEOUT_SECS * 2.0] {
            let e = refused(GivenOptions {
                idle_timeout: Some(bad),
                ..given()
            });
            assert!(
                e.starts_with("idle_timeout: must be a positive, finite"),
                "{e}"
            );
        }
        let ok = TaskOptions::new(&GivenOptions {
            idle_timeout: Some(30.0),
            ..given()
        })
        .unwrap();
        assert_eq!(ok.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(TaskOptions::new(&given()).unwrap().idle_timeout, None);
    }

    #[test]
    fn resource_amounts_are_named_and_bounded() {
        let e = refused(GivenOptions {
            requires: vec![("gpu".into(), -1)],
            ..given()
        });
        assert_eq!(e, "requires[\"gpu\"]: must be at least 0, got -1");
        let big = i128::from(u64::MAX);
        assert!(
            refused(GivenOptions {
                requires: vec![("mem".into(), big + 1)],
                ..given()
            })
            .contains("must be at most")
        );
        assert_eq!(
            amounts("resources", &[("mem".into(), big)]).unwrap()["mem"],
            u64::MAX
        );
    }

    #[test]
    fn gpu_figures_need_measured_blocks_and_default_to_a_gpu_request() {
        let e = refused(GivenOptions {
            gpu_tracking: Some(true),
            ..given()
        });
        assert!(
            e.starts_with("gpu_tracking: task \"t\" asks for GPU figures"),
            "{e}"
        );
        let measured = |requires: Vec<(String, i128)>, gpu| {
            TaskOptions::new(&GivenOptions {
                requires,
                resource_tracking: true,
                gpu_tracking: gpu,
                ..given()
            })
            .unwrap()
            .measure
        };
        assert_eq!(measured(vec![("gpu".into(), 1)], None), Measure::WithGpu);
        assert_eq!(
            measured(vec![("gpu".into(), 1)], Some(false)),
            Measure::Host
        );
        assert_eq!(measured(Vec::new(), None), Measure::Host);
        assert_eq!(measured(Vec::new(), Some(true)), Measure::WithGpu);
        // a GPU request without measured blocks measures nothing
        let unmeasured = TaskOptions::new(&GivenOptions {
            requires: vec![("gpu".into(), 1)],
            ..given()
        })
        .unwrap();
        assert_eq!(unmeasured.measure, Measure::Off);
    }
}
