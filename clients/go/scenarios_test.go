package lockbroker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// scenarios implements clients/scenarios.json, one function per id.
var scenarios = map[string]func(t *testing.T, e *testEnv){
	"busy_then_granted":             busyThenGranted,
	"try_once":                      tryOnce,
	"wait_times_out":                waitTimesOut,
	"cancel_wait_keeps_other_locks": cancelWaitKeepsOtherLocks,
	"revoke_reaches_lost":           revokeReachesLost,
	"flushall_keeps_or_tells":       flushallKeepsOrTells,
	"redis_stopped":                 redisStopped,
	"broker_paused_client_timeout":  brokerPausedClientTimeout,
	"broker_restarted":              brokerRestarted,
	"same_token_retry":              sameTokenRetry,
	"shared_and_limit":              sharedAndLimit,
	"fill":                          fill,
	"validate_who_extend":           validateWhoExtend,
	"auth_refused":                  authRefused,
	"hostile_server":                hostileServer,
	"many_at_once":                  manyAtOnce,
}

// scenarioIDs reads the ids of clients/scenarios.json, in its order.
func scenarioIDs(t *testing.T) []string {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "clients", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Scenarios []struct{ ID string } }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(f.Scenarios))
	for i, s := range f.Scenarios {
		ids[i] = s.ID
	}
	return ids
}

// Every id in the file has its test here, and every test here an id there.
func TestScenarioCoverage(t *testing.T) {
	seen := map[string]bool{}
	for _, id := range scenarioIDs(t) {
		if seen[id] {
			t.Errorf("scenario %q appears twice in scenarios.json", id)
		}
		seen[id] = true
		if scenarios[id] == nil {
			t.Errorf("scenario %q has no implementation", id)
		}
	}
	for id := range scenarios {
		if !seen[id] {
			t.Errorf("test %q is not a scenario of scenarios.json", id)
		}
	}
}

// TestScenarios runs them in the file's order, against one test world.
func TestScenarios(t *testing.T) {
	e := env(t)
	for _, id := range scenarioIDs(t) {
		if f := scenarios[id]; f != nil {
			t.Run(id, func(t *testing.T) {
				ready(t, e)
				f(t, e)
			})
		}
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, cl *Client, n string, opts ...Option) *Lease {
	t.Helper()
	l, err := cl.Acquire(ctxFor(t, 30*time.Second), n, opts...)
	if err != nil {
		t.Fatalf("acquire %s: %v", n, err)
	}
	return l
}

func mustRelease(t *testing.T, l *Lease) {
	t.Helper()
	if err := l.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("release %s: %v", l.Name(), err)
	}
}

type result struct {
	l   *Lease
	err error
	at  time.Time
}

// background runs an acquire in a goroutine; its result comes on the channel.
func background(f func() (*Lease, error)) chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := f()
		ch <- result{l, err, time.Now()}
	}()
	return ch
}

func await(t *testing.T, ch chan result, limit time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("no result within %v", limit)
	}
	return result{}
}

