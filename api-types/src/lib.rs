//! The documents of the sless REST API: the bodies its commands take
//! (`requests`) and the answers its routes give (`views`; what functions
//! print in `logs`). The API
//! documents its routes with these types and the client (`sless-client`)
//! reads and writes them, so the two cannot drift apart.

pub mod logs;
pub mod requests;
pub mod views;

pub use logs::*;
pub use requests::*;
pub use views::*;
