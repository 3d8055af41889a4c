//! Mixed versions during a rolling upgrade: an old and a new sless run side
//! by side on one database, so each must read what the other writes.
//!
//! Running the release before in CI would cost a second build; instead the
//! checked-in fixtures under `tests/fixtures/compat/` hold what a release
//! wrote, one example of every event type of every aggregate and of every
//! kind of work item, and these tests hold today's code to them:
//!
//! - old → new: every fixture is read by today's code: its events decode to
//!   the value they were written for and fold into their aggregates, read
//!   back from a real PostgreSQL; its work items, inserted as rows, are
//!   claimed by today's queue and their payloads read as the workers read
//!   them (`events`, `work`). Events of the oldest commits, as those
//!   commits' own code wrote them, are read too (`history`).
//! - new → old: what today's code writes for each fixture's value is the
//!   fixture's JSON, so the release before reads it. A field added since
//!   must be optional with a default and left out when it has it; a field
//!   is never renamed or removed. Today's decoders ignore fields they do not
//!   know, so the next release may add optional fields (`events`).
//! - the schema: migrations added after the newest one of today only
//!   expand, unless a file says why the release before no longer needs what
//!   it takes away (`migrations`, `migration_rules`).
//!
//! Fixtures are added, never rewritten or removed: the log keeps every event
//! forever. A new example is blessed into them with `SLESS_BLESS=1 cargo
//! test -p sless-store --test compat` (docs/operations.md, "Upgrading").

mod examples;
mod fixture;
mod history;
mod migration_rules;
mod migrations;
mod work;

mod events;