func isLost(l *Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

func busyThenGranted(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	n := name(t, "n")
	la := mustAcquire(t, a, n)
	ch := background(func() (*Lease, error) { return b.Acquire(ctxFor(t, 30*time.Second), n, Wait(5*time.Second)) })
	eventually(t, 5*time.Second, "B waits in the broker", func() bool { return brokerStat(t, a, "waiters") == 1 })
	select {
	case r := <-ch:
		t.Fatalf("B answered before A's release: %v", r.err)
	default:
	}
	releasedAt := time.Now()
	mustRelease(t, la)
	r := await(t, ch, 5*time.Second)
	if r.err != nil || r.at.Before(releasedAt) {
		t.Fatalf("B: %v at %v (release at %v)", r.err, r.at, releasedAt)
	}
	if r.l.Fence() <= la.Fence() {
		t.Fatalf("B's fence %d is not above A's %d", r.l.Fence(), la.Fence())
	}
	mustRelease(t, r.l)
}

func tryOnce(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	n := name(t, "n")
	la := mustAcquire(t, a, n)
	start := time.Now()
	_, err := b.Acquire(ctxFor(t, 5*time.Second), n, Wait(0))
	if took := time.Since(start); !errors.Is(err, ErrBusy) || took > time.Second {
		t.Fatalf("try once: %v after %v", err, took)
	}
	if ok, err := b.Validate(ctxFor(t, 5*time.Second), n, la.Fence(), la.Token()); !ok || err != nil || isLost(la) {
		t.Fatalf("A no longer holds n: %v %v", ok, err)
	}
	mustRelease(t, la)
}

func waitTimesOut(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	n := name(t, "n")
	la := mustAcquire(t, a, n)
	start := time.Now()
	_, err := b.Acquire(ctxFor(t, 10*time.Second), n, Wait(300*time.Millisecond))
	if took := time.Since(start); !errors.Is(err, ErrBusy) || took < 250*time.Millisecond || took > 2*time.Second {
		t.Fatalf("wait 300 ms: %v after %v", err, took)
	}
	mustRelease(t, la)
}

func cancelWaitKeepsOtherLocks(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	n, m := name(t, "n"), name(t, "m")
	la := mustAcquire(t, a, n)
	lm := mustAcquire(t, b, m)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := background(func() (*Lease, error) { return b.Acquire(ctx, n, Wait(30*time.Second)) })
	time.Sleep(200 * time.Millisecond) // the scenario's own step
	b.mu.Lock()
	sameConn := lm.cn.blocked != nil
	b.mu.Unlock()
	if !sameConn { // else the test would prove nothing of CANCEL
		t.Fatalf("the wait is not on the connection that holds m")
	}
	cancel()
	cancelled := time.Now()
	r := await(t, ch, 5*time.Second)
	if !errors.Is(r.err, ErrCancelled) || !errors.Is(r.err, context.Canceled) || r.at.Sub(cancelled) > 500*time.Millisecond {
		t.Fatalf("cancelled wait: %v after %v", r.err, r.at.Sub(cancelled))
	}
	// m is still held, and listed by LOCKS on its connection.
	locks, err := b.do(ctxFor(t, 5*time.Second), &req{line: "LOCKS", on: lm.cn, multi: true}, false)
	if err != nil || isLost(lm) || len(locks.lines) != 2 || fields(locks.lines[0])[1] != m {
		t.Fatalf("m after the cancel: lost %v, LOCKS %v %v", isLost(lm), locks, err)
	}
	lo := mustAcquire(t, b, name(t, "other"), Wait(0))
	mustRelease(t, lo)
	mustRelease(t, la)
	if h := e.holders(t, n); h != 0 {
		t.Fatalf("n granted on B's behalf: %d holders", h)
	}
	time.Sleep(200 * time.Millisecond) // a grant would be one Redis round trip away
	if h := e.holders(t, n); h != 0 || isLost(lm) {
		t.Fatalf("n granted on B's behalf: %d holders (m lost: %v)", h, isLost(lm))
	}
	mustRelease(t, lm)
}

func revokeReachesLost(t *testing.T, e *testEnv) {
	a := dial(t, e, 5*time.Second)
	n := name(t, "n")
	la := mustAcquire(t, a, n)
	if h := e.do(t, "revoke "+n)["holders"].(float64); h != 1 {
		t.Fatalf("revoke took %v holders", h)
	}
	select {
	case <-la.Lost():
	case <-time.After(100 * time.Millisecond):
		t.Fatalf("no loss within 100 ms of the revoke")
	}
	if la.LostReason() != "revoked" {
		t.Fatalf("reason %q", la.LostReason())
	}
	var lost *LostError
	if err := la.Release(ctxFor(t, 5*time.Second)); !errors.Is(err, ErrNotHeld) || !errors.As(err, &lost) || lost.Reason != "revoked" {
		t.Fatalf("release after revoke: %v", err)
	}
}

func flushallKeepsOrTells(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	la := mustAcquire(t, a, name(t, "n"))
	e.do(t, "flushall")
	lm, err := b.Acquire(ctxFor(t, 5*time.Second), name(t, "m"), Wait(0))
	switch {
	case err == nil:
		mustRelease(t, lm)
	case !errors.Is(err, ErrUnavailable):
		t.Fatalf("try after FLUSHALL: %v", err)
	}
	select {
	case <-la.Lost():
		t.Fatalf("A's lease lost after FLUSHALL: %s", la.LostReason())
	case <-time.After(2 * time.Second):
	}
	mustRelease(t, la)
}

func redisStopped(t *testing.T, e *testEnv) {
	a := dial(t, e, 5*time.Second)
	la := mustAcquire(t, a, name(t, "n"))
	e.do(t, "redis-stop")
	started := false
	defer func() {
		if !started {
			e.do(t, "redis-start")
		}
	}()
	stopped := time.Now()
	_, err := a.Acquire(ctxFor(t, 5*time.Second), name(t, "m"), Wait(0))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy) {
		t.Fatalf("try while Redis is down: %v", err)
	}
	select {
	case <-la.Lost():
	case <-time.After(8*time.Second - time.Since(stopped)):
		t.Fatalf("lease not lost within 8 s of redis-stop")
	}
	if la.LostReason() != "unavailable" {
		t.Fatalf("reason %q", la.LostReason())
	}
	e.do(t, "redis-start")
	started = true
	m2 := name(t, "m2")
	eventually(t, 15*time.Second, "an acquire succeeds after redis-start", func() bool {
		l, err := a.Acquire(ctxFor(t, 5*time.Second), m2, Wait(500*time.Millisecond))
		if err == nil {
			mustRelease(t, l)
		}
		return err == nil
	})
}

