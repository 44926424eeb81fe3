-- The full output of cut results, in chunks of registry.SpillChunkBytes
-- (every chunk but the last is full).

CREATE TABLE spills (
    id           bigserial   PRIMARY KEY,
    caller_id    text        NOT NULL,
    tool_call_id text        NOT NULL,
    stream       text        NOT NULL,
    tool_name    text        NOT NULL,
    total_bytes  bigint      NOT NULL DEFAULT 0,
    stored_bytes bigint      NOT NULL DEFAULT 0,
    complete     boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    UNIQUE (caller_id, tool_call_id, stream)
);

CREATE INDEX spills_expires ON spills (expires_at);

CREATE TABLE spill_chunks (
    spill_id bigint  NOT NULL REFERENCES spills (id) ON DELETE CASCADE,
    seq      integer NOT NULL,
    data     bytea   NOT NULL,
    PRIMARY KEY (spill_id, seq)
);
