-- What an approval request was filed with (caller snapshot, request
-- catalog and timeout), as JSON; NULL for requests filed before.
ALTER TABLE approvals ADD COLUMN filed bytea;

-- One row per instance rewritten by readiness checks, so that /readyz
-- notices when writes fail, not only reads.
CREATE TABLE probe (
    instance text        NOT NULL PRIMARY KEY,
    at       timestamptz NOT NULL
);
