package postgres

// The statements that name records by key, for their query plans.
var (
	FinishCallSQL = finishCallSQL
	RenewSQL      = renewSQL
)
