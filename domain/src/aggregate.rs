//! The shape every aggregate has: a stream of its own, an event type that
//! the log stores as a type name and a `data` document, a pure `evolve`
//! that folds one event into the state, and a pure `decide` that turns a
//! command into the events it causes.
//!
//! The store loads any aggregate with one generic fold
//! (`sless_store::eventlog::load::<A>`) and the API executes any command with
//! one loop (`sless_api::command::execute`); what differs per aggregate
//! lives in its `impl Aggregate`.

use serde_json::Value;

use crate::DomainError;
use crate::job::{Job, JobCommand, JobEvent};
use crate::names::{FunctionKey, JobName, Namespace, TriggerName};
use crate::namespace::{NamespaceCommand, NamespaceEvent, NamespaceState};
use crate::trigger::{Trigger, TriggerCommand, TriggerEvent};
use crate::{Function, FunctionCommand, FunctionEvent};

/// One kind of aggregate: its stream, its events and its decider.
pub trait Aggregate: Default + Clone + Send + Sync + 'static {
    /// What names one instance (and so its stream).
    type Id: ?Sized;
    type Event: Clone + Send + Sync + std::fmt::Debug + PartialEq;
    type Command: Send;

    /// What the aggregate is called in messages (`function`, `trigger`).
    const KIND: &'static str;

    /// The stream of the instance `id`.
    fn stream(id: &Self::Id) -> String;

    /// How many events were folded into this state: its stream version.
    fn stream_version(&self) -> u64;

    /// True while the instance exists (created and not deleted since).
    fn exists(&self) -> bool;

    /// Folds one event into the state.
    fn evolve(self, event: &Self::Event) -> Self;

    /// The events `command` causes in this state (none when it changes nothing).
    fn decide(&self, command: Self::Command) -> Result<Vec<Self::Event>, DomainError>;

    /// The type name the log stores in its `type` column.
    fn event_type(event: &Self::Event) -> &'static str;

    /// The log's `data` column of an event.
    fn encode(event: &Self::Event) -> Value;

    /// An event back from the log's `type` and `data` columns.
    fn decode(event_type: &str, data: &Value) -> serde_json::Result<Self::Event>;

    /// Folds events into a fresh state.
    fn fold<'a>(events: impl IntoIterator<Item = &'a Self::Event>) -> Self {
        events.into_iter().fold(Self::default(), Self::evolve)
    }

    /// The state after `events`, starting from this one.
    fn after(&self, events: &[Self::Event]) -> Self {
        events.iter().fold(self.clone(), Self::evolve)
    }

    /// Decides `commands` in order, each on the state the events of those
    /// before it make: the events of all of them, or the first refusal.
    fn decide_all(
        &self,
        commands: impl IntoIterator<Item = Self::Command>,
    ) -> Result<Vec<Self::Event>, DomainError> {
        let mut state = self.clone();
        let mut events = Vec::new();
        for command in commands {
            let decided = state.decide(command)?;
            state = state.after(&decided);
            events.extend(decided);
        }
        Ok(events)
    }
}

impl Aggregate for Function {
    type Id = FunctionKey;
    type Event = FunctionEvent;
    type Command = FunctionCommand;
    const KIND: &'static str = "function";

    fn stream(id: &FunctionKey) -> String {
        id.stream()
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn exists(&self) -> bool {
        Function::exists(self)
    }
    fn evolve(self, event: &FunctionEvent) -> Function {
        Function::evolve(self, event)
    }
    fn decide(&self, command: FunctionCommand) -> Result<Vec<FunctionEvent>, DomainError> {
        crate::function::decide(self, command)
    }
    fn event_type(event: &FunctionEvent) -> &'static str {
        event.type_name()
    }
    fn encode(event: &FunctionEvent) -> Value {
        event.data()
    }
    fn decode(event_type: &str, data: &Value) -> serde_json::Result<FunctionEvent> {
        FunctionEvent::from_stored(event_type, data)
    }
}

impl Aggregate for Trigger {
    type Id = (Namespace, TriggerName);
    type Event = TriggerEvent;
    type Command = TriggerCommand;
    const KIND: &'static str = "trigger";

