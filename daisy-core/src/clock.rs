//! The wall clock every record of a run is stamped with: seconds since the
//! UNIX epoch as `f64` (the unit of `runs.jsonl`, the tracking store's
//! `sent_at` / `returned_at` and the report's times), in one place so that
//! they all agree. Durations are measured with `Instant`, never with this.

/// Seconds since the UNIX epoch, now (0 on a clock set before 1970).
pub fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