func brokerPausedClientTimeout(t *testing.T, e *testEnv) {
	a := dial(t, e, time.Second)
	n := name(t, "n")
	e.do(t, "broker-pause")
	resumed := false
	defer func() {
		if !resumed {
			e.do(t, "broker-resume")
		}
	}()
	start := time.Now()
	_, err := a.Acquire(ctxFor(t, 30*time.Second), n)
	if took := time.Since(start); !(errors.Is(err, ErrTimeout) || errors.Is(err, ErrUnavailable)) || took > 3*time.Second {
		t.Fatalf("acquire on a paused broker: %v after %v", err, took)
	}
	e.do(t, "broker-resume")
	resumed = true
	eventually(t, 5*time.Second, "an acquire succeeds after broker-resume", func() bool {
		l, err := a.Acquire(ctxFor(t, 5*time.Second), n, Wait(time.Second))
		if err == nil {
			mustRelease(t, l)
		}
		return err == nil
	})
}

func brokerRestarted(t *testing.T, e *testEnv) {
	a := dial(t, e, 5*time.Second)
	la := mustAcquire(t, a, name(t, "n"))
	e.do(t, "broker-restart")
	select {
	case <-la.Lost():
	case <-time.After(2 * time.Second):
		t.Fatalf("lease not lost within 2 s of the restart")
	}
	if la.LostReason() != "disconnected" {
		t.Fatalf("reason %q", la.LostReason())
	}
	lm := mustAcquire(t, a, name(t, "m"), Wait(10*time.Second))
	if lm.cn == la.cn {
		t.Fatalf("m on the old connection")
	}
	mustRelease(t, lm)
}