    fn stream((ns, name): &(Namespace, TriggerName)) -> String {
        crate::trigger::stream(ns, name)
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn exists(&self) -> bool {
        Trigger::exists(self)
    }
    fn evolve(self, event: &TriggerEvent) -> Trigger {
        Trigger::evolve(self, event)
    }
    fn decide(&self, command: TriggerCommand) -> Result<Vec<TriggerEvent>, DomainError> {
        crate::trigger::decide(self, command)
    }
    fn event_type(event: &TriggerEvent) -> &'static str {
        event.type_name()
    }
    fn encode(event: &TriggerEvent) -> Value {
        event.data()
    }
    fn decode(event_type: &str, data: &Value) -> serde_json::Result<TriggerEvent> {
        TriggerEvent::from_stored(event_type, data)
    }
}

impl Aggregate for Job {
    type Id = (Namespace, JobName);
    type Event = JobEvent;
    type Command = JobCommand;
    const KIND: &'static str = "job";

    fn stream((ns, name): &(Namespace, JobName)) -> String {
        crate::job::stream(ns, name)
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn exists(&self) -> bool {
        Job::exists(self)
    }
    fn evolve(self, event: &JobEvent) -> Job {
        Job::evolve(self, event)
    }
    fn decide(&self, command: JobCommand) -> Result<Vec<JobEvent>, DomainError> {
        crate::job::decide(self, command)
    }
    fn event_type(event: &JobEvent) -> &'static str {
        event.type_name()
    }
    fn encode(event: &JobEvent) -> Value {
        event.data()
    }
    fn decode(event_type: &str, data: &Value) -> serde_json::Result<JobEvent> {
        JobEvent::from_stored(event_type, data)
    }
}

impl Aggregate for NamespaceState {
    type Id = Namespace;
    type Event = NamespaceEvent;
    type Command = NamespaceCommand;
    const KIND: &'static str = "namespace";

    fn stream(id: &Namespace) -> String {
        id.stream()
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn exists(&self) -> bool {
        self.ensured
    }
    fn evolve(self, event: &NamespaceEvent) -> NamespaceState {
        NamespaceState::evolve(self, event)
    }
    fn decide(&self, command: NamespaceCommand) -> Result<Vec<NamespaceEvent>, DomainError> {
        Ok(crate::namespace::decide(self, command))
    }
    fn event_type(event: &NamespaceEvent) -> &'static str {
        event.type_name()
    }
    fn encode(event: &NamespaceEvent) -> Value {
        event.data()
    }
    fn decode(event_type: &str, data: &Value) -> serde_json::Result<NamespaceEvent> {
        NamespaceEvent::from_stored(event_type, data)
    }
}

/// Given/when/then for any aggregate: `given::<Trigger>(&[created])
/// .when(TriggerCommand::Toggle { enabled: false }).then(&[toggled])`.
pub mod testing {
    use super::Aggregate;
    use crate::DomainError;

    /// An aggregate folded from the events it was given.
    pub struct Given<A: Aggregate> {
        pub state: A,
    }

    /// The state after the given events (an empty slice: a new instance).
    pub fn given<A: Aggregate>(events: &[A::Event]) -> Given<A> {
        Given {
            state: A::fold(events),
        }
    }

    /// What a command made of the given state.
    pub struct When<A: Aggregate> {
        pub state: A,
        pub outcome: Result<Vec<A::Event>, DomainError>,
    }

    impl<A: Aggregate> Given<A> {
        pub fn when(self, command: A::Command) -> When<A> {
            let outcome = self.state.decide(command);
            When {
                state: self.state,
                outcome,
            }
        }
    }

    impl<A: Aggregate> When<A> {
        /// Asserts the events decided, and that they fold (each event type
        /// round-trips through the log's columns too); returns the state after.
        #[track_caller]
        pub fn then(self, expected: &[A::Event]) -> A {
            let events = match self.outcome {
                Ok(events) => events,
                Err(e) => panic!("expected events {expected:?}, the command was refused: {e}"),
            };
            assert_eq!(events, expected, "decided events");
            for e in &events {
                let back = A::decode(A::event_type(e), &A::encode(e)).unwrap_or_else(|err| {
                    panic!("{} does not round-trip: {err}", A::event_type(e))
                });
                assert_eq!(&back, e, "an event read back from the log");
            }
            self.state.after(&events)
        }

