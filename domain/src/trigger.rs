//! Triggers: what makes a function run. An `http` trigger exposes it at its
//! URL; a `cron` trigger runs it on a schedule, read in a time zone.
//!
//! The Trigger aggregate (stream `trigger/{ns}/{name}`) holds what a user
//! asked for: created, toggled, deleted. What a cron trigger *did* is not
//! in its stream: every tick is a run of its own (see [`crate::job`]), so
//! the trigger's stream stays short however often it fires.

use serde::{Deserialize, Serialize};

use crate::DomainError;
use crate::cron::{check_schedule, check_timezone};
use crate::names::{FunctionName, Namespace, TriggerName};

/// The kinds of trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSpec {
    pub name: TriggerName,
    pub function: FunctionName,
    #[serde(rename = "type")]
    pub kind: TriggerKind,
    /// The schedule and its time zone, for a cron trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// The event stream of trigger `name` in `ns`.
pub fn stream(ns: &Namespace, name: &TriggerName) -> String {
    format!("trigger/{ns}/{name}")
}

/// Everything that can happen to a trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum TriggerEvent {
    /// Created, or created again after a delete.
    TriggerCreated {
        spec: TriggerSpec,
    },
    TriggerToggled {
        enabled: bool,
    },
    TriggerDeleted {},
}

impl TriggerEvent {
    /// The type name stored in the log's `type` column.
    pub fn type_name(&self) -> &'static str {
        match self {
            TriggerEvent::TriggerCreated { .. } => "TriggerCreated",
            TriggerEvent::TriggerToggled { .. } => "TriggerToggled",
            TriggerEvent::TriggerDeleted {} => "TriggerDeleted",
        }
    }

    /// The event types of this aggregate.
    pub const TYPES: [&'static str; 3] = ["TriggerCreated", "TriggerToggled", "TriggerDeleted"];

    /// The `data` column: the variant's fields as JSON.
    pub fn data(&self) -> serde_json::Value {
        crate::events::data_of(self)
    }

    /// Rebuilds an event from the log's `type` and `data` columns.
    pub fn from_stored(
        type_name: &str,
        data: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        crate::events::from_type_and_data(type_name, data)
    }
}

/// A trigger's state: a fold over its stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trigger {
    /// Number of events applied (the stream version).
    pub stream_version: u64,
    /// What it is, while it exists (its `enabled` follows the toggles).
    pub spec: Option<TriggerSpec>,
}

impl Trigger {
    pub fn exists(&self) -> bool {
        self.spec.is_some()
    }

    pub fn evolve(mut self, event: &TriggerEvent) -> Trigger {
        self.stream_version += 1;
        match event {
            TriggerEvent::TriggerCreated { spec } => self.spec = Some(spec.clone()),
            TriggerEvent::TriggerToggled { enabled } => {
                if let Some(spec) = self.spec.as_mut() {
                    spec.enabled = *enabled;
                }
            }
            TriggerEvent::TriggerDeleted {} => self.spec = None,
        }
        self
    }

    pub fn fold<'a>(events: impl IntoIterator<Item = &'a TriggerEvent>) -> Trigger {
        events
            .into_iter()
            .fold(Trigger::default(), |t, e| t.evolve(e))
    }
}

/// What a user can ask of a trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerCommand {
    Create(TriggerSpec),
    Toggle { enabled: bool },
    Delete,
}

/// Turns a command into the events it causes. Creating a trigger that
/// exists is `AlreadyExists`; toggling one to the state it is in causes
/// nothing; toggling or deleting one that does not exist is `NotFound`.
pub fn decide(state: &Trigger, command: TriggerCommand) -> Result<Vec<TriggerEvent>, DomainError> {
    let missing = || match &state.spec {
        Some(_) => Ok(()),
        None => Err(DomainError::NotFound("trigger".into())),
    };
    match command {
        TriggerCommand::Create(spec) => match &state.spec {
            Some(existing) => Err(DomainError::AlreadyExists(format!(
                "trigger {:?}",
                existing.name.as_str()
            ))),
            None => Ok(vec![TriggerEvent::TriggerCreated { spec }]),
        },
        TriggerCommand::Toggle { enabled } => {
            missing()?;
            if state.spec.as_ref().is_some_and(|s| s.enabled == enabled) {
                return Ok(vec![]);
            }
            Ok(vec![TriggerEvent::TriggerToggled { enabled }])
        }
        TriggerCommand::Delete => {
            missing()?;
            Ok(vec![TriggerEvent::TriggerDeleted {}])
        }
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

    #[test]
    fn the_trigger_decider_creates_toggles_and_deletes() {
        let spec = TriggerSpec::parse(cron("*/5 * * * *")).unwrap();
        let none = Trigger::default();
        assert_eq!(
            decide(&none, TriggerCommand::Toggle { enabled: false }),
            Err(DomainError::NotFound("trigger".into()))
        );
        assert_eq!(
            decide(&none, TriggerCommand::Delete),
            Err(DomainError::NotFound("trigger".into()))
        );
        let created = decide(&none, TriggerCommand::Create(spec.clone())).unwrap();
        let t = Trigger::fold(&created);
        assert!(t.exists() && t.spec.as_ref().unwrap().enabled);
        assert!(matches!(
            decide(&t, TriggerCommand::Create(spec.clone())),
            Err(DomainError::AlreadyExists(_))
        ));
        // Toggling to the state it is in causes nothing.
        assert_eq!(
            decide(&t, TriggerCommand::Toggle { enabled: true }),
            Ok(vec![])
        );
        let off = decide(&t, TriggerCommand::Toggle { enabled: false }).unwrap();
        assert_eq!(off, vec![TriggerEvent::TriggerToggled { enabled: false }]);
        let t = off.iter().fold(t, |t, e| t.evolve(e));
        assert!(!t.spec.as_ref().unwrap().enabled);
        let gone = decide(&t, TriggerCommand::Delete).unwrap();
        let t = gone.iter().fold(t, |t, e| t.evolve(e));
        assert!(!t.exists());
        assert_eq!(t.stream_version, 3);
        // The name is free again.
        assert!(decide(&t, TriggerCommand::Create(spec)).is_ok());
    }

    #[test]
    fn trigger_events_round_trip_through_type_and_data() {
        let spec = TriggerSpec::parse(cron("0 3 * * MON-FRI")).unwrap();
        for e in [
            TriggerEvent::TriggerCreated { spec },
            TriggerEvent::TriggerToggled { enabled: false },
            TriggerEvent::TriggerDeleted {},
        ] {
            assert!(TriggerEvent::TYPES.contains(&e.type_name()));
            assert_eq!(
                TriggerEvent::from_stored(e.type_name(), &e.data()).unwrap(),
                e
            );
        }
    }
}
