package postgres_test

import (
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestPendingLimitHoldsAcrossReplicas: callers filing approval requests
// at the same moment through three replicas, each store wrapped as the
// service wraps it (store.WithDeadline), cannot pass their bound on
// waiting requests.
func TestPendingLimitHoldsAcrossReplicas(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	var replicas []registry.Store
	for range 3 {
		replicas = append(replicas, store.WithDeadline(open(t, postgres.Options{URL: url, Schema: schema, MaxConns: 8}), 5*time.Second))
	}
	storetest.RunPendingLimit(t, replicas...)
}
