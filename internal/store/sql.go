package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Row is one row of a query's answer (*sql.Row, pgx.Row).
type Row interface {
	Scan(dest ...any) error
}

// Rows are the rows of a query's answer (pgx.Rows; *sql.Rows adapted).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Tx runs statements: a write transaction, or a store's pool for reads.
// Each dialect package adapts its driver's. Statements are written with
// numbered parameters ($1, $2, …), which PostgreSQL takes and SQLite
// takes as named ones that modernc.org/sqlite binds by number.
type Tx interface {
	// Exec runs q and returns how many rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	QueryRow(ctx context.Context, q string, args ...any) Row
	Query(ctx context.Context, q string, args ...any) (Rows, error)
}

// Dialect is what the SQL of the two stores differs in, beyond their
// hot write paths.
type Dialect struct {
	// Time is how a time is passed as a parameter; the zero time must be
	// stored as what ScanTime reads as zero.
	Time func(time.Time) any
	// Announce tells other processes sharing the data, within tx (so at
	// its commit), that the calls with keys changed; nil when no other
	// process shares it.
	Announce func(ctx context.Context, tx Tx, keys []string) error
	// Lapsed is the condition on a running call that Interrupt ends, with
	// $1 the time now, $2 the store's instance id and $3 the time it was
	// opened.
	Lapsed string
	// KeepLeased says Interrupt leaves the calls this process holds a
	// lease on, whatever Lapsed says.
	KeepLeased bool
	// ForUpdate locks the rows a SELECT reads until the transaction ends
	// (" FOR UPDATE"); empty where write transactions run one at a time.
	ForUpdate string
}

// KeptArguments is the assignment that ends a call's arguments as a done
// record keeps them: those longer than registry.KeptArgumentsBytes are
// dropped (an empty value), as every statement that ends a call does
// (the stores' FinishCall, a denial, an expiry, an interruption). The
// length of a blob counts bytes in both dialects, without reading it.
var KeptArguments = fmt.Sprintf(`arguments = CASE WHEN length(arguments) > %d THEN substr(arguments, 1, 0) ELSE arguments END`,
	registry.KeptArgumentsBytes)

// SQL is the logic both SQL stores share: reading records, listings,
// deciding and expiring approval requests, interrupting calls, and kept
// outputs. A dialect package builds one and delegates to it; its hot
// write paths (BeginCall, FinishCall, AppendAudit) stay its own.
type SQL struct {
	Dialect
	// Read runs reads, and Write single writes outside a transaction.
	Read, Write Tx
	// InTx runs fn in a write transaction, committed when fn returns nil.
	InTx func(ctx context.Context, fn func(tx Tx) error) error
	// Hub is woken for every call changed, after the commit.
	Hub *Hub
	// Leases are the calls this process runs.
	Leases *Leases
	// ID names this store as the owner of the calls it runs, Opened is
	// when it was opened, and Lease is how long a running call stays
	// claimed without renewal.
	ID     string
	Opened time.Time
	Lease  time.Duration
	// Now is the clock.
	Now func() time.Time
}

// Clock is the time now at the stored precision.
func (s *SQL) Clock() time.Time { return Micro(s.Now()) }

// params numbers query parameters.
type params []any

func (p *params) add(v any) string {
	*p = append(*p, v)
	return "$" + strconv.Itoa(len(*p))
}

func (s *SQL) announce(ctx context.Context, tx Tx, keys ...string) error {
	if s.Announce == nil || len(keys) == 0 {
		return nil
	}
	return s.Announce(ctx, tx, keys)
}

// storable reports whether text columns of both stores can hold every
// one of keys: valid UTF-8 without NUL. PostgreSQL refuses any other
// text, in a lookup as in a write, so that a caller's id path parameter
// or filter holding a NUL failed as if the store were down (503), which
// retrying never cures. Nothing stored is keyed by such text (the API
// refuses it in every id it records), so a lookup of it finds nothing.
func storable(keys ...string) bool {
	for _, k := range keys {
		if !utf8.ValidString(k) || strings.ContainsRune(k, 0) {
			return false
		}
	}
	return true
}

