//! Cron schedules: the five-field expressions cron triggers run on, the
//! IANA time-zone names they are read in, and when a schedule fires.
//!
//! The grammar and meaning follow Vixie cron and Kubernetes CronJobs:
//!
//! - Five fields (minute, hour, day of month, month, day of week), each a
//!   comma-separated list of `*`, `n` or `n-m`, any of them with a `/step`;
//!   `n/step` means `n-max/step`. Months and days of the week may be named
//!   (`JAN`, `MON-FRI`); 0 and 7 are both Sunday. Or a shorthand: `@hourly`
//!   is `0 * * * *`, `@daily` and `@midnight` are `0 0 * * *`, `@weekly` is
//!   `0 0 * * 0`, `@monthly` is `0 0 1 * *`, `@yearly` and `@annually` are
//!   `0 0 1 1 *`.
//! - Days: when both the day of month and the day of week are restricted
//!   (neither field starts with `*`), a day matches if *either* matches
//!   (`0 0 13 * FRI` fires on every 13th and every Friday). Otherwise a day
//!   must match both (`0 0 */2 * FRI`: odd days that are Fridays).
//! - Ticks are whole minutes. A schedule that can never fire (`0 0 30 2 *`)
//!   is refused, and so is one whose days come more than eight years apart
//!   (`0 0 29 2 */7`, February 29 on a Sunday): every schedule accepted
//!   has a day to fire on in any eight years.
//!
//! Time zones: the fields are wall-clock time in the schedule's zone
//! (`Europe/Berlin`, `America/New_York`; UTC when none is given), read with
//! the IANA database compiled in (chrono-tz). Around daylight-saving
//! changes:
//!
//! - a local time that does not exist (the hour skipped when clocks spring
//!   forward) does not fire: `30 2 * * *` in Berlin skips the last Sunday
//!   of March;
//! - a local time that occurs twice (the hour repeated when clocks fall
//!   back) fires once, at its first occurrence: `30 2 * * *` in Berlin
//!   fires at 02:30 summer time (00:30 UTC) on the last Sunday of October,
//!   not again an hour later; `*/30 * * * *` fires at 02:00 and 02:30
//!   summer time, then next at 03:00 winter time.
//!
//! So every tick is one instant, and ticks are strictly increasing in both
//! local and UTC time: the scheduler can name a tick by its UTC instant.

use std::cmp::max;

use chrono::{
    DateTime, Datelike, Duration, Months, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use crate::DomainError;

/// Longest schedule accepted, in bytes.
pub const MAX_SCHEDULE_LEN: usize = 128;
/// Longest time-zone name accepted, in bytes.
pub const MAX_TIMEZONE_LEN: usize = 64;

/// How far `next_after` and `latest_at_or_before` search: eight years and a
/// month, a little more than the longest gap between ticks that
/// `check_schedule` lets through (2,922 days).
const HORIZON: Months = Months::new(8 * 12 + 1);
/// The longest gap between two firing days accepted, in days (eight years
/// with two leap days: `0 0 29 2 *` waits from 2096 to 2104).
const MAX_GAP_DAYS: i64 = 8 * 365 + 2;
/// Days in the Gregorian calendar's 400-year cycle, after which weekdays
/// fall on the same dates again.
const CYCLE_DAYS: i64 = 146_097;

/// One of the five fields: its name, its range, and the names its values
/// may have (the first name stands for `min`).
struct Field {
    what: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        what: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        what: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        what: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        what: "month",
        min: 1,
        max: 12,
        names: &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    },
    Field {
        what: "day of week",
        min: 0,
        // 7 is Sunday too, as in most crons.
        max: 7,
        names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    },
];

/// The shorthands Kubernetes CronJobs accept besides five fields, and what
/// they stand for.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Every day of the week, Sunday (bit 0) to Saturday (bit 6).
const ALL_WEEKDAYS: u8 = 0x7f;
/// Every day of a month, bits 1 to 31.
const ALL_DAYS: u32 = !1;

