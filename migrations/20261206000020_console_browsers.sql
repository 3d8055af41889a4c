-- The console's sessions and sign-in forms are bound to the browser that
-- asked for them: a random browser id in a cookie no page script can write
-- (`__Http-sless_browser`), of which only the sha256 is kept.
--
-- A session keeps the hash of the browser it was started in, and is taken
-- only with that browser's cookie beside its own. Sessions started before
-- this are ended: none of them is bound to a browser.
delete from console_sessions;
alter table console_sessions add column browser_hash bytea;

-- A sign-in form's token, kept for the browser it was given to until it is
-- used (once) or ends: the sign-in is refused unless the form's token and
-- the browser's cookie make a pair recorded here.
create table console_sign_in_forms (
    browser_hash bytea not null,
    token_hash bytea not null,
    expires_at timestamptz not null,
    primary key (browser_hash, token_hash)
);
create index console_sign_in_forms_expires_at on console_sign_in_forms (expires_at);