// Call reads a call record as stored.
func (s *SQL) Call(ctx context.Context, q Tx, callerID, toolCallID string) (*registry.CallRecord, error) {
	if !storable(callerID, toolCallID) {
		return nil, registry.ErrNotFound
	}
	return ScanCall(q.QueryRow(ctx, SelectCallSQL, callerID, toolCallID))
}

// GetCall implements registry.Store. A running record whose lease has
// lapsed is ended first, as a waiter ends it (Interrupt), and read again:
// it reads E_INTERRUPTED at once, not running until the retention sweep
// comes, and once a reader was told so the owner, were it alive after
// all, can record nothing else over it.
func (s *SQL) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	rec, err := s.Call(ctx, s.Read, callerID, toolCallID)
	if err != nil {
		return nil, err
	}
	if LeaseLapsed(rec, s.Clock()) {
		if _, err := s.Interrupt(ctx, callerID, toolCallID); err != nil {
			return nil, err
		}
		if rec, err = s.Call(ctx, s.Read, callerID, toolCallID); err != nil {
			return nil, err
		}
	}
	return EffectiveCall(rec, s.Clock()), nil
}

// interruptBatch bounds the calls one transaction of Interrupt ends.
const interruptBatch = 1000

// Interrupt ends running calls that meet Lapsed (and are not leased here,
// with KeepLeased): the one given, or all when toolCallID is "". Each
// update checks Lapsed again, so processes racing to end a call end it
// once.
func (s *SQL) Interrupt(ctx context.Context, callerID, toolCallID string) (int, error) {
	total := 0
	for {
		n, more, err := s.interrupt(ctx, callerID, toolCallID)
		total += n
		if err != nil || !more || n == 0 {
			return total, err
		}
	}
}

// interrupt is one transaction of Interrupt; more says it met the batch
// bound.
func (s *SQL) interrupt(ctx context.Context, callerID, toolCallID string) (int, bool, error) {
	now := s.Clock()
	var ended []string
	var more bool
	err := s.InTx(ctx, func(tx Tx) error {
		ended, more = nil, false
		p := params{s.Time(now), s.ID, s.Time(s.Opened)}
		q := `SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'running' AND ` + s.Lapsed
		if toolCallID != "" {
			q += ` AND caller_id = ` + p.add(callerID) + ` AND tool_call_id = ` + p.add(toolCallID)
		}
		keys, err := scanKeys(tx.Query(ctx, q+` LIMIT `+p.add(interruptBatch), p...))
		if err != nil {
			return err
		}
		more = len(keys) == interruptBatch
		for _, k := range keys {
			if s.KeepLeased && s.Leases.Has(k.caller, k.id) {
				continue // runs here, or its result waits to be recorded
			}
			result, err := EncodeResult(registry.InterruptedResult(k.id, k.tool))
			if err != nil {
				return err
			}
			// By key alone: the state and lease are tested inside a CASE no
			// index serves, or PostgreSQL may combine the key with the
			// partial indexes of running records, whose dead entries it
			// would read whole (see the PostgreSQL store's finishCallSQL).
			n, err := tx.Exec(ctx, `UPDATE calls SET state = 'done', result = $4, owner = '', expires_at = $5, updated_at = $1, `+KeptArguments+`
				WHERE caller_id = $6 AND tool_call_id = $7 AND CASE WHEN state = 'running' THEN `+s.Lapsed+` ELSE false END`,
				s.Time(now), s.ID, s.Time(s.Opened), result, s.Time(time.Time{}), k.caller, k.id)
			if err != nil {
				return err
			}
			if n == 1 {
				ended = append(ended, Key(k.caller, k.id))
			}
		}
		return s.announce(ctx, tx, ended...)
	})
	if err != nil {
		return 0, false, err
	}
	for _, k := range ended {
		s.Hub.Notify(k)
	}
	return len(ended), more, nil
}

// GetApproval implements registry.Store.
func (s *SQL) GetApproval(ctx context.Context, id string) (*registry.Approval, error) {
	if !storable(id) {
		return nil, registry.ErrNotFound
	}
	a, err := ScanApproval(s.Read.QueryRow(ctx, `SELECT `+ApprovalColumns+` FROM approvals WHERE id = $1`, id))
	if err != nil {
		return nil, err
	}
	return EffectiveApproval(a, s.Clock()), nil
}