/// A cron schedule read in an IANA time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    /// Bit n: minute n (0-59).
    minutes: u64,
    /// Bit n: hour n (0-23).
    hours: u32,
    /// Bit n: day of month n (1-31).
    days: u32,
    /// Bit n: month n (1-12).
    months: u16,
    /// Bit n: n days from Sunday (0-6; a 7 in the schedule is bit 0).
    weekdays: u8,
    /// The day-of-month field starts with `*`.
    days_star: bool,
    /// The day-of-week field starts with `*`.
    weekdays_star: bool,
    tz: Tz,
}

/// Checks a cron schedule: five fields separated by spaces (minute, hour,
/// day of month, month, day of week), each a comma-separated list of `*`,
/// `n` or `n-m`, any of them with a `/step`; months and days of the week
/// may be named (`JAN`, `MON-FRI`). Or one of the shorthands `@hourly`,
/// `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`.
/// A schedule that never fires, or fires years apart, is refused too
/// (see the module documentation).
pub fn check_schedule(field: &'static str, schedule: &str) -> Result<(), DomainError> {
    parse_schedule(field, schedule).map(|_| ())
}

/// Checks an IANA time-zone name: `UTC`, `Europe/Berlin`,
/// `America/Argentina/Buenos_Aires`, `Etc/GMT+5`. First its shape (one to
/// three components separated by `/`, each starting with a letter and made
/// of ASCII letters, digits, `_`, `-`, `+` and `.`, at most 64 characters
/// in all), then that the time-zone database has it (names are
/// case-sensitive, as in the database).
pub fn check_timezone(field: &'static str, tz: &str) -> Result<(), DomainError> {
    parse_timezone(field, tz).map(|_| ())
}

impl Cron {
    /// Parses a schedule (the grammar of [`check_schedule`]) and a time-zone
    /// name (as [`check_timezone`]). Errors are [`DomainError::Invalid`]
    /// with field `schedule` or `timezone`.
    pub fn parse(schedule: &str, timezone: &str) -> Result<Cron, DomainError> {
        let cron = parse_schedule("schedule", schedule)?;
        let tz = parse_timezone("timezone", timezone)?;
        Ok(Cron { tz, ..cron })
    }

