-- The trace id of the call that created a record, and who vouched for a
-- token caller in the audit trail (a JWT's iss and sub; never the token).
-- Empty for rows written before, and for calls without a trace or callers
-- with static credentials.
ALTER TABLE calls ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN issuer TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN subject TEXT NOT NULL DEFAULT '';
