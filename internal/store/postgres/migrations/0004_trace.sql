-- The trace id of the call that created a record, and who vouched for a
-- token caller in the audit trail (a JWT's iss and sub; never the token).
-- Empty for rows written before, and for calls without a trace or callers
-- with static credentials.
ALTER TABLE calls ADD COLUMN trace_id text NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN issuer text NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN subject text NOT NULL DEFAULT '';
