-- What an approval request was filed with (caller snapshot, request
-- catalog and timeout), as JSON; NULL for requests filed before.
ALTER TABLE approvals ADD COLUMN filed BLOB;

-- One row rewritten by readiness checks, so that /readyz notices when
-- writes fail (a full volume), not only reads; pad makes the write need
-- some headroom, so readiness fails before calls do.
CREATE TABLE probe (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    at  INTEGER NOT NULL,
    pad BLOB
);
