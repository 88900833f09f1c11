package lockbroker

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestTLS is run by tests/e2e/test_tls.py against a broker's TLS listener
// (LB_TLS_ADDR) whose identity "billing" is the certificate LB_TLS_CERT:
// a lock under billing/ as that identity, DENIED outside it, and a broker
// certificate of another CA (LB_TLS_ROGUE_CA) refused as unavailable.
// Without LB_TLS_ADDR (the scenarios' runs) it is skipped.
func TestTLS(t *testing.T) {
	addr := os.Getenv("LB_TLS_ADDR")
	if addr == "" {
		t.Skip("LB_TLS_ADDR not set: tests/e2e/test_tls.py runs this")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := Dial(ctx, Options{Addr: addr, CA: os.Getenv("LB_TLS_CA"),
		Cert: os.Getenv("LB_TLS_CERT"), Key: os.Getenv("LB_TLS_KEY")})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer cl.Close()
	lease, err := cl.Acquire(ctx, "billing/go", Wait(5*time.Second))
	if err != nil {
		t.Fatalf("acquire billing/go: %v", err)
	}
	if lease.Fence() == 0 {
		t.Fatalf("fence 0")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := cl.Acquire(ctx, "orders/go", Wait(0)); err == nil ||
		!strings.Contains(err.Error(), "DENIED") {
		t.Fatalf("orders/go: want DENIED, got %v", err)
	}
	_, err = Dial(ctx, Options{Addr: addr, CA: os.Getenv("LB_TLS_ROGUE_CA"),
		Timeout: 5 * time.Second})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("another CA: want ErrUnavailable (TLS), got %v", err)
	}
}
