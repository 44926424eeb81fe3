package postgres

// The statements that name records by key, for their query plans.
const (
	FinishCallSQL = finishCallSQL
	RenewSQL      = renewSQL
)