func sameTokenRetry(t *testing.T, e *testEnv) {
	a := dial(t, e, 5*time.Second)
	n, token := name(t, "n"), "go-same-token-"+newToken()[:8]
	l1 := mustAcquire(t, a, n, TTL(30*time.Second), Keep(), Token(token))
	e.do(t, "broker-restart")
	l2 := mustAcquire(t, a, n, TTL(30*time.Second), Keep(), Token(token), Wait(10*time.Second))
	if l2.Fence() != l1.Fence() || l2.Token() != token {
		t.Fatalf("same token again: fence %d, first %d", l2.Fence(), l1.Fence())
	}
	mustRelease(t, l2)
	if h := e.holders(t, n); h != 0 {
		t.Fatalf("%d holders after the release", h)
	}
}

func sharedAndLimit(t *testing.T, e *testEnv) {
	cl := make([]*Client, 6)
	for i := range cl {
		cl[i] = dial(t, e, 5*time.Second)
	}
	s, l := name(t, "s"), name(t, "l")
	la := mustAcquire(t, cl[0], s, Shared())
	lb := mustAcquire(t, cl[1], s, Shared())
	if _, err := cl[2].Acquire(ctxFor(t, 5*time.Second), s, Wait(0)); !errors.Is(err, ErrBusy) {
		t.Fatalf("exclusive on a shared name: %v", err)
	}
	ld := mustAcquire(t, cl[3], l, Limit(2))
	le := mustAcquire(t, cl[4], l, Limit(2))
	if _, err := cl[5].Acquire(ctxFor(t, 5*time.Second), l, Limit(2), Wait(0)); !errors.Is(err, ErrBusy) {
		t.Fatalf("a third of LIMIT 2: %v", err)
	}
	for _, x := range []*Lease{la, lb, ld, le} {
		mustRelease(t, x)
	}
}

func fill(t *testing.T, e *testEnv) {
	a, b := dial(t, e, 5*time.Second), dial(t, e, 5*time.Second)
	f := name(t, "f")
	leader, err := a.Fill(ctxFor(t, 10*time.Second), f)
	if err != nil || leader == nil {
		t.Fatalf("leader: %v %v", leader, err)
	}
	ch := background(func() (*Lease, error) { return b.Fill(ctxFor(t, 30*time.Second), f, Wait(5*time.Second)) })
	// DONE is only for a caller that asked while the leader held it.
	eventually(t, 5*time.Second, "B waits in the broker", func() bool { return brokerStat(t, a, "waiters") == 1 })
	mustRelease(t, leader)
	if r := await(t, ch, 5*time.Second); r.err != nil || r.l != nil {
		t.Fatalf("B's fill: lease %v, %v (want done)", r.l, r.err)
	}
}

func validateWhoExtend(t *testing.T, e *testEnv) {
	a := dial(t, e, 5*time.Second)
	n := name(t, "n")
	ctx := ctxFor(t, 10*time.Second)
	l := mustAcquire(t, a, n, TTL(5*time.Second))
	if ok, err := a.Validate(ctx, n, l.Fence(), ""); !ok || err != nil {
		t.Fatalf("validate fence: %v %v", ok, err)
	}
	hs, err := a.Who(ctx, n)
	if err != nil || len(hs) != 1 || hs[0].Fence != l.Fence() || hs[0].Mode != "EXCLUSIVE" {
		t.Fatalf("who: %+v %v", hs, err)
	}
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if v := l.Validity(); v <= 19*time.Second || v > 20*time.Second {
		t.Fatalf("validity after extend to 20 s: %v", v)
	}
	if ok, err := a.Validate(ctx, n, l.Fence()+1, ""); ok || err != nil {
		t.Fatalf("validate fence+1: %v %v", ok, err)
	}
	mustRelease(t, l)
}

func authRefused(t *testing.T, e *testEnv) {
	cl, err := Dial(ctxFor(t, 10*time.Second), Options{Addr: e.hello.Addr, Secret: "not-the-secret"})
	if err == nil {
		defer cl.Close()
		_, err = cl.Acquire(ctxFor(t, 10*time.Second), name(t, "n"))
	}
	var se *ServerError
	if !errors.Is(err, ErrAuth) || !errors.As(err, &se) || se.Code != "AUTH" {
		t.Fatalf("wrong secret: %v", err)
	}
}

