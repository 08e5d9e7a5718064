//! The wall clock every record of a run is stamped with: seconds since the
//! UNIX epoch as `f64` (the unit of `runs.jsonl`, the tracking store's
//! `sent_at` / `returned_at` and the report's times), in one place so that
//! they all agree.
//!
//! The stamps are read off the wall clock once, when a run starts
//! ([`anchor`]), and carried forward from there by the monotonic clock:
//! a step of the system clock in the middle of a run (an NTP correction, a
//! clock set by hand: `+3 h` made a 6 s run report a span of 10,806 s,
//! `-2 h` a span of 0) moves no stamp of that run against another, so every
//! span and duration is right, and the stamps stay readable dates for
//! humans. The next run anchors again, so a corrected clock is taken up
//! between runs. Durations inside the core are measured with `Instant`.

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The wall clock at the anchor, and the monotonic clock then.
static ANCHOR: Mutex<Option<(f64, Instant)>> = Mutex::new(None);

/// Seconds since the UNIX epoch on the system clock, now (0 on a clock set
/// before 1970).
fn system_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Read the wall clock afresh: stamps from now on count from it. A run
/// calls it when it starts (two runs of one process at once share the
/// anchor the later one took; they differ only by a clock step between
/// their starts).
pub fn anchor() {
    if let Ok(mut a) = ANCHOR.lock() {
        *a = Some((system_clock(), Instant::now()));
    }
}

/// Seconds since the UNIX epoch, now: the wall clock at the last
/// [`anchor`] (the first call's, if none) plus the monotonic time since.
pub fn wall_clock() -> f64 {
    let Ok(mut a) = ANCHOR.lock() else {
        return system_clock();
    };
    let (wall, at) = *a.get_or_insert_with(|| (system_clock(), Instant::now()));
    wall + at.elapsed().as_secs_f64()
}

/// `secs` (since the UNIX epoch) as a UTC date and time a person reads,
/// `2026-12-02 19:33:37 UTC` (whole seconds; a time before 1970 is the
/// epoch). The civil date from a day count is Howard Hinnant's
/// `civil_from_days` (proleptic Gregorian), which needs no date library.
pub fn utc_datetime(secs: f64) -> String {
    let secs = if secs.is_finite() && secs > 0.0 {
        secs as i64
    } else {
        0
    };
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        day_secs / 3_600,
        day_secs % 3_600 / 60,
        day_secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_datetimes_are_the_calendars() {
        // (checked against Python's datetime.fromtimestamp(s, timezone.utc))
        for (secs, text) in [
            (0.0, "1970-01-01 00:00:00"),
            (951_782_400.0, "2000-02-29 00:00:00"),
            (1_709_164_800.0, "2024-02-29 00:00:00"),
            (1_796_240_017.9, "2026-12-02 19:33:37"),
            (4_102_444_799.0, "2099-12-31 23:59:59"),
            (-5.0, "1970-01-01 00:00:00"),
            (f64::NAN, "1970-01-01 00:00:00"),
        ] {
            assert_eq!(utc_datetime(secs), format!("{text} UTC"));
        }
    }

    #[test]
    fn stamps_follow_the_system_clock_from_the_anchor_on() {
        anchor();
        let a = wall_clock();
        let b = wall_clock();
        assert!(b >= a, "monotonic");
        assert!(
            (a - system_clock()).abs() < 1.0,
            "anchored to the system clock"
        );
    }
}
