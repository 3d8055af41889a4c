//! The cron schedule's tests: parsing, and ticks checked against tables
//! and a minute-by-minute walk.

use super::*;

/// `"2025-01-01 10:07:30"` or `"2025-01-01 10:07"`, in UTC.
fn at(s: &str) -> DateTime<Utc> {
    let s = if s.len() == 16 {
        format!("{s}:00")
    } else {
        s.into()
    };
    NaiveDateTime::parse_from_str(&s, "%Y-%m-%d %H:%M:%S")
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .and_utc()
}

fn cron(schedule: &str, tz: &str) -> Cron {
    Cron::parse(schedule, tz).unwrap_or_else(|e| panic!("{schedule:?} {tz:?}: {e}"))
}

#[test]
fn next_and_latest_ticks() {
    // schedule | zone | t | next after t | latest at or before t (UTC)
    let cases = [
        "*/15 * * * * | UTC | 2025-01-01 10:07:30 | 2025-01-01 10:15 | 2025-01-01 10:00",
        "0 9 * * MON-FRI | UTC | 2025-01-03 09:00 | 2025-01-06 09:00 | 2025-01-03 09:00",
        "30 2 1 jan,Jul * | UTC | 2025-03-10 00:00 | 2025-07-01 02:30 | 2025-01-01 02:30",
        "5-55/10 */2 * * * | UTC | 2025-01-01 01:00 | 2025-01-01 02:05 | 2025-01-01 00:55",
        "10/20 * * * * | UTC | 2025-01-01 00:31 | 2025-01-01 00:50 | 2025-01-01 00:30",
        "0 22-23,1 * * * | UTC | 2025-01-01 23:30 | 2025-01-02 01:00 | 2025-01-01 23:00",
        // Month ends and leap years.
        "0 0 1 * * | UTC | 2025-01-31 23:59 | 2025-02-01 00:00 | 2025-01-01 00:00",
        "0 0 31 * * | UTC | 2025-02-01 00:00 | 2025-03-31 00:00 | 2025-01-31 00:00",
        "0 0 31 * * | UTC | 2025-12-31 00:00:01 | 2026-01-31 00:00 | 2025-12-31 00:00",
        "0 0 29 2 * | UTC | 2025-03-01 00:00 | 2028-02-29 00:00 | 2024-02-29 00:00",
        "0 0 29 2 * | UTC | 2100-06-01 00:00 | 2104-02-29 00:00 | 2096-02-29 00:00",
        "59 23 28-31 2 * | UTC | 2025-02-27 00:00 | 2025-02-28 23:59 | 2024-02-29 23:59",
        // Day of month OR day of week when both are restricted...
        "0 0 13 * FRI | UTC | 2025-01-11 00:00 | 2025-01-13 00:00 | 2025-01-10 00:00",
        "0 0 13 * FRI | UTC | 2025-01-13 12:00 | 2025-01-17 00:00 | 2025-01-13 00:00",
        // ...AND when one starts with `*`.
        "0 0 */2 * FRI | UTC | 2025-01-04 00:00 | 2025-01-17 00:00 | 2025-01-03 00:00",
        "0 0 1-7 * */7 | UTC | 2025-01-01 00:00 | 2025-01-05 00:00 | 2024-12-01 00:00",
        // Sunday is 0 and 7.
        "0 12 * * 0 | UTC | 2025-01-01 00:00 | 2025-01-05 12:00 | 2024-12-29 12:00",
        "0 12 * * 7 | UTC | 2025-01-01 00:00 | 2025-01-05 12:00 | 2024-12-29 12:00",
        "0 0 * * 5-7 | UTC | 2025-01-05 12:00 | 2025-01-10 00:00 | 2025-01-05 00:00",
        "@weekly | UTC | 2025-01-01 00:00 | 2025-01-05 00:00 | 2024-12-29 00:00",
        "@hourly | UTC | 2025-01-01 10:00 | 2025-01-01 11:00 | 2025-01-01 10:00",
        "@yearly | UTC | 2025-06-01 00:00 | 2026-01-01 00:00 | 2025-01-01 00:00",
        "@monthly | UTC | 2025-06-01 00:00 | 2025-07-01 00:00 | 2025-06-01 00:00",
        // Wall-clock time in the zone.
        "0 0 1 1 * | Europe/Berlin | 2025-06-01 00:00 | 2025-12-31 23:00 | 2024-12-31 23:00",
        "0 9 * * * | America/New_York | 2025-07-01 12:00 | 2025-07-01 13:00 | 2025-06-30 13:00",
        // Berlin springs forward on 2025-03-30 at 02:00 CET: 02:30 does not happen.
        "30 2 * * * | Europe/Berlin | 2025-03-29 12:00 | 2025-03-31 00:30 | 2025-03-29 01:30",
        "*/30 * * * * | Europe/Berlin | 2025-03-30 00:45 | 2025-03-30 01:00 | 2025-03-30 00:30",
        // Berlin falls back on 2025-10-26 at 03:00 CEST: 02:xx happens twice, fires once.
        "30 2 * * * | Europe/Berlin | 2025-10-26 00:00 | 2025-10-26 00:30 | 2025-10-25 00:30",
        "30 2 * * * | Europe/Berlin | 2025-10-26 00:30 | 2025-10-27 01:30 | 2025-10-26 00:30",
        "30 2 * * * | Europe/Berlin | 2025-10-26 01:45 | 2025-10-27 01:30 | 2025-10-26 00:30",
        "*/30 * * * * | Europe/Berlin | 2025-10-26 01:10 | 2025-10-26 02:00 | 2025-10-26 00:30",
        "*/30 * * * * | Europe/Berlin | 2025-10-26 02:00 | 2025-10-26 02:30 | 2025-10-26 02:00",
        // New York springs forward on 2025-03-09 at 02:00 EST, falls back on 2025-11-02 at 02:00 EDT.
        "0 2 * * * | America/New_York | 2025-03-08 08:00 | 2025-03-10 06:00 | 2025-03-08 07:00",
        "* * * * * | America/New_York | 2025-03-09 06:59:30 | 2025-03-09 07:00 | 2025-03-09 06:59",
        "30 1 * * * | America/New_York | 2025-11-02 05:30 | 2025-11-03 06:30 | 2025-11-02 05:30",
        "30 1 * * * | America/New_York | 2025-11-02 06:45 | 2025-11-03 06:30 | 2025-11-02 05:30",
        "0,30 * * * * | America/New_York | 2025-11-02 05:45 | 2025-11-02 07:00 | 2025-11-02 05:30",
    ];
    for case in cases {
        let [schedule, tz, t, next, latest] = case.split(" | ").collect::<Vec<_>>()[..] else {
            panic!("{case}")
        };
        let c = cron(schedule, tz);
        let t = at(t);
        assert_eq!(
            c.next_after(t),
            Some(at(next)),
            "next_after {schedule:?} {tz} {t}"
        );
        assert_eq!(
            c.latest_at_or_before(t),
            Some(at(latest)),
            "latest {schedule:?} {tz} {t}"
        );
    }
}

