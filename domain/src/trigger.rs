//! Triggers: what makes a function run. An `http` trigger exposes it at its
//! URL; a `cron` trigger runs it on a schedule, read in a time zone.
//!
//! Only the request rules live here so far: the Trigger aggregate (its
//! events and decider) comes with the scheduler.

use crate::DomainError;
use crate::cron::{check_schedule, check_timezone};
use crate::names::{FunctionName, TriggerName};

/// The kinds of trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    Http,
    Cron,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Http => "http",
            TriggerKind::Cron => "cron",
        }
    }

    pub fn parse(s: &str) -> Result<TriggerKind, DomainError> {
        match s {
            "http" => Ok(TriggerKind::Http),
            "cron" => Ok(TriggerKind::Cron),
            _ => Err(DomainError::Invalid {
                field: "type",
                detail: format!("unknown trigger type {s:?}; known types: http, cron"),
            }),
        }
    }
}

/// The time zone a cron schedule is read in when none is given.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// A trigger as a user asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerSpec {
    pub name: TriggerName,
    pub function: FunctionName,
    pub kind: TriggerKind,
    /// The schedule and its time zone, for a cron trigger.
    pub schedule: Option<Schedule>,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub cron: String,
    pub timezone: String,
}

/// The fields of a trigger request, as given.
#[derive(Debug, Clone, Default)]
pub struct TriggerFields<'a> {
    pub name: &'a str,
    pub function: &'a str,
    pub kind: &'a str,
    pub schedule: Option<&'a str>,
    pub timezone: Option<&'a str>,
    pub enabled: Option<bool>,
}

impl TriggerSpec {
    /// Checks a trigger request: names, the type, a cron trigger's schedule
    /// (required) and time zone (default UTC); an http trigger has neither.
    pub fn parse(f: TriggerFields<'_>) -> Result<TriggerSpec, DomainError> {
        let name = TriggerName::parse(f.name)?;
        let function = FunctionName::parse(f.function).map_err(|e| match e {
            DomainError::Invalid { detail, .. } => DomainError::Invalid {
                field: "function",
                detail,
            },
            other => other,
        })?;
        let kind = TriggerKind::parse(f.kind)?;
        let schedule = match (kind, f.schedule) {
            (TriggerKind::Cron, None) => {
                return Err(DomainError::Invalid {
                    field: "schedule",
                    detail: "a cron trigger needs a schedule, e.g. \"*/5 * * * *\"".into(),
                });
            }
            (TriggerKind::Cron, Some(cron)) => {
                check_schedule("schedule", cron)?;
                let timezone = f.timezone.unwrap_or(DEFAULT_TIMEZONE);
                check_timezone("timezone", timezone)?;
                Some(Schedule {
                    cron: cron.trim_matches(' ').to_owned(),
                    timezone: timezone.to_owned(),
                })
            }
            (TriggerKind::Http, Some(_)) => {
                return Err(DomainError::Invalid {
                    field: "schedule",
                    detail: "only a cron trigger has a schedule".into(),
                });
            }
            (TriggerKind::Http, None) if f.timezone.is_some() => {
                return Err(DomainError::Invalid {
                    field: "timezone",
                    detail: "only a cron trigger has a time zone".into(),
                });
            }
            (TriggerKind::Http, None) => None,
        };
        Ok(TriggerSpec {
            name,
            function,
            kind,
            schedule,
            enabled: f.enabled.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(schedule: &str) -> TriggerFields<'_> {
        TriggerFields {
            name: "nightly",
            function: "report",
            kind: "cron",
            schedule: Some(schedule),
            ..Default::default()
        }
    }

    #[test]
    fn a_cron_trigger_gets_utc_and_is_enabled_unless_told() {
        let t = TriggerSpec::parse(cron("0 3 * * *")).unwrap();
        assert_eq!(t.kind, TriggerKind::Cron);
        assert!(t.enabled);
        assert_eq!(
            t.schedule,
            Some(Schedule {
                cron: "0 3 * * *".into(),
                timezone: "UTC".into()
            })
        );
        let http = TriggerSpec::parse(TriggerFields {
            name: "web",
            function: "report",
            kind: "http",
            enabled: Some(false),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (http.kind, http.enabled, http.schedule),
            (TriggerKind::Http, false, None)
        );
    }

    #[test]
    fn bad_triggers_name_the_field() {
        let long = "a".repeat(41);
        let cases: Vec<(&str, TriggerFields<'_>)> = vec![
            (
                "name",
                TriggerFields {
                    name: "Nightly",
                    ..cron("* * * * *")
                },
            ),
            (
                "name",
                TriggerFields {
                    name: &long,
                    ..cron("* * * * *")
                },
            ),
            (
                "function",
                TriggerFields {
                    function: "my_fn",
                    ..cron("* * * * *")
                },
            ),
            (
                "type",
                TriggerFields {
                    kind: "queue",
                    ..cron("* * * * *")
                },
            ),
            (
                "type",
                TriggerFields {
                    kind: "HTTP",
                    ..cron("* * * * *")
                },
            ),
            (
                "schedule",
                TriggerFields {
                    schedule: None,
                    ..cron("")
                },
            ),
            ("schedule", cron("61 * * * *")),
            (
                "timezone",
                TriggerFields {
                    timezone: Some("Mars/../x"),
                    ..cron("* * * * *")
                },
            ),
            (
                "schedule",
                TriggerFields {
                    kind: "http",
                    ..cron("* * * * *")
                },
            ),
            (
                "timezone",
                TriggerFields {
                    kind: "http",
                    schedule: None,
                    timezone: Some("UTC"),
                    ..cron("")
                },
            ),
        ];
        for (field, f) in cases {
            let what = format!("{f:?}");
            match TriggerSpec::parse(f) {
                Err(DomainError::Invalid { field: got, .. }) => assert_eq!(got, field, "{what}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