// approvalsOf is the WHERE conditions of the requests f's Status and
// CallerID select at now, their parameters added to p.
func (s *SQL) approvalsOf(f registry.ApprovalFilter, now time.Time, p *params) []string {
	var where []string
	switch f.Status {
	case "":
	case registry.ApprovalPending:
		where = append(where, `status = 'pending' AND expires_at > `+p.add(s.Time(now)))
	case registry.ApprovalExpired:
		where = append(where, `(status = 'expired' OR (status = 'pending' AND expires_at <= `+p.add(s.Time(now))+`))`)
	default:
		where = append(where, `status = `+p.add(string(f.Status)))
	}
	if f.CallerID != "" {
		where = append(where, `caller_id = `+p.add(f.CallerID))
	}
	return where
}

// CountApprovals implements registry.Store.
func (s *SQL) CountApprovals(ctx context.Context, f registry.ApprovalFilter) (int, error) {
	if !storable(f.CallerID) {
		return 0, nil
	}
	var p params
	q := `SELECT COUNT(*) FROM approvals`
	if where := s.approvalsOf(f, s.Clock(), &p); len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	var n int
	err := s.Read.QueryRow(ctx, q, p...).Scan(&n)
	return n, err
}

// ListApprovals implements registry.Store.
func (s *SQL) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	if !storable(f.CallerID) {
		return nil, nil
	}
	now := s.Clock()
	var p params
	where := s.approvalsOf(f, now, &p)
	if !f.ExpiresAfter.IsZero() {
		where = append(where, `expires_at > `+p.add(s.Time(f.ExpiresAfter)))
	}
	order, beyond := ` ORDER BY created_at, id`, `>`
	if f.Newest {
		order, beyond = ` ORDER BY created_at DESC, id DESC`, `<`
	}
	if c := f.After; c != nil {
		at := p.add(s.Time(c.CreatedAt))
		where = append(where, `(created_at `+beyond+` `+at+` OR (created_at = `+at+` AND id `+beyond+` `+p.add(c.ID)+`))`)
	}
	q := `SELECT ` + listedApprovalColumns + ` FROM approvals`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := s.Read.Query(ctx, q+order+` LIMIT `+p.add(Limit(f.Limit)), p...)
	return collect(rows, err, func(row Row) (*registry.Approval, error) {
		a, err := ScanApproval(row)
		if err != nil {
			return nil, err
		}
		return EffectiveApproval(a, now), nil
	})
}