#[test]
fn shorthands_and_sunday_spellings_mean_the_same_schedule() {
    for (a, b) in [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("0 12 * * 7", "0 12 * * 0"),
        ("0 12 * * SUN", "0 12 * * 0"),
        ("0 0 * * 0,7", "0 0 * * 0"),
        ("0 0 * JAN-mar *", "0 0 * 1,2,3 *"),
    ] {
        assert_eq!(cron(a, "UTC"), cron(b, "UTC"), "{a:?} vs {b:?}");
    }
    assert_ne!(cron("0 0 * * 0-7", "UTC"), cron("0 0 * * MON", "UTC"));
}

/// Every UTC minute from `from` for `minutes`: is it a tick? Read the
/// local time of each instant and keep it when the fields match and
/// the instant is that wall-clock time's first occurrence.
fn ticks_by_walking(c: &Cron, from: DateTime<Utc>, minutes: i64) -> Vec<DateTime<Utc>> {
    (0..minutes)
        .map(|i| from + Duration::minutes(i))
        .filter(|u| {
            let local = u.with_timezone(&c.tz).naive_local();
            c.minutes & (1 << local.minute()) != 0
                && c.hours & (1 << local.hour()) != 0
                && c.months & (1 << local.month()) != 0
                && c.day_matches(local.date())
                && c.first_instant(local) == Some(*u)
        })
        .collect()
}

#[test]
fn ticks_agree_with_a_minute_by_minute_walk_across_daylight_saving_changes() {
    let days = [
        ("Europe/Berlin", "2025-03-29 00:00"),
        ("Europe/Berlin", "2025-10-25 00:00"),
        ("America/New_York", "2025-03-08 00:00"),
        ("America/New_York", "2025-11-01 00:00"),
        ("Australia/Lord_Howe", "2025-04-05 00:00"),
        ("UTC", "2024-02-28 00:00"),
    ];
    let schedules = [
        "* * * * *",
        "*/30 * * * *",
        "30 2 * * *",
        "15,45 1-3 * * *",
        "0 * * * SUN,THU",
        "59 23 * * *",
    ];
    let minutes = 3 * 24 * 60;
    for (tz, from) in days {
        for schedule in schedules {
            let c = cron(schedule, tz);
            let from = at(from);
            let ticks = ticks_by_walking(&c, from, minutes);
            assert!(ticks.len() >= 2, "{schedule:?} {tz}: {ticks:?}");
            for i in 0..minutes {
                let t = from + Duration::minutes(i) + Duration::seconds(i % 2 * 30);
                let after = ticks.partition_point(|&u| u <= t);
                if let Some(&next) = ticks.get(after) {
                    assert_eq!(c.next_after(t), Some(next), "next {schedule:?} {tz} {t}");
                }
                if let Some(&latest) = after.checked_sub(1).and_then(|i| ticks.get(i)) {
                    assert_eq!(
                        c.latest_at_or_before(t),
                        Some(latest),
                        "latest {schedule:?} {tz} {t}"
                    );
                }
            }
        }
    }
}

