-- Times are microseconds since the Unix epoch, UTC; 0 means unset.

CREATE TABLE calls (
    caller_id        TEXT    NOT NULL,
    tool_call_id     TEXT    NOT NULL,
    tool_name        TEXT    NOT NULL,
    arguments_digest TEXT    NOT NULL,
    arguments        BLOB    NOT NULL,
    context          BLOB    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('running', 'pending_approval', 'done')),
    result           BLOB,
    approval_id      TEXT    NOT NULL DEFAULT '',
    owner            TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (caller_id, tool_call_id)
) WITHOUT ROWID;

CREATE INDEX calls_state_expires ON calls (state, expires_at);
CREATE INDEX calls_state_updated ON calls (state, updated_at);

CREATE TABLE approvals (
    id               TEXT    NOT NULL PRIMARY KEY,
    caller_id        TEXT    NOT NULL,
    tool_call_id     TEXT    NOT NULL,
    tool_name        TEXT    NOT NULL,
    tier             TEXT    NOT NULL DEFAULT '',
    rule             TEXT    NOT NULL DEFAULT '',
    reason           TEXT    NOT NULL DEFAULT '',
    arguments_digest TEXT    NOT NULL,
    arguments        BLOB    NOT NULL,
    context          BLOB    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    decided_at       INTEGER NOT NULL DEFAULT 0,
    decided_by       TEXT    NOT NULL DEFAULT '',
    decision_reason  TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX approvals_status_expires ON approvals (status, expires_at);
CREATE INDEX approvals_caller_created ON approvals (caller_id, created_at);
CREATE INDEX approvals_created ON approvals (created_at);

CREATE TABLE audit (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    time             INTEGER NOT NULL,
    event            TEXT    NOT NULL,
    caller_id        TEXT    NOT NULL,
    tool_call_id     TEXT    NOT NULL DEFAULT '',
    tool_name        TEXT    NOT NULL,
    tier             TEXT    NOT NULL DEFAULT '',
    decision         TEXT    NOT NULL DEFAULT '',
    rule             TEXT    NOT NULL DEFAULT '',
    status           TEXT    NOT NULL DEFAULT '',
    code             TEXT    NOT NULL DEFAULT '',
    duration_ms      INTEGER NOT NULL DEFAULT 0,
    arguments_digest TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX audit_time ON audit (time);
