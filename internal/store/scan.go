package store

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The columns ScanCall, ScanApproval and scanAudit read, in their order.
const (
	CallColumns = `caller_id, tool_call_id, tool_name, arguments_digest, arguments, context, state, result,
	approval_id, owner, created_at, updated_at, expires_at, trace_id`
	ApprovalColumns = `id, caller_id, tool_call_id, tool_name, tier, rule, reason, arguments_digest, arguments, context,
	status, created_at, expires_at, decided_at, decided_by, decision_reason, filed, length(arguments)`

	AuditColumns = `id, time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
	status, code, duration_ms, arguments_digest, issuer, subject`
)

// listedApprovalColumns are ApprovalColumns for a list: arguments longer
// than registry.ListedArgumentsBytes are left out (NULL), their length
// still given, and so is the filing (Filed is nil). No reader of a list
// runs a call, and a token caller's filing holds all its claims: reading
// them for every request listed made each filing, console poll and GET
// /approvals slower as requests waited. GetApproval reads the filing.
var listedApprovalColumns = strings.NewReplacer(
	"arguments_digest, arguments,", fmt.Sprintf("arguments_digest, CASE WHEN length(arguments) > %d THEN NULL ELSE arguments END,", registry.ListedArgumentsBytes),
	"decision_reason, filed,", "decision_reason, NULL,",
).Replace(ApprovalColumns)

// SelectCallSQL reads one call record by its key.
const SelectCallSQL = `SELECT ` + CallColumns + ` FROM calls WHERE caller_id = $1 AND tool_call_id = $2`

// found maps a row that is not there (database/sql's ErrNoRows, which
// pgx's wraps) to registry.ErrNotFound.
func found(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return registry.ErrNotFound
	}
	return err
}

// ScanTime returns a scan destination for a stored time: microseconds
// since the epoch (SQLite), a time.Time (PostgreSQL, through pgx's
// database/sql support), and 0 or NULL for the zero time. Times read are
// UTC.
func ScanTime(t *time.Time) sql.Scanner { return (*timeDest)(t) }

type timeDest time.Time

func (d *timeDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d = timeDest{}
	case int64:
		if v == 0 {
			*d = timeDest{}
		} else {
			*d = timeDest(time.UnixMicro(v).UTC())
		}
	case time.Time:
		*d = timeDest(v.UTC())
	default:
		return fmt.Errorf("store: a stored time is %T, want microseconds, a time or NULL", v)
	}
	return nil
}

// ScanCall reads a row of CallColumns; no row is registry.ErrNotFound.
func ScanCall(row Row) (*registry.CallRecord, error) {
	var (
		c                     registry.CallRecord
		args, ctxJSON, result []byte
	)
	err := row.Scan(&c.CallerID, &c.ToolCallID, &c.ToolName, &c.ArgumentsDigest, &args, &ctxJSON, &c.State, &result,
		&c.ApprovalID, &c.Owner, ScanTime(&c.CreatedAt), ScanTime(&c.UpdatedAt), ScanTime(&c.ExpiresAt), &c.TraceID)
	if err != nil {
		return nil, found(err)
	}
	if err := DecodeCall(&c, args, ctxJSON, result); err != nil {
		return nil, err
	}
	return &c, nil
}

// DecodeCall sets the fields of c that are stored encoded: its arguments,
// context and result.
func DecodeCall(c *registry.CallRecord, args, ctxJSON, result []byte) error {
	var err error
	c.Arguments = args
	if c.Context, err = DecodeContext(ctxJSON); err != nil {
		return err
	}
	c.Result, err = DecodeResult(result)
	return err
}

// ScanApproval reads a row of ApprovalColumns; no row is
// registry.ErrNotFound.
func ScanApproval(row Row) (*registry.Approval, error) {
	var (
		a                    registry.Approval
		args, ctxJSON, filed []byte
	)
	err := row.Scan(&a.ID, &a.CallerID, &a.ToolCallID, &a.ToolName, &a.Tier, &a.Rule, &a.Reason, &a.ArgumentsDigest,
		&args, &ctxJSON, &a.Status, ScanTime(&a.CreatedAt), ScanTime(&a.ExpiresAt), ScanTime(&a.DecidedAt),
		&a.DecidedBy, &a.DecisionReason, &filed, &a.ArgumentsBytes)
	if err != nil {
		return nil, found(err)
	}
	a.Arguments = args
	if a.Context, err = DecodeContext(ctxJSON); err != nil {
		return nil, err
	}
	if a.Filed, err = DecodeFiling(filed); err != nil {
		return nil, err
	}
	return &a, nil
}

// scanAudit reads a row of AuditColumns.
func scanAudit(row Row) (*registry.AuditEntry, error) {
	var e registry.AuditEntry
	err := row.Scan(&e.ID, ScanTime(&e.Time), &e.Event, &e.CallerID, &e.ToolCallID, &e.ToolName, &e.Tier, &e.Decision, &e.Rule,
		&e.Status, &e.Code, &e.DurationMs, &e.ArgumentsDigest, &e.Issuer, &e.Subject)
	return &e, err
}

// callKey is a call found for an update: its key and tool.
type callKey struct{ caller, id, tool string }

// scanKeys reads the answer of a query for caller_id, tool_call_id,
// tool_name.
func scanKeys(rows Rows, err error) ([]callKey, error) {
	return collect(rows, err, func(row Row) (callKey, error) {
		var k callKey
		return k, row.Scan(&k.caller, &k.id, &k.tool)
	})
}

// collect reads every row of a query's answer (rows, or its error) with
// scan, and closes the rows; no row is an empty slice.
func collect[T any](rows Rows, err error, scan func(Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Table is a table a store uses, with every column it reads or writes.
type Table struct{ Name, Columns string }

// Tables are the tables both stores use, each with every column they
// read or write; probeColumns are those of the store's own probe table.
// A store checks them at start, so that a schema missing one (dropped or
// renamed by hand after its migration) fails the start, naming it.
func Tables(probeColumns string) []Table {
	return []Table{
		{"calls", CallColumns},
		{"approvals", `id, caller_id, tool_call_id, tool_name, tier, rule, reason, arguments_digest, arguments, context,
		status, created_at, updated_at, expires_at, decided_at, decided_by, decision_reason, filed`},
		{"audit", AuditColumns},
		{"probe", probeColumns},
		{"spills", `id, caller_id, tool_call_id, stream, tool_name, total_bytes, stored_bytes, complete, created_at, expires_at`},
		{"spill_chunks", `spill_id, seq, data`},
		{"revoked_sessions", `id, revoked_at, expires_at`},
	}
}