    /// The time zone the schedule is read in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The latest time at or before `t` at which it fires; `None` if it did
    /// not fire within the eight years (and a month) before `t`.
    pub fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // A tick at or before t has a wall-clock time at most t's read with
        // the larger of the offsets at t and 28 hours before (zones change
        // offset at most once in that span): while t is in the hour a
        // fall-back repeats, ticks of its first pass have wall-clock times
        // later than t's. Candidates that are after t are skipped below.
        let day_before = t.checked_sub_signed(Duration::hours(28))?;
        let offset = max(self.offset_at(t), self.offset_at(day_before));
        let mut from = floor_minute(t.naive_utc().checked_add_signed(offset)?);
        let until = from.date().checked_sub_months(HORIZON)?;
        loop {
            let local = self.prev_local(from, until)?;
            match self.first_instant(local) {
                Some(at) if at <= t => return Some(at),
                _ => from = local.checked_sub_signed(Duration::minutes(1))?,
            }
        }
    }

    /// The first time strictly after `t` at which it fires; `None` if it
    /// does not fire within the eight years (and a month) after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Every tick at or before t's wall-clock time is at or before t,
        // since ticks increase in both times; ticks after it may still be
        // before t while t is in the hour repeated by a fall-back.
        let local = t.naive_utc().checked_add_signed(self.offset_at(t))?;
        let mut from = floor_minute(local).checked_add_signed(Duration::minutes(1))?;
        let until = from.date().checked_add_months(HORIZON)?;
        loop {
            let local = self.next_local(from, until)?;
            match self.first_instant(local) {
                Some(at) if at > t => return Some(at),
                _ => from = local.checked_add_signed(Duration::minutes(1))?,
            }
        }
    }

    /// The zone's offset from UTC at `t`.
    fn offset_at(&self, t: DateTime<Utc>) -> Duration {
        let offset = self.tz.offset_from_utc_datetime(&t.naive_utc()).fix();
        Duration::seconds(offset.local_minus_utc().into())
    }

    /// When a wall-clock time first happens; `None` in a spring-forward gap.
    fn first_instant(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        self.tz
            .from_local_datetime(&local)
            .earliest()
            .map(|at| at.with_timezone(&Utc))
    }

    /// The first wall-clock time at or after `from` that the fields match,
    /// on a day up to `until`.
    fn next_local(&self, from: NaiveDateTime, until: NaiveDate) -> Option<NaiveDateTime> {
        let day = self.next_day(from.date(), until)?;
        if day == from.date()
            && let Some((h, m)) = self.next_time(from.hour(), from.minute())
        {
            return day.and_hms_opt(h, m, 0);
        }
        let day = if day == from.date() {
            self.next_day(day.succ_opt()?, until)?
        } else {
            day
        };
        let (h, m) = self.next_time(0, 0)?;
        day.and_hms_opt(h, m, 0)
    }

    /// The last wall-clock time at or before `from` that the fields match,
    /// on a day from `until` on.
    fn prev_local(&self, from: NaiveDateTime, until: NaiveDate) -> Option<NaiveDateTime> {
        let day = self.prev_day(from.date(), until)?;
        if day == from.date()
            && let Some((h, m)) = self.prev_time(from.hour(), from.minute())
        {
            return day.and_hms_opt(h, m, 0);
        }
        let day = if day == from.date() {
            self.prev_day(day.pred_opt()?, until)?
        } else {
            day
        };
        let (h, m) = self.prev_time(23, 59)?;
        day.and_hms_opt(h, m, 0)
    }

    /// The first (hour, minute) at or after `h:m` the fields match.
    fn next_time(&self, h: u32, m: u32) -> Option<(u32, u32)> {
        if self.hours & (1 << h) != 0
            && let Some(m) = bit_at_or_after(self.minutes, m)
        {
            return Some((h, m));
        }
        let h = bit_at_or_after(self.hours.into(), h + 1)?;
        Some((h, self.minutes.trailing_zeros()))
    }

    /// The last (hour, minute) at or before `h:m` the fields match.
    fn prev_time(&self, h: u32, m: u32) -> Option<(u32, u32)> {
        if self.hours & (1 << h) != 0
            && let Some(m) = bit_at_or_before(self.minutes, m)
        {
            return Some((h, m));
        }
        let h = bit_at_or_before(self.hours.into(), h.checked_sub(1)?)?;
        Some((h, 63 - self.minutes.leading_zeros()))
    }

    /// The first day at or after `day`, up to `until`, that fires.
    fn next_day(&self, mut day: NaiveDate, until: NaiveDate) -> Option<NaiveDate> {
        while day <= until {
            if self.months & (1 << day.month()) == 0 {
                // The first day of the next month chosen.
                day = match bit_at_or_after(self.months.into(), day.month() + 1) {
                    Some(m) => NaiveDate::from_ymd_opt(day.year(), m, 1)?,
                    None => {
                        let m = self.months.trailing_zeros();
                        NaiveDate::from_ymd_opt(day.year() + 1, m, 1)?
                    }
                };
            } else if self.day_matches(day) {
                return Some(day);
            } else {
                day = day.succ_opt()?;
            }
        }
        None
    }

    /// The last day at or before `day`, from `until` on, that fires.
    fn prev_day(&self, mut day: NaiveDate, until: NaiveDate) -> Option<NaiveDate> {
        while day >= until {
            if self.months & (1 << day.month()) == 0 {
                // The last day of the previous month chosen.
                let (year, month) = match bit_at_or_before(self.months.into(), day.month() - 1) {
                    Some(m) if m > 0 => (day.year(), m),
                    _ => (day.year() - 1, 15 - self.months.leading_zeros()),
                };
                day = first_of_next_month(year, month)?.pred_opt()?;
            } else if self.day_matches(day) {
                return Some(day);
            } else {
                day = day.pred_opt()?;
            }
        }
        None
    }

    /// Whether the day-of-month and day-of-week fields let `day` fire.
    fn day_matches(&self, day: NaiveDate) -> bool {
        let by_day = self.days & (1 << day.day()) != 0;
        let by_weekday = self.weekdays & (1 << day.weekday().num_days_from_sunday()) != 0;
        if self.days_star || self.weekdays_star {
            by_day && by_weekday
        } else {
            by_day || by_weekday
        }
    }

    /// Whether some month chosen has a day of month chosen (February has
    /// 29 in leap years).
    fn has_a_date(&self) -> bool {
        const LONGEST: [u32; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        (1..=12).any(|m| {
            self.months & (1 << m) != 0 && u64::from(self.days) & ((2u64 << LONGEST[m]) - 2) != 0
        })
    }

    /// The longest wait between two firing days over the Gregorian cycle,
    /// in days; `None` if no day fires.
    fn longest_gap_days(&self) -> Option<i64> {
        let start = NaiveDate::from_ymd_opt(2001, 1, 1)?;
        let end = start.checked_add_signed(Duration::days(CYCLE_DAYS - 1))?;
        let first = self.next_day(start, end)?;
        let (mut last, mut longest) = (first, 0);
        while let Some(day) = last.succ_opt().and_then(|d| self.next_day(d, end)) {
            longest = longest.max((day - last).num_days());
            last = day;
        }
        Some(longest.max((first - last).num_days() + CYCLE_DAYS))
    }
}