// ListAudit implements registry.Store.
func (s *SQL) ListAudit(ctx context.Context, f registry.AuditFilter) ([]*registry.AuditEntry, error) {
	if !storable(f.CallerID, f.ToolName) {
		return nil, nil
	}
	var p params
	var where []string
	order := ` ORDER BY id`
	switch {
	case !f.Newest:
		where = append(where, `id > `+p.add(f.AfterID))
	case f.AfterID > 0:
		where = append(where, `id < `+p.add(f.AfterID))
	}
	if f.Newest {
		order = ` ORDER BY id DESC`
	}
	if f.CallerID != "" {
		where = append(where, `caller_id = `+p.add(f.CallerID))
	}
	if f.ToolName != "" {
		where = append(where, `tool_name = `+p.add(f.ToolName))
	}
	if !f.Since.IsZero() {
		where = append(where, `time >= `+p.add(s.Time(f.Since)))
	}
	q := `SELECT ` + AuditColumns + ` FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := s.Read.Query(ctx, q+order+` LIMIT `+p.add(Limit(f.Limit)), p...)
	return collect(rows, err, scanAudit)
}

// InsertApprovalSQL files a pending approval request; its parameters are
// InsertApprovalArgs.
const InsertApprovalSQL = `INSERT INTO approvals (id, caller_id, tool_call_id, tool_name, tier, rule, reason,
	arguments_digest, arguments, context, status, created_at, updated_at, expires_at, filed)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14)`

// InsertApprovalArgs are the parameters of InsertApprovalSQL for a, as
// NewApproval left it, filed at now.
func (s *SQL) InsertApprovalArgs(a *registry.Approval, filed []byte, now time.Time) []any {
	return []any{a.ID, a.CallerID, a.ToolCallID, a.ToolName, string(a.Tier), a.Rule, a.Reason, a.ArgumentsDigest,
		Arguments(a.Arguments), EncodeContext(a.Context), s.Time(a.CreatedAt), s.Time(now), s.Time(a.ExpiresAt), filed}
}

// countPendingSQL counts the pending requests of caller $1 that have not
// expired at $2, up to $3: a caller at its bound need not count the rest.
const countPendingSQL = `SELECT COUNT(*) FROM (SELECT 1 FROM approvals
	WHERE caller_id = $1 AND status = 'pending' AND expires_at > $2 LIMIT $3) AS waiting`

// InsertApprovalWithin files a request of callerID within tx, as
// InsertApprovalSQL with args (InsertApprovalArgs) does, unless the
// caller already has max or more pending requests that have not expired
// at now: then it inserts nothing and returns
// registry.ErrTooManyPending. The stores serialize it per caller
// (registry.PendingLimiter): SQLite runs one write transaction at a
// time; PostgreSQL takes an advisory lock on the caller first.
func (s *SQL) InsertApprovalWithin(ctx context.Context, tx Tx, callerID string, args []any, now time.Time, max int) error {
	var n int
	if err := tx.QueryRow(ctx, countPendingSQL, callerID, s.Time(now), max).Scan(&n); err != nil {
		return err
	}
	if n >= max {
		return fmt.Errorf("%w (%d)", registry.ErrTooManyPending, n)
	}
	_, err := tx.Exec(ctx, InsertApprovalSQL, args...)
	return err
}

// DecideApproval implements registry.Store. The UPDATE … WHERE status =
// 'pending' settles racing decisions (the single SQLite writer runs it
// alone; in PostgreSQL it takes the row lock, and a racing decision then
// finds the row no longer pending), so exactly one wins. The call record
// moves in the same transaction, only when it is pending under this
// request: a request no record waits for is expired instead, and nobody
// wins it.
func (s *SQL) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	status, err := DecidedStatus(v)
	if err != nil {
		return nil, false, err
	}
	if !storable(id) {
		return nil, false, registry.ErrNotFound
	}
	now = Micro(now)
	var (
		a            *registry.Approval
		won, running bool
		expired      []string
	)
	err = s.InTx(ctx, func(tx Tx) error {
		won, running, expired = false, false, nil
		var err error
		a, err = ScanApproval(tx.QueryRow(ctx, `UPDATE approvals
			SET status = $1, decided_at = $2, decided_by = $3, decision_reason = $4, updated_at = $2
			WHERE id = $5 AND status = 'pending' AND expires_at > $2
			RETURNING `+ApprovalColumns, string(status), s.Time(now), by, reason, id))
		if errors.Is(err, registry.ErrNotFound) {
			a, expired, err = s.notDecided(ctx, tx, id, now)
			return err
		}
		if err != nil {
			return err
		}
		won = true
		clock := s.Clock()
		var moved int64
		if status == registry.ApprovalApproved {
			moved, err = tx.Exec(ctx, `UPDATE calls SET state = 'running', result = NULL, owner = $1, expires_at = $2, updated_at = $3
				WHERE caller_id = $4 AND tool_call_id = $5 AND state = 'pending_approval' AND approval_id = $6`,
				s.ID, s.Time(clock.Add(s.Lease)), s.Time(clock), a.CallerID, a.ToolCallID, a.ID)
			if err != nil {
				return err
			}
			running = moved == 1
		} else {
			result, err := EncodeResult(registry.ApprovalDeniedResult(a.ToolCallID, a.ToolName, by, reason))
			if err != nil {
				return err
			}
			if moved, err = tx.Exec(ctx, `UPDATE calls SET state = 'done', result = $1, expires_at = $2, updated_at = $3, `+KeptArguments+`
				WHERE caller_id = $4 AND tool_call_id = $5 AND state = 'pending_approval' AND approval_id = $6`,
				result, s.Time(time.Time{}), s.Time(clock), a.CallerID, a.ToolCallID, a.ID); err != nil {
				return err
			}
		}
		if moved == 0 {
			// No call waits for this request (its record was withdrawn, see
			// WithdrawCall): it runs and ends nothing, and is void.
			won = false
			a, err = ScanApproval(tx.QueryRow(ctx, `UPDATE approvals
				SET status = 'expired', decided_at = $1, decided_by = '', decision_reason = '', updated_at = $1
				WHERE id = $2 RETURNING `+ApprovalColumns, s.Time(now), id))
			return err
		}
		return s.announce(ctx, tx, Key(a.CallerID, a.ToolCallID))
	})
	if err != nil {
		return nil, false, err
	}
	for _, k := range expired {
		s.Hub.Notify(k)
	}
	if won {
		if running {
			s.Leases.Add(a.CallerID, a.ToolCallID)
		}
		s.Hub.Notify(Key(a.CallerID, a.ToolCallID))
	}
	return a, won, nil
}

// AdoptDecision implements registry.DecisionAdopter. The record is still
// the one the decision moved while it is running under the request, owned
// by this store and within its lease: only the decision that wins a
// request moves its record to running, and only FinishCall or an
// interruption moves it on. The decision is the caller's when the request
// reads approved by it at decidedAt. Claiming the lease first makes two
// adoptions of one call (and an adoption of a call that runs here) adopt
// it once.
func (s *SQL) AdoptDecision(ctx context.Context, id, by string, decidedAt time.Time) (*registry.Approval, bool, error) {
	if !storable(id) {
		return nil, false, nil
	}
	a, err := ScanApproval(s.Read.QueryRow(ctx, `SELECT `+ApprovalColumns+` FROM approvals WHERE id = $1`, id))
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if a.Status != registry.ApprovalApproved || a.DecidedBy != by || !a.DecidedAt.Equal(Micro(decidedAt)) {
		return EffectiveApproval(a, s.Clock()), false, nil
	}
	if !s.Leases.Claim(a.CallerID, a.ToolCallID) {
		return a, false, nil // it runs here already
	}
	var n int64
	err = s.InTx(ctx, func(tx Tx) error {
		clock := s.Clock()
		var err error
		n, err = tx.Exec(ctx, `UPDATE calls SET expires_at = $1
			WHERE caller_id = $2 AND tool_call_id = $3
				AND CASE state WHEN 'running' THEN owner = $4 AND approval_id = $5 AND expires_at > $6 ELSE false END`,
			s.Time(clock.Add(s.Lease)), a.CallerID, a.ToolCallID, s.ID, a.ID, s.Time(clock))
		return err
	})
	if err != nil || n != 1 {
		s.Leases.Remove(a.CallerID, a.ToolCallID)
		return a, false, err
	}
	return a, true, nil
}

// WithdrawCall implements registry.Store. The record goes only while its
// request is not there: when the request's write committed after all, the
// record stays, as that request's call.
func (s *SQL) WithdrawCall(ctx context.Context, callerID, toolCallID, approvalID string) (bool, error) {
	var n int64
	err := s.InTx(ctx, func(tx Tx) error {
		// The record's lock first: a request filed again at the same time
		// (RefileApproval) holds it until its insert commits, and the
		// DELETE, a statement of its own, then sees that request.
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM calls WHERE caller_id = $1 AND tool_call_id = $2`+s.ForUpdate,
			callerID, toolCallID).Scan(&one)
		if errors.Is(found(err), registry.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		n, err = tx.Exec(ctx, `DELETE FROM calls WHERE caller_id = $1 AND tool_call_id = $2
				AND CASE state WHEN 'pending_approval' THEN approval_id = $3 ELSE false END
				AND NOT EXISTS (SELECT 1 FROM approvals WHERE id = $3)`,
			callerID, toolCallID, approvalID)
		if err != nil || n == 0 {
			return err
		}
		return s.announce(ctx, tx, Key(callerID, toolCallID))
	})
	if err != nil {
		return false, err
	}
	if n == 1 {
		s.Hub.Notify(Key(callerID, toolCallID))
	}
	return n == 1, nil
}

