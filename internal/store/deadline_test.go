package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// hanging is a real store whose session methods wait for their context,
// as on a database that stopped answering.
type hanging struct{ registry.Store }

func (hanging) RevokeSession(ctx context.Context, id string, until time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hanging) SessionRevoked(ctx context.Context, id string) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}

// TestSessionMethodsHaveDeadlines: the console's session check and
// sign-out fail after the store's deadline, even under a context that
// never ends (sign-out's outlives the browser).
func TestSessionMethodsHaveDeadlines(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := store.WithDeadline(hanging{st}, 100*time.Millisecond)
	ctx := context.WithoutCancel(t.Context())
	for name, op := range map[string]func() error{
		"RevokeSession": func() error { return s.RevokeSession(ctx, "sess", time.Now().Add(time.Hour)) },
		"SessionRevoked": func() error {
			_, err := s.SessionRevoked(ctx, "sess")
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- op() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a store that does not answer = %v; want the deadline's error", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s on a store that does not answer still waits after 10s; want it ended at the 100ms deadline", name)
		}
	}
}
