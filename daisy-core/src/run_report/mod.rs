//! The run report: one JSON object per task, built from this run's running
//! aggregates and worker timelines, appended as one line to the task's
//! `runs.jsonl` and handed to Python, which parses the very same JSON into
//! `daisy.RunReport`. The object a run returns and the record it leaves on
//! disk therefore cannot drift apart.
//!
//! `blocks.count` is the scheduler's completion count for this run (skipped
//! blocks included), not a second counter: the aggregates only add timing
//! samples to it. A resumed run that skipped everything reports its skips
//! and no samples.
//!
//! Both runners (the server and the serial loop) account a run through the
//! one [`RunLedger`] here: a completed block, a failed attempt, an abandoned
//! task, and at the end the [`RunOutcome`] with every task's report, its
//! [`Outcome`] decided by one rule and appended to `runs.jsonl` by one
//! function. A runner only says what happened.
//!
//! Split along its seams: [`schema`] (the line's types and their published
//! JSON Schema), [`causes`] (why blocks failed), [`outcome`] (how a run
//! ended, and the history writer) and [`ledger`] (what a run accounts as it
//! goes). Everything is re-exported here, so users name `run_report::X`.

mod causes;
mod history_reader;
mod ledger;
mod outcome;
mod schema;
pub mod warmup;

pub use causes::*;
pub use history_reader::*;
pub use ledger::*;
pub use outcome::*;
pub use schema::*;

#[cfg(test)]
mod tests;
