package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
)

// Key names a call record in notifications: the hex SHA-256 of the caller
// id and the toolCallId, so it is short and safe in any channel payload.
func Key(callerID, toolCallID string) string {
	h := sha256.New()
	// Length-prefixed, so no two (caller, id) pairs share an encoding.
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(callerID))))
	h.Write([]byte(callerID))
	h.Write([]byte(toolCallID))
	return hex.EncodeToString(h.Sum(nil))
}

// Hub wakes the goroutines of this process that wait for a call record to
// change. Stores notify it after every committed change of a call's state;
// a notification is only a hint to read the record again.
type Hub struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{waiters: make(map[string]map[chan struct{}]struct{})}
}

// Subscribe returns a channel that receives a value when key is notified
// after this call, and a function that ends the subscription.
func (h *Hub) Subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	set := h.waiters[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.waiters[key] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if set := h.waiters[key]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(h.waiters, key)
			}
		}
	}
}

// Notify wakes every subscriber of key.
func (h *Hub) Notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[key] {
		wake(ch)
	}
}

// NotifyAll wakes every subscriber, for when notifications may have been
// missed (a notification channel reconnected).
func (h *Hub) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for ch := range set {
			wake(ch)
		}
	}
}

// Waiting returns the number of subscriptions.
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.waiters {
		n += len(set)
	}
	return n
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