// RefileApproval implements registry.ApprovalRefiler: it files a's
// request only while the call's record is pending under a.ID, holding the
// record's lock (see WithdrawCall) until the insert commits.
func (s *SQL) RefileApproval(ctx context.Context, a *registry.Approval) error {
	now := s.Clock()
	filed, err := NewApproval(a, now)
	if err != nil {
		return err
	}
	return s.InTx(ctx, func(tx Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM calls WHERE caller_id = $1 AND tool_call_id = $2
				AND state = 'pending_approval' AND approval_id = $3`+s.ForUpdate,
			a.CallerID, a.ToolCallID, a.ID).Scan(&one)
		if errors.Is(found(err), registry.ErrNotFound) {
			return fmt.Errorf("%w: no record of call %s waits for request %s", registry.ErrNotFound, a.ToolCallID, a.ID)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, InsertApprovalSQL, s.InsertApprovalArgs(a, filed, now)...)
		return err
	})
}

// notDecided answers a decision that found no pending, unexpired request:
// it expires a request that is past its time, and returns the request as
// it stands and the keys of the calls it ended.
func (s *SQL) notDecided(ctx context.Context, tx Tx, id string, now time.Time) (*registry.Approval, []string, error) {
	a, err := ScanApproval(tx.QueryRow(ctx, `SELECT `+ApprovalColumns+` FROM approvals WHERE id = $1`, id))
	if err != nil || a.Status != registry.ApprovalPending {
		return a, nil, err
	}
	keys, err := s.expire(ctx, tx, now, id)
	if err != nil {
		return nil, nil, err
	}
	return EffectiveApproval(a, now), keys, nil
}

// expire moves pending requests (one, when id is given) whose expiry is at
// or before now to expired, and their pending calls (up to 1000; the rest
// at the next sweep) to done, each update conditional and announced at
// commit. It returns the keys of the calls it ended, for waking local
// waiters after the commit.
func (s *SQL) expire(ctx context.Context, tx Tx, now time.Time, id string) ([]string, error) {
	p := params{s.Time(now)}
	cond := ``
	if id != "" {
		cond = ` AND id = ` + p.add(id)
	}
	if _, err := tx.Exec(ctx, `UPDATE approvals SET status = 'expired', decided_at = expires_at, updated_at = $1
		WHERE status = 'pending' AND expires_at <= $1`+cond, p...); err != nil {
		return nil, err
	}
	p = params{s.Time(now)}
	cond = ``
	if id != "" {
		cond = ` AND approval_id = ` + p.add(id)
	}
	keys, err := scanKeys(tx.Query(ctx, `SELECT caller_id, tool_call_id, tool_name FROM calls
		WHERE state = 'pending_approval' AND expires_at <= $1`+cond+` LIMIT 1000`, p...))
	if err != nil {
		return nil, err
	}
	ended := make([]string, 0, len(keys))
	for _, k := range keys {
		result, err := EncodeResult(registry.ApprovalExpiredResult(k.id, k.tool))
		if err != nil {
			return nil, err
		}
		n, err := tx.Exec(ctx, `UPDATE calls SET state = 'done', result = $1, expires_at = $2, updated_at = $3, `+KeptArguments+`
			WHERE caller_id = $4 AND tool_call_id = $5 AND state = 'pending_approval'`,
			result, s.Time(time.Time{}), s.Time(now), k.caller, k.id)
		if err != nil {
			return nil, err
		}
		if n == 1 {
			ended = append(ended, Key(k.caller, k.id))
		}
	}
	return ended, s.announce(ctx, tx, ended...)
}

// ExpireApprovals implements registry.Store.
func (s *SQL) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	now = Micro(now)
	var n int
	var keys []string
	err := s.InTx(ctx, func(tx Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_at <= $1`, s.Time(now)).Scan(&n); err != nil {
			return err
		}
		var err error
		keys, err = s.expire(ctx, tx, now, "")
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		s.Hub.Notify(k)
	}
	return n, nil
}
