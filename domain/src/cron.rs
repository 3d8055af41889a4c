//! Cron schedules: the five-field expressions cron triggers run on, and the
//! IANA time-zone names they are read in. Checked for syntax only here;
//! when they run is the scheduler's business.

use crate::DomainError;

/// Longest schedule accepted, in bytes.
pub const MAX_SCHEDULE_LEN: usize = 128;
/// Longest time-zone name accepted, in bytes.
pub const MAX_TIMEZONE_LEN: usize = 64;

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

/// The shorthands Kubernetes CronJobs accept besides five fields.
const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Checks a cron schedule: five fields separated by spaces (minute, hour,
/// day of month, month, day of week), each a comma-separated list of `*`,
/// `n` or `n-m`, any of them with a `/step`; months and days of the week
/// may be named (`JAN`, `MON-FRI`). Or one of the shorthands `@hourly`,
/// `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`.
pub fn check_schedule(field: &'static str, schedule: &str) -> Result<(), DomainError> {
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
    if trimmed.starts_with('@') {
        return if MACROS.contains(&trimmed) {
            Ok(())
        } else {
            Err(invalid(format!("unknown shorthand {trimmed:?}")))
        };
    }
    let parts: Vec<&str> = trimmed.split(' ').filter(|p| !p.is_empty()).collect();
    if parts.len() != FIELDS.len() {
        return Err(invalid(format!(
            "it has {} fields separated by spaces, not 5",
            parts.len()
        )));
    }
    for (part, f) in parts.iter().zip(&FIELDS) {
        check_field(part, f).map_err(|why| invalid(format!("{} {part:?}: {why}", f.what)))?;
    }
    Ok(())
}

fn check_field(part: &str, f: &Field) -> Result<(), String> {
    for item in part.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            let span = f.max - f.min + 1;
            match number(step) {
                Some(n) if (1..=span).contains(&n) => {}
                _ => {
                    return Err(format!(
                        "the step {step:?} is not a number from 1 to {span}"
                    ));
                }
            }
        }
        if base == "*" {
            continue;
        }
        let (lo, hi) = match base.split_once('-') {
            Some((lo, hi)) => (value(lo, f)?, value(hi, f)?),
            None => {
                let v = value(base, f)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(format!("the range {base:?} runs backwards"));
        }
    }
    Ok(())
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

/// Checks the syntax of an IANA time-zone name: `UTC`, `Europe/Berlin`,
/// `America/Argentina/Buenos_Aires`, `Etc/GMT+5`. One to three components
/// separated by `/`, each starting with a letter and made of ASCII
/// letters, digits, `_`, `-`, `+` and `.`, at most 64 characters in all.
/// Whether the zone exists is for the scheduler's time-zone database.
pub fn check_timezone(field: &'static str, tz: &str) -> Result<(), DomainError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_schedules_pass() {
        for ok in [
            "* * * * *",
            "*/5 * * * *",
            "0 0 * * *",
            "0,15,30,45 9-17 * * MON-FRI",
            "30 2 1 jan,Jul *",
            "5-55/10 */2 1-31/2 1-12 0-7",
            "0 12 * * 7",
            "  1 2 3 4 5  ",
            "@hourly",
            "@daily",
            "@annually",
        ] {
            assert_eq!(check_schedule("schedule", ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn invalid_schedules_name_the_field() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * 32 * *",
            "* * * 13 *",
            "* * * * 8",
            "*/0 * * * *",
            "*/61 * * * *",
            "5-1 * * * *",
            "a * * * *",
            "1,,2 * * * *",
            "- * * * *",
            "* * * * MON-",
            "* * * JANUARY *",
            "? * * * *",
            "L * * * *",
            "* * * * 1#2",
            "-1 * * * *",
            "0001 * * * *",
            "@every 5m",
            "@reboot",
            "CRON_TZ=UTC * * * * *",
            "*\t* * * *",
            "* * * * *\0",
            &format!("{} * * * *", "0,".repeat(100)),
        ] {
            match check_schedule("schedule", bad) {
                Err(DomainError::Invalid {
                    field: "schedule", ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn time_zone_names_are_checked_for_syntax() {
        for ok in [
            "UTC",
            "Europe/Berlin",
            "America/Argentina/Buenos_Aires",
            "Etc/GMT+5",
            "America/Port-au-Prince",
        ] {
            assert_eq!(check_timezone("timezone", ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "",
            "/UTC",
            "UTC/",
            "Europe//Berlin",
            "../etc/passwd",
            "Europe/../Berlin",
            "a/b/c/d",
            "Europe/Berlin\0",
            "Europe Berlin",
            "+05:00",
            "Évora",
            &"A".repeat(65),
        ] {
            assert!(check_timezone("timezone", bad).is_err(), "{bad:?}");
        }
    }
}
