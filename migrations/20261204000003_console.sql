-- The web console's sign-ins. A browser that signs in with a token gets a
-- random session id in a cookie; kept here are the id's sha256 (never the
-- id, never the token), whom the session acts as, its form token (CSRF) and
-- when it ends. Signing out deletes the row.
create table console_sessions (
    id_hash bytea primary key,
    sub text not null,
    namespace text not null,
    admin boolean not null,
    csrf text not null,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null
);
create index console_sessions_expires_at on console_sessions (expires_at);

-- One-time sign-in codes, as in the link `sless dev` prints: the code's
-- sha256, whom it signs in as, until when. Signing in with it deletes it.
create table console_codes (
    code_hash bytea primary key,
    sub text not null,
    namespace text not null,
    admin boolean not null,
    expires_at timestamptz not null
);
