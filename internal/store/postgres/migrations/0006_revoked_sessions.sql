-- Console sessions that were signed out before their cookie expired: the
-- id is a digest of the session's nonce (never anything usable as a
-- session), expires_at when the session would have ended by itself.
-- Retention deletes a row once expires_at is older than its cutoff. Every
-- replica reads this table, so a session signed out through one is refused
-- by all. (0005 is the embedded store's own.)
CREATE TABLE revoked_sessions (
    id         text        NOT NULL PRIMARY KEY,
    revoked_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX revoked_sessions_expires ON revoked_sessions (expires_at);