#[test]
fn next_and_latest_agree_with_each_other() {
    let schedules = [
        ("0 0 29 2 *", "UTC"),
        ("0 0 13 * FRI", "Europe/Berlin"),
        ("30 2 * * *", "Europe/Berlin"),
        ("*/7 */5 * * *", "America/New_York"),
        ("0 0 31 * *", "Asia/Kolkata"),
        ("@yearly", "Pacific/Apia"),
        ("0 12 */2 * FRI", "UTC"),
    ];
    for (schedule, tz) in schedules {
        let c = cron(schedule, tz);
        // A few thousand instants over eight years, none on a whole minute.
        let mut t = at("2024-01-01 00:00:17");
        for _ in 0..2_000 {
            let next = c.next_after(t).expect("a tick after");
            assert!(next > t, "{schedule:?} {tz} {t}");
            assert_eq!(next.second(), 0);
            assert_eq!(
                c.latest_at_or_before(next),
                Some(next),
                "{schedule:?} {tz} {t}"
            );
            assert!(c.next_after(next).is_some_and(|n| n > next));
            let latest = c.latest_at_or_before(t).expect("a tick before");
            assert!(latest <= t, "{schedule:?} {tz} {t}");
            assert_eq!(c.next_after(latest), Some(next), "{schedule:?} {tz} {t}");
            t += Duration::minutes(2_113);
        }
    }
}

#[test]
fn february_29_is_found_by_skipping_not_walking() {
    let c = cron("0 0 29 2 *", "UTC");
    assert_eq!(
        c.next_after(at("2025-03-01 00:00")),
        Some(at("2028-02-29 00:00"))
    );
    let mut tick = at("2000-01-01 00:00");
    let mut years = Vec::new();
    for _ in 0..1_000 {
        tick = c.next_after(tick).expect("every leap year fires");
        assert_eq!((tick.month(), tick.day(), tick.hour()), (2, 29, 0));
        assert_eq!(
            c.latest_at_or_before(tick + Duration::days(1_000)),
            Some(tick)
        );
        years.push(tick.year());
    }
    assert_eq!(&years[..4], &[2000, 2004, 2008, 2012]);
    assert!(!years.contains(&2100) && years.contains(&2104));
    assert_eq!(years.len(), 1_000);
}

#[test]
fn nothing_is_found_beyond_eight_years() {
    let c = cron("0 0 29 2 *", "UTC");
    // Beyond the last date chrono can hold.
    assert_eq!(c.next_after(DateTime::<Utc>::MAX_UTC), None);
    assert_eq!(c.latest_at_or_before(DateTime::<Utc>::MIN_UTC), None);
    let yearly = cron("@yearly", "Europe/Berlin");
    assert!(yearly.next_after(DateTime::<Utc>::MAX_UTC).is_none());
}

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
        "0 0 29 2 *",
        "0 0 31 1,4 *",
        "0 0 30 2 MON",
        "0 0 */2 * FRI",
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
fn schedules_that_never_fire_or_fire_years_apart_are_refused() {
    for (bad, why) in [
        (
            "0 0 30 2 *",
            "never fires: no month in \"2\" has a day in \"30\"",
        ),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30-31 feb *", "never fires"),
        ("0 0 31 2 */1", "never fires"),
        // February 29 on a Sunday: 2032, then 2060.
        ("0 0 29 2 */7", "fires too rarely"),
        // January 1 on a Sunday: up to 11 years apart.
        ("0 0 */31 1 */7", "fires too rarely"),
    ] {
        match Cron::parse(bad, "UTC") {
            Err(DomainError::Invalid {
                field: "schedule",
                detail,
            }) => assert!(detail.contains(why), "{bad:?}: {detail}"),
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

#[test]
fn time_zones_missing_from_the_database_are_refused_with_a_suggestion() {
    for (bad, hint) in [
        ("Mars/Olympus", "such as UTC"),
        ("Europe/Berln", "did you mean \"Europe/Berlin\"?"),
        ("europe/berlin", "did you mean \"Europe/Berlin\"?"),
        ("America/New_Yrok", "did you mean \"America/New_York\"?"),
        ("Utc", "did you mean \"UTC\"?"),
    ] {
        match Cron::parse("* * * * *", bad) {
            Err(DomainError::Invalid {
                field: "timezone",
                detail,
            }) => {
                assert!(detail.contains("not in the time-zone database"), "{detail}");
                assert!(detail.contains(hint), "{bad:?}: {detail}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(
        cron("@daily", "Asia/Tokyo").timezone(),
        chrono_tz::Asia::Tokyo
    );
}
