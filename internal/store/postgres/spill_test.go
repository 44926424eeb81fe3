package postgres_test

import (
	"os"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

func TestSpillConformance(t *testing.T) {
	url := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; set it to a PostgreSQL URL to run the PostgreSQL store tests")
	}
	storetest.RunSpill(t, func(t *testing.T) registry.SpillStore {
		return open(t, postgres.Options{URL: url, Schema: storetest.PostgresSchema(t, url)})
	})
}
