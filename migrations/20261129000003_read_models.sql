-- Read models kept by the projector from the event log. Nothing but the
-- projector writes them; everything here can be rebuilt by replaying the log.
create table functions (
    namespace        text not null,
    name             text not null,
    runtime          text not null,
    entrypoint       text not null,
    memory_mb        integer not null,
    timeout_sec      integer not null,
    env_vars         jsonb not null,
    current_version  integer,
    deployed_version integer,
    endpoint         text,
    phase            text not null,
    last_error       text,
    stream_version   integer not null,
    created_at       timestamptz not null,
    updated_at       timestamptz not null,
    primary key (namespace, name)
);

create table function_versions (
    namespace      text not null,
    name           text not null,
    version        integer not null,
    sha256         text not null,
    size           bigint not null,
    files          integer not null,
    zip_key        text not null,
    context_sha256 text not null,
    context_key    text not null,
    uploaded_by    text,
    uploaded_at    timestamptz not null,
    primary key (namespace, name, version)
);
