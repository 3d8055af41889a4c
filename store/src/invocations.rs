//! Invocation records (the `invocations` table), written by the invoke proxy in batches.
