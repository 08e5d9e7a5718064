//! `daisy-core`: the pure-Rust engine of daisy.
//!
//! Geometry, blocks, task specs, the pipeline DAG, the block dependency
//! graph, the scheduler and the serial runner. Nothing here knows about
//! Python: the `daisy-py` crate converts types and calls in.

pub mod block;
pub mod block_deadline;
pub mod block_grid;
pub mod block_id;
pub mod block_profile;
pub mod client;
pub mod clock;
pub mod dependency_graph;
pub mod error;
pub mod fault;
pub mod forecast;
pub mod geometry;
pub mod gpu_profile;
pub mod hang_up;
pub mod liveness;
pub mod memory_budget;
pub mod pipeline;
pub mod pipeline_coverage;
pub mod private_files;
pub mod process_group;
pub mod protocol;
pub mod run_plan;
pub mod run_report;
pub mod run_stats;
pub mod scheduler;
pub mod serial;
pub mod server;
pub mod task_id;
pub mod task_options;
pub mod task_outputs;
pub mod task_spec;
pub mod task_state;
pub mod tracking_store;
pub mod worker_count;
pub mod worker_timeline;

pub use block::{Block, BlockKey, BlockStatus, TaskIndex};
pub use error::DaisyError;
pub use geometry::{Coord, Roi};
pub use pipeline::Pipeline;
pub use scheduler::{ReleaseOutcome, Scheduler};
pub use task_spec::{Fit, TaskSpec};
pub use task_state::TaskState;
