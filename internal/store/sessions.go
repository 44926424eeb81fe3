package store

import (
	"context"
	"errors"
	"time"
)

// RevokeSession implements registry.Store: one row per signed-out
// session, kept until retention passes its until.
func (s *SQL) RevokeSession(ctx context.Context, id string, until time.Time) error {
	if id == "" || !storable(id) {
		return errors.New("store: a session id must be text without NUL")
	}
	if until.IsZero() {
		return errors.New("store: a session revocation needs the time the session ends")
	}
	now := s.Clock()
	// Through a write transaction, as every other write: the embedded
	// store checks there that its file is still the one on disk.
	return s.InTx(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO revoked_sessions (id, revoked_at, expires_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET expires_at = CASE WHEN excluded.expires_at > revoked_sessions.expires_at
				THEN excluded.expires_at ELSE revoked_sessions.expires_at END`,
			id, s.Time(now), s.Time(Micro(until)))
		return err
	})
}

// SessionRevoked implements registry.Store.
func (s *SQL) SessionRevoked(ctx context.Context, id string) (bool, error) {
	if !storable(id) {
		return false, nil // nothing is stored under it
	}
	var n int
	err := s.Read.QueryRow(ctx, `SELECT count(*) FROM revoked_sessions WHERE id = $1`, id).Scan(&n)
	return n > 0, err
}