/// The lowest set bit at or above `i`.
fn bit_at_or_after(bits: u64, i: u32) -> Option<u32> {
    let rest = bits.checked_shr(i)?.checked_shl(i)?;
    (rest != 0).then(|| rest.trailing_zeros())
}

/// The highest set bit at or below `i` (`i` < 64).
fn bit_at_or_before(bits: u64, i: u32) -> Option<u32> {
    let rest = bits & (u64::MAX >> (63 - i));
    (rest != 0).then(|| 63 - rest.leading_zeros())
}

fn first_of_next_month(year: i32, month: u32) -> Option<NaiveDate> {
    if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    }
}

fn floor_minute(t: NaiveDateTime) -> NaiveDateTime {
    t.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(t)
}

/// Parses the schedule part of a [`Cron`] (read in UTC).
fn parse_schedule(field: &'static str, schedule: &str) -> Result<Cron, DomainError> {
    let invalid = |why: String| DomainError::Invalid {
        field,
        detail: format!(
            "{schedule:?} is not a valid cron schedule: {why} (five fields: minute hour day-of-month month day-of-week, e.g. \"*/5 * * * *\", or @hourly, @daily, @weekly, @monthly, @yearly)"
        ),
    };
    if schedule.len() > MAX_SCHEDULE_LEN {
        return Err(invalid(format!(
            "it is longer than {MAX_SCHEDULE_LEN} characters"
        )));
    }
    let trimmed = schedule.trim_matches(' ');
    let expanded = if trimmed.starts_with('@') {
        match MACROS.iter().find(|(name, _)| *name == trimmed) {
            Some((_, fields)) => *fields,
            None => return Err(invalid(format!("unknown shorthand {trimmed:?}"))),
        }
    } else {
        trimmed
    };
    let parts: Vec<&str> = expanded.split(' ').filter(|p| !p.is_empty()).collect();
    if parts.len() != FIELDS.len() {
        return Err(invalid(format!(
            "it has {} fields separated by spaces, not 5",
            parts.len()
        )));
    }
    let mut sets = [0u64; 5];
    for ((part, f), set) in parts.iter().zip(&FIELDS).zip(&mut sets) {
        *set =
            parse_field(part, f).map_err(|why| invalid(format!("{} {part:?}: {why}", f.what)))?;
    }
    let [minutes, hours, days, months, weekdays] = sets;
    // The masks fit their types: each field's bits stop at its maximum.
    let cron = Cron {
        minutes,
        hours: hours as u32,
        days: days as u32,
        months: months as u16,
        weekdays: ((weekdays | weekdays >> 7) & u64::from(ALL_WEEKDAYS)) as u8,
        days_star: parts[2].starts_with('*'),
        weekdays_star: parts[4].starts_with('*'),
        tz: Tz::UTC,
    };
    let never = |why: String| DomainError::Invalid {
        field,
        detail: format!("{schedule:?} never fires: {why}"),
    };
    let either = !cron.days_star && !cron.weekdays_star;
    if !either && !cron.has_a_date() {
        return Err(never(format!(
            "no month in {:?} has a day in {:?}",
            parts[3], parts[2]
        )));
    }
    if !either && cron.weekdays != ALL_WEEKDAYS && cron.days != ALL_DAYS {
        match cron.longest_gap_days() {
            Some(gap) if gap <= MAX_GAP_DAYS => {}
            _ => {
                return Err(DomainError::Invalid {
                    field,
                    detail: format!(
                        "{schedule:?} fires too rarely: days that are both in {:?} of the months {:?} and on the weekdays {:?} come more than 8 years apart (when the day-of-month or day-of-week field starts with '*', a day must match both)",
                        parts[2], parts[3], parts[4]
                    ),
                });
            }
        }
    }
    Ok(cron)
}

