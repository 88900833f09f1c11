package lockbroker

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParseAddr(t *testing.T) {
	t.Setenv("LOCKBROKER_ADDR", "")
	for _, c := range []struct{ in, network, addr string }{
		{"", "tcp", "127.0.0.1:7878"},
		{"db1:9000", "tcp", "db1:9000"},
		{"db1", "tcp", "db1:7878"},
		{"[::1]:7000", "tcp", "[::1]:7000"},
		{"[::1]", "tcp", "[::1]:7878"},
		{"/run/lockbroker.sock", "unix", "/run/lockbroker.sock"},
	} {
		network, addr, err := parseAddr(c.in)
		if err != nil || network != c.network || addr != c.addr {
			t.Errorf("%q: %s %s %v", c.in, network, addr, err)
		}
	}
	for _, bad := range []string{"a:b:c", "h:0", "h:70000", "h:"} {
		if _, _, err := parseAddr(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	t.Setenv("LOCKBROKER_PORT", "7000") // gone: refused, not ignored
	if _, _, err := parseAddr(""); !errors.Is(err, ErrInvalid) {
		t.Errorf("LOCKBROKER_PORT alone: %v", err)
	}
}

func TestRequestChecks(t *testing.T) {
	cl := &Client{timeout: time.Second, changed: make(chan struct{})}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"a b", nil}, {"a\nPING", nil}, {"", nil},
		{"n", []Option{Token("bad/token")}},
		{"n", []Option{Keep()}},
		{"n", []Option{Shared(), Limit(2)}},
	} {
		if _, err := cl.Acquire(ctx, c.name, c.opts...); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q %d options: %v", c.name, len(c.opts), err)
		}
	}
	var s settings
	for _, o := range []Option{TTL(1500 * time.Microsecond), Keep(), Token("t-1"), Limit(3)} {
		o(&s)
	}
	if got := s.request("ACQUIRE", "n", -1); got != "ACQUIRE n TTL 2 WAIT -1 KEEP TOKEN t-1 LIMIT 3" {
		t.Errorf("request line %q", got)
	}
}

// The Unix socket and the environment's address and secret
// (docs/clients.md), against the test broker.
func TestUnixSocketFromEnvironment(t *testing.T) {
	e := env(t)
	t.Setenv("LOCKBROKER_ADDR", e.hello.Unix)
	t.Setenv("LOCKBROKER_SECRET", e.hello.Secret)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := Dial(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ready(t, e)
	l, err := cl.Acquire(ctx, name(t, "u"), TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if v := l.Validity(); v < 55*time.Second || v > time.Minute {
		t.Errorf("validity %v", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release: %v", err)
	}
}
