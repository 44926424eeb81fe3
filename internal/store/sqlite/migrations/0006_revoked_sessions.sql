-- Console sessions that were signed out before their cookie expired: the
-- id is a digest of the session's nonce (never anything usable as a
-- session), expires_at when the session would have ended by itself.
-- Retention deletes a row once expires_at is older than its cutoff.
CREATE TABLE revoked_sessions (
    id         TEXT    NOT NULL PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX revoked_sessions_expires ON revoked_sessions (expires_at);