/// The values one field stands for, as bits.
fn parse_field(part: &str, f: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in part.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(step)),
            None => (item, None),
        };
        let step = match step {
            None => 1,
            Some(step) => {
                let span = f.max - f.min + 1;
                match number(step) {
                    Some(n) if (1..=span).contains(&n) => n,
                    _ => {
                        return Err(format!(
                            "the step {step:?} is not a number from 1 to {span}"
                        ));
                    }
                }
            }
        };
        let (lo, hi) = match base.split_once('-') {
            _ if base == "*" => (f.min, f.max),
            Some((lo, hi)) => (value(lo, f)?, value(hi, f)?),
            // `n/step` runs from n to the end of the range.
            None if item.contains('/') => (value(base, f)?, f.max),
            None => {
                let v = value(base, f)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(format!("the range {base:?} runs backwards"));
        }
        for v in (lo..=hi).step_by(step as usize) {
            set |= 1 << v;
        }
    }
    Ok(set)
}

/// A value of a field: a number in its range, or one of its names.
fn value(s: &str, f: &Field) -> Result<u32, String> {
    if let Some(i) = f.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(f.min + i as u32);
    }
    match number(s) {
        Some(n) if (f.min..=f.max).contains(&n) => Ok(n),
        _ if f.names.is_empty() => {
            Err(format!("{s:?} is not a number from {} to {}", f.min, f.max))
        }
        _ => Err(format!(
            "{s:?} is not a number from {} to {} or a name ({})",
            f.min,
            f.max,
            f.names.join(", ")
        )),
    }
}

/// A plain decimal number of at most 3 digits.
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_timezone(field: &'static str, tz: &str) -> Result<Tz, DomainError> {
    let invalid = |why: &str| DomainError::Invalid {
        field,
        detail: format!(
            "{tz:?} is not a time-zone name: {why} (an IANA name such as UTC, Europe/Berlin or America/New_York)"
        ),
    };
    if tz.is_empty() || tz.len() > MAX_TIMEZONE_LEN {
        return Err(invalid(&format!(
            "it must be 1-{MAX_TIMEZONE_LEN} characters"
        )));
    }
    let components: Vec<&str> = tz.split('/').collect();
    if components.len() > 3 {
        return Err(invalid("it has more than three components"));
    }
    for c in components {
        if !c.starts_with(|ch: char| ch.is_ascii_alphabetic()) {
            return Err(invalid("each component starts with a letter"));
        }
        if !c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.'))
        {
            return Err(invalid(
                "it has a character outside letters, digits, '_', '-', '+' and '.'",
            ));
        }
    }
    tz.parse::<Tz>().map_err(|_| {
        let hint = match closest_zone(tz) {
            Some(name) => format!("did you mean {name:?}?"),
            None => "an IANA name such as UTC, Europe/Berlin or America/New_York".into(),
        };
        DomainError::Invalid {
            field,
            detail: format!("{tz:?} is not in the time-zone database ({hint})"),
        }
    })
}

/// The database's name closest to `tz`: the same but for case, or at most
/// two letters off.
fn closest_zone(tz: &str) -> Option<&'static str> {
    let names = chrono_tz::TZ_VARIANTS.iter().map(|z| z.name());
    if let Some(name) = names.clone().find(|n| n.eq_ignore_ascii_case(tz)) {
        return Some(name);
    }
    names
        .filter(|n| n.len().abs_diff(tz.len()) <= 2)
        .map(|n| (edit_distance(n.as_bytes(), tz.as_bytes()), n))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// Levenshtein distance, case-insensitive.
fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(!ca.eq_ignore_ascii_case(cb));
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests;