func hostileServer(t *testing.T, e *testEnv) {
	for _, mode := range []string{"garbage", "long", "eof", "silent"} {
		addr := e.do(t, "hostile "+mode)["addr"].(string)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		cl, err := Dial(ctxFor(t, 10*time.Second), Options{Addr: addr, Secret: e.hello.Secret, Timeout: time.Second})
		if err == nil {
			_, err = cl.Acquire(ctxFor(t, 10*time.Second), name(t, "n"))
			cl.Close()
		}
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		want := ErrProtocol
		if mode == "silent" {
			want = ErrTimeout
		}
		if !errors.Is(err, want) || took > 3*time.Second {
			t.Errorf("%s: %v after %v (want %v)", mode, err, took, want)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
			t.Errorf("%s: %d bytes allocated", mode, grew)
		}
	}
}

func manyAtOnce(t *testing.T, e *testEnv) {
	const held, waiters = 1000, 100
	other, b := dial(t, e, 10*time.Second), dial(t, e, 10*time.Second)
	ctx := ctxFor(t, 120*time.Second)

	// The other client holds the names B will wait for.
	theirs := make([]*Lease, waiters)
	for i := range theirs {
		theirs[i] = mustAcquire(t, other, name(t, "w"+itoa(i)))
	}
	// B holds 1000 names, acquired at once.
	mine := make([]*Lease, held)
	var wg sync.WaitGroup
	errs := make(chan error, held)
	for i := range mine {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			if mine[i], err = b.Acquire(ctx, name(t, "h"+itoa(i))); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("holding 1000: %v", err)
	}
	b.mu.Lock()
	t.Logf("1000 held on %d connections", len(b.conns))
	b.mu.Unlock()

	// 100 waiters, each with its own context.
	cancels := make([]context.CancelFunc, waiters)
	results := make([]chan result, waiters)
	for i := range results {
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		n := theirs[i].Name()
		results[i] = background(func() (*Lease, error) { return b.Acquire(wctx, n) })
	}
	eventually(t, 20*time.Second, "100 wait in the broker", func() bool { return brokerStat(t, other, "waiters") == waiters })

	// Cancel half, one by one: each ends cancelled, nothing else moves.
	for i := 0; i < waiters/2; i++ {
		cancels[i]()
		if r := await(t, results[i], 5*time.Second); !errors.Is(r.err, ErrCancelled) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter %d: %v", i, r.err)
		}
	}
	if w := brokerStat(t, other, "waiters"); w != waiters/2 {
		t.Fatalf("%d still waiting, want %d", w, waiters/2)
	}
	for i := waiters / 2; i < waiters; i++ {
		select {
		case r := <-results[i]:
			t.Fatalf("waiter %d ended: %v", i, r.err)
		default:
		}
	}
	for _, l := range mine {
		if isLost(l) {
			t.Fatalf("%s lost: %s", l.Name(), l.LostReason())
		}
	}

	// The other client lets go: the 50 left are granted, the 50 cancelled not.
	for _, l := range theirs {
		mustRelease(t, l)
	}
	for i := waiters / 2; i < waiters; i++ {
		r := await(t, results[i], 10*time.Second)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		mine = append(mine, r.l)
	}
	for i := 0; i < waiters/2; i++ {
		if st, err := b.Status(ctx, theirs[i].Name()); err != nil || st.Held {
			t.Fatalf("cancelled name %d: %+v %v", i, st, err)
		}
	}
	for _, l := range mine {
		wg.Add(1)
		go func(l *Lease) {
			defer wg.Done()
			if err := l.Release(ctx); err != nil {
				t.Errorf("release %s: %v", l.Name(), err)
			}
		}(l)
	}
	wg.Wait()
}

func itoa(i int) string {
	return string(rune('a'+i/26/26%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26))
}