        /// Asserts the command was refused with `expected`.
        #[track_caller]
        pub fn then_refused(self, expected: DomainError) {
            match self.outcome {
                Ok(events) => panic!("expected the refusal {expected:?}, got events {events:?}"),
                Err(e) => assert_eq!(e, expected, "the refusal"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::given;
    use super::*;
    use crate::trigger::{TriggerFields, TriggerSpec};
    use crate::{FunctionName, FunctionSpec, Runtime};

    fn ns() -> Namespace {
        Namespace::for_subject("someone")
    }

    fn http_trigger() -> TriggerSpec {
        TriggerSpec::parse(TriggerFields {
            name: "web",
            function: "hello",
            kind: "http",
            schedule: None,
            timezone: None,
            enabled: None,
        })
        .unwrap()
    }

    #[test]
    fn every_aggregate_names_its_own_stream() {
        let key = FunctionKey::new(ns(), FunctionName::parse("hello").unwrap());
        assert_eq!(Function::stream(&key), format!("function/{}/hello", ns()));
        let t = (ns(), TriggerName::parse("web").unwrap());
        assert_eq!(Trigger::stream(&t), format!("trigger/{}/web", ns()));
        let j = (ns(), JobName::parse("run-1").unwrap());
        assert_eq!(Job::stream(&j), format!("job/{}/run-1", ns()));
        assert_eq!(NamespaceState::stream(&ns()), format!("namespace/{}", ns()));
    }

    #[test]
    fn a_trigger_is_created_toggled_and_deleted_through_the_trait() {
        let created = given::<Trigger>(&[])
            .when(TriggerCommand::Create(http_trigger()))
            .then(&[TriggerEvent::TriggerCreated {
                spec: http_trigger(),
            }]);
        assert_eq!(created.stream_version(), 1);
        let events = [TriggerEvent::TriggerCreated {
            spec: http_trigger(),
        }];
        given::<Trigger>(&events)
            .when(TriggerCommand::Create(http_trigger()))
            .then_refused(DomainError::AlreadyExists("trigger \"web\"".into()));
        given::<Trigger>(&events)
            .when(TriggerCommand::Toggle { enabled: true })
            .then(&[]);
        let off = given::<Trigger>(&events)
            .when(TriggerCommand::Toggle { enabled: false })
            .then(&[TriggerEvent::TriggerToggled { enabled: false }]);
        assert!(!off.spec.unwrap().enabled);
    }

    #[test]
    fn a_function_is_created_once_through_the_trait() {
        let spec = FunctionSpec {
            runtime: Runtime::Python311,
            entrypoint: "main.handler".into(),
            memory_mb: 128,
            timeout_sec: 30,
            env_vars: Default::default(),
            scale_to_zero_after_sec: None,
            scaling: Default::default(),
        };
        let created = FunctionEvent::FunctionCreated { spec: spec.clone() };
        let f = given::<Function>(&[])
            .when(FunctionCommand::Create { spec: spec.clone() })
            .then(std::slice::from_ref(&created));
        assert!(f.exists());
        given::<Function>(&[created])
            .when(FunctionCommand::Create { spec })
            .then_refused(DomainError::AlreadyExists("function".into()));
    }

    #[test]
    fn a_namespace_is_ensured_once_through_the_trait() {
        let ensured = given::<NamespaceState>(&[])
            .when(NamespaceCommand::Ensure)
            .then(&[NamespaceEvent::NamespaceEnsured {}]);
        assert_eq!(ensured.stream_version(), 1);
        given::<NamespaceState>(&[NamespaceEvent::NamespaceEnsured {}])
            .when(NamespaceCommand::Ensure)
            .then(&[]);
    }

    #[test]
    fn a_job_is_requested_once_through_the_trait() {
        let request = || JobCommand::Request {
            function: FunctionName::parse("hello").unwrap(),
            version: 1,
            input: serde_json::json!({"n": 1}),
            timeout_sec: 30,
            cron: None,
        };
        let requested = JobEvent::JobRequested {
            function: FunctionName::parse("hello").unwrap(),
            version: 1,
            input: serde_json::json!({"n": 1}),
            timeout_sec: 30,
            cron: None,
        };
        given::<Job>(&[])
            .when(request())
            .then(std::slice::from_ref(&requested));
        given::<Job>(&[requested])
            .when(request())
            .then_refused(DomainError::AlreadyExists("job".into()));
    }
}
