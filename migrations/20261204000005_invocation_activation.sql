-- A cold call to a function scaled to zero: how long the proxy held it
-- until an instance served (activation_us), and how long the worker took
-- to start that instance, from the FunctionScaledUp to the
-- FunctionDeployed the log recorded (instance_start_us). The first call
-- itself is the rest of duration_us. Null for every other call.
alter table invocations add column activation_us bigint;
alter table invocations add column instance_start_us bigint;
