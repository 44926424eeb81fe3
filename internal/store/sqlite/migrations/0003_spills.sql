-- The full output of cut results, in chunks of registry.SpillChunkBytes
-- (every chunk but the last is full). Times are microseconds since the
-- Unix epoch.

CREATE TABLE spills (
    id           INTEGER PRIMARY KEY,
    caller_id    TEXT    NOT NULL,
    tool_call_id TEXT    NOT NULL,
    stream       TEXT    NOT NULL,
    tool_name    TEXT    NOT NULL,
    total_bytes  INTEGER NOT NULL DEFAULT 0,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    complete     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    UNIQUE (caller_id, tool_call_id, stream)
);

CREATE INDEX spills_expires ON spills (expires_at);

CREATE TABLE spill_chunks (
    spill_id INTEGER NOT NULL REFERENCES spills (id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    PRIMARY KEY (spill_id, seq)
);
