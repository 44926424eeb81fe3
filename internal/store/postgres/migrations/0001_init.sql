CREATE TABLE calls (
    caller_id        text        NOT NULL,
    tool_call_id     text        NOT NULL,
    tool_name        text        NOT NULL,
    arguments_digest text        NOT NULL,
    arguments        bytea       NOT NULL,
    context          jsonb       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('running', 'pending_approval', 'done')),
    result           bytea,
    approval_id      text        NOT NULL DEFAULT '',
    owner            text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    expires_at       timestamptz,
    PRIMARY KEY (caller_id, tool_call_id)
);

CREATE INDEX calls_running_expires ON calls (expires_at) WHERE state = 'running';
CREATE INDEX calls_pending_expires ON calls (expires_at) WHERE state = 'pending_approval';
CREATE INDEX calls_done_updated ON calls (updated_at) WHERE state = 'done';
CREATE INDEX calls_owner ON calls (owner) WHERE state = 'running';

CREATE TABLE approvals (
    id               text        NOT NULL PRIMARY KEY,
    caller_id        text        NOT NULL,
    tool_call_id     text        NOT NULL,
    tool_name        text        NOT NULL,
    tier             text        NOT NULL DEFAULT '',
    rule             text        NOT NULL DEFAULT '',
    reason           text        NOT NULL DEFAULT '',
    arguments_digest text        NOT NULL,
    arguments        bytea       NOT NULL,
    context          jsonb       NOT NULL,
    status           text        NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    decided_at       timestamptz,
    decided_by       text        NOT NULL DEFAULT '',
    decision_reason  text        NOT NULL DEFAULT ''
);

CREATE INDEX approvals_pending_expires ON approvals (expires_at) WHERE status = 'pending';
CREATE INDEX approvals_caller_created ON approvals (caller_id, created_at);
CREATE INDEX approvals_created ON approvals (created_at);
CREATE INDEX approvals_updated ON approvals (updated_at);

CREATE TABLE audit (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time             timestamptz NOT NULL,
    event            text        NOT NULL,
    caller_id        text        NOT NULL,
    tool_call_id     text        NOT NULL DEFAULT '',
    tool_name        text        NOT NULL,
    tier             text        NOT NULL DEFAULT '',
    decision         text        NOT NULL DEFAULT '',
    rule             text        NOT NULL DEFAULT '',
    status           text        NOT NULL DEFAULT '',
    code             text        NOT NULL DEFAULT '',
    duration_ms      bigint      NOT NULL DEFAULT 0,
    arguments_digest text        NOT NULL DEFAULT ''
);

CREATE INDEX audit_time ON audit (time);
