//! A typed client of the sless REST API.
