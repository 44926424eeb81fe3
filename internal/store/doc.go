// Package store holds what the implementations of registry.Store share and
// what the main program runs beside them: the SQL both stores run (SQL,
// written once over the Tx interface, with what differs in a Dialect) and
// the row scanners, group commit (Committer), the records both stores
// write (NewCall, NewApproval, NewAudit), waking waiters on a call (Hub
// and Wait), tracking the leases of the calls a process runs (Leases),
// reading expiry at read time, reading a kept output's range (SpillRead),
// the migration file layout, and the retention loop (RunRetention). The
// embedded store is in store/sqlite, the PostgreSQL store in
// store/postgres, and one conformance suite for both in store/storetest.
package store
