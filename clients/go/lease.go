package lockbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Option is an option of Acquire and Fill.
type Option func(*settings)

type settings struct {
	wait    time.Duration
	waitSet bool
	ttl     time.Duration
	shared  bool
	limit   int
	keep    bool
	token   string
}

// Wait bounds the wait for the lock: 0 tries once, a negative d waits
// until granted. Without it, Acquire waits until granted or until ctx's
// deadline, whichever is first; ctx cancels the wait in every case.
func Wait(d time.Duration) Option { return func(s *settings) { s.wait, s.waitSet = d, true } }

// TTL makes a fixed lease of d (rounded up to ms) instead of a session
// lock, which the broker renews while its connection lives.
func TTL(d time.Duration) Option { return func(s *settings) { s.ttl = d } }

// Shared asks for a reader's place: any number of Shared holders together.
func Shared() Option { return func(s *settings) { s.shared = true } }

// Limit asks for one of n places (a semaphore: LIMIT n, 1 <= n <= 10000).
func Limit(n int) Option { return func(s *settings) { s.limit = n } }

// Keep makes the lease outlive its connection (needs TTL): only its token
// releases it before its TTL ends. Without Token the library makes one,
// so that a retry after a broken connection finds the same grant.
func Keep() Option { return func(s *settings) { s.keep = true } }

// Token acquires under the caller's token: asking again with the token
// that holds the lock gets the same grant (same fence) back.
func Token(t string) Option { return func(s *settings) { s.token = t } }

// request builds the ACQUIRE or FILL line, with the wait left in ms (-1:
// until granted).
func (s *settings) request(verb, name string, wait int64) string {
	var b strings.Builder
	b.WriteString(verb + " " + name)
	if s.ttl > 0 {
		fmt.Fprintf(&b, " TTL %d", msUp(s.ttl))
	}
	fmt.Fprintf(&b, " WAIT %d", wait)
	if s.keep {
		b.WriteString(" KEEP")
	}
	if s.token != "" {
		b.WriteString(" TOKEN " + s.token)
	}
	if s.shared {
		b.WriteString(" SHARED")
	}
	if s.limit != 0 {
		fmt.Fprintf(&b, " LIMIT %d", s.limit)
	}
	return b.String()
}

func (s *settings) check(verb, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if s.token != "" {
		if err := checkToken(s.token); err != nil {
			return err
		}
	}
	switch {
	case s.keep && s.ttl <= 0:
		return fmt.Errorf("%w: Keep needs TTL", ErrInvalid)
	case s.shared && s.limit != 0:
		return fmt.Errorf("%w: Shared and Limit exclude each other", ErrInvalid)
	case s.limit < 0 || s.limit > 10000:
		return fmt.Errorf("%w: Limit wants 1-10000", ErrInvalid)
	case verb == "FILL" && (s.shared || s.limit != 0 || s.keep):
		return fmt.Errorf("%w: Fill takes no Shared, Limit or Keep", ErrInvalid)
	}
	return nil
}

// Acquire takes the lock name. It returns the lease, or ErrBusy when the
// wait ran out, or a cancellation error (ErrCancelled, and ctx.Err()) when
// ctx ended the wait: the wait is then cancelled on its connection (CANCEL),
// which keeps that connection's other locks. After a broken connection the
// request is sent once more on another, with the same token.
func (cl *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return cl.acquire(ctx, "ACQUIRE", name, opts)
}

// Fill is single-flight (FILL): the first caller gets a lease and does the
// work, then Releases; the callers that waited for it get a nil lease and
// a nil error (DONE): the work is done. A caller of a leader that failed
// instead (its lease lost) becomes the next leader.
func (cl *Client) Fill(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return cl.acquire(ctx, "FILL", name, opts)
}

func (cl *Client) acquire(ctx context.Context, verb, name string, opts []Option) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, &cancelError{err}
	}
	var s settings
	for _, o := range opts {
		o(&s)
	}
	if err := s.check(verb, name); err != nil {
		return nil, err
	}
	ownToken := s.keep && s.token == ""
	if ownToken {
		s.token = newToken()
	}
	wait := time.Duration(-1)
	if s.waitSet && s.wait >= 0 {
		wait = s.wait
	}
	if dl, ok := ctx.Deadline(); ok && (wait < 0 || time.Until(dl) < wait) {
		if wait = time.Until(dl); wait < 0 {
			wait = 0
		}
	}
	until := time.Now().Add(wait)
	for try := 0; ; try++ {
		w := int64(-1)
		if wait >= 0 {
			if w = msUp(time.Until(until)); w < 0 || try == 0 && wait == 0 {
				w = 0
			}
		}
		l, err := cl.acquireOnce(ctx, verb, name, &s, w)
		if err != nil && try == 0 && retryable(err) && ctx.Err() == nil {
			continue // same line, same token: the same grant, or the old one ended with its connection
		}
		if err != nil && ownToken && outcomeUnknown(err) {
			go cl.giveBack(name, s.token, s.ttl)
		}
		return l, err
	}
}

// outcomeUnknown: the request may have been granted unseen.
func outcomeUnknown(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrProtocol)
}

// acqInfo is what the reader needs to make a lease of a grant.
type acqInfo struct {
	name          string
	session, keep bool
	sent          time.Time
}

// acquireOnce sends one ACQUIRE or FILL with the wait w (ms, -1: until
// granted) and waits for its answer.
func (cl *Client) acquireOnce(ctx context.Context, verb, name string, s *settings, w int64) (*Lease, error) {
	a := &acqInfo{name: name, session: s.ttl <= 0, keep: s.keep}
	cn, c, err := cl.send(ctx, &req{line: s.request(verb, name, w), name: name, blocking: w != 0, acq: a,
		prepare: func(*conn, *call) { a.sent = time.Now() }})
	if err == nil {
		err = cl.awaitWait(ctx, cn, c, w)
	}
	if err != nil {
		return nil, err
	}
	switch reply := c.lines[0]; {
	case c.lease != nil:
		return c.lease, nil
	case reply == "TIMEOUT":
		return nil, cl.busy(name, w)
	case reply == "DONE" && verb == "FILL":
		return nil, nil
	case reply == "CANCELLED":
		return nil, ErrCancelled
	default:
		return nil, replyError(reply)
	}
}

// awaitWait waits for the answer to a waiting request: its wait and
// Options.Timeout more; meanwhile it asks now and then whether the broker
// still answers at all (a PING on another connection), so that a frozen
// broker fails a long wait within about 1.5 × Timeout. ctx ends the wait with CANCEL.
func (cl *Client) awaitWait(ctx context.Context, cn *conn, c *call, w int64) error {
	var limit, tick <-chan time.Time
	if w >= 0 {
		t := time.NewTimer(ms(uint64(w)) + cl.timeout)
		defer t.Stop()
		limit = t.C
	}
	if w < 0 || ms(uint64(w)) > cl.timeout/4 {
		t := time.NewTicker(cl.timeout / 4)
		defer t.Stop()
		tick = t.C
	}
	var alive chan error
	for {
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return cl.cancelWait(cn, c, ctx.Err())
		case <-limit:
			cn.kill(fmt.Errorf("%w: no reply within the wait and %v", ErrTimeout, cl.timeout))
			<-c.done
			return c.err
		case <-tick:
			if alive == nil {
				alive = make(chan error, 1)
				go func() { alive <- cl.alive() }()
			}
		case err := <-alive:
			alive = nil
			if errors.Is(err, ErrTimeout) {
				cn.kill(fmt.Errorf("%w: the broker answers no PING", ErrTimeout))
				<-c.done
				return c.err
			}
		}
	}
}

// cancelWait ends a wait that ctx cancelled: CANCEL right behind it on its
// connection (closing it would end its other session locks). A grant the
// broker sent before it read CANCEL is released: nobody wants it now.
func (cl *Client) cancelWait(cn *conn, c *call, cause error) error {
	cn.mu.Lock()
	if !c.popped {
		cn.write(newCall("CANCEL"))
	}
	cn.mu.Unlock()
	t := time.NewTimer(cl.timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		cn.kill(fmt.Errorf("%w: no answer to CANCEL", ErrTimeout))
		<-c.done
	}
	if c.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cl.timeout)
		defer cancel()
		c.lease.Release(ctx)
	}
	return &cancelError{cause}
}

// busy is the answer to TIMEOUT. A wait that ran out while the broker
// could not reach Redis is answered TIMEOUT too, so STATUS tells the two
// apart (docs/clients.md): ERR UNAVAILABLE there is an outage, not a busy
// lock.
func (cl *Client) busy(name string, w int64) error {
	if w != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cl.timeout)
		defer cancel()
		if _, err := cl.Status(ctx, name); errors.Is(err, ErrUnavailable) {
			return err
		}
	}
	return ErrBusy
}

// giveBack releases, in the background, a kept grant under a token this
// library made whose answer was lost (ERR UNAVAILABLE, a timeout): the
// broker does so for tokens it makes, never for a client's. It tries for
// as long as the grant could last, with a growing pause.
func (cl *Client) giveBack(name, token string, ttl time.Duration) {
	end := time.Now().Add(ttl)
	for pause := 100 * time.Millisecond; time.Now().Before(end); pause *= 2 {
		ctx, cancel := context.WithTimeout(context.Background(), cl.timeout)
		lines, err := cl.line(ctx, "RELEASE "+name+" TOKEN "+token, false, false)
		cancel()
		if err == nil && !errors.Is(replyError(lines[0]), ErrUnavailable) || errors.Is(err, ErrClosed) {
			return
		}
		time.Sleep(pause)
	}
}

// Lease is one grant: its fence, token, validity, and a signal when lost.
type Lease struct {
	cl            *Client
	name, token   string
	fence         uint64
	session, keep bool
	lost, ended   chan struct{} // closed when lost; when lost or released

	// Under cl.mu:
	cn     *conn
	ttl    time.Duration // the lease's length, as last granted or extended
	end    time.Time     // a TTL lease's validity end, on our clock
	state  int
	reason string
}

const (
	held = iota
	released
	lost
)

// lease makes a Lease of "OK <fence> <ttl_ms> <token>", under cl.mu.
func (a *acqInfo) lease(cl *Client, cn *conn, line string) (*Lease, error) {
	f := fields(line)
	if len(f) == 4 {
		fence, err1 := strconv.ParseUint(f[1], 10, 64)
		ttl, err2 := strconv.ParseUint(f[2], 10, 62)
		if err1 == nil && err2 == nil && checkToken(f[3]) == nil {
			l := &Lease{cl: cl, cn: cn, name: a.name, token: f[3], fence: fence,
				session: a.session, keep: a.keep, ttl: ms(ttl),
				lost: make(chan struct{}), ended: make(chan struct{})}
			l.end = validityEnd(a.sent, l.ttl)
			return l, nil
		}
	}
	return nil, protoError("bad grant " + quote(line))
}

// validityEnd is the broker's own bound (docs/protocol.md §3, Validity):
// from before the request was sent, less the default clock drift (1 %)
// and 2 ms.
func validityEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/100 - 2*time.Millisecond)
}

// Name is the lock's name.
func (l *Lease) Name() string { return l.name }

// Fence is the grant's fence: send it with every write to the resource.
func (l *Lease) Fence() uint64 { return l.fence }

// Token is the grant's token: Acquire with Token(it) gets this grant back.
func (l *Lease) Token() string { return l.token }

// Validity is how long the lease is surely still held, by this process's
// clock: for a TTL lease, what is left of it (counted from before the
// request that set it was sent, as the broker counts); for a session lease,
// which the broker renews while its connection lives, one lease length.
// 0 once it is lost or released.
func (l *Lease) Validity() time.Duration {
	l.cl.mu.Lock()
	defer l.cl.mu.Unlock()
	switch {
	case l.state != held:
		return 0
	case l.session:
		return l.ttl
	}
	if d := time.Until(l.end); d > 0 {
		return d
	}
	return 0
}

// Lost is closed when the lease is lost: EVENT LOST from the broker, or its
// connection broke. LostReason says why.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// LostReason is the reason of the loss (expired, stolen, unavailable,
// maxhold, revoked; disconnected; closed), or "" while it is not lost.
func (l *Lease) LostReason() string {
	l.cl.mu.Lock()
	defer l.cl.mu.Unlock()
	return l.reason
}

// Context returns a context of parent that is cancelled when the lease is
// lost or released: run the work under the lock with it.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-l.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// lose ends the lease with a reason, under cl.mu.
func (cl *Client) lose(l *Lease, reason string) {
	if l.cn != nil && !l.cn.dead && l.cn.names[l.name] == l {
		delete(l.cn.names, l.name)
	}
	if l.state == held {
		l.state, l.reason = lost, reason
		close(l.lost)
		close(l.ended)
	}
}

// gone is, under cl.mu, the error for a lease no longer held, or nil.
func (l *Lease) gone() error {
	switch l.state {
	case lost:
		return &LostError{Name: l.name, Fence: l.fence, Reason: l.reason}
	case released:
		return fmt.Errorf("%w: %s was released", ErrNotHeld, l.name)
	}
	return nil
}

// Release gives the lock up (RELEASE, on its own connection if that is not
// waiting, else with its token on another). ErrNotHeld if the broker says
// the token no longer held it; a *LostError if it was lost before. A kept
// lease whose connection broke is still released by its token.
func (l *Lease) Release(ctx context.Context) error {
	cl := l.cl
	cl.mu.Lock()
	err := l.gone()
	keptAway := l.keep && l.reason == "disconnected"
	if err == nil {
		l.state = released
		close(l.ended)
	}
	cl.mu.Unlock()
	if err != nil && !keptAway {
		return err
	}
	own, byToken := l.cn, "RELEASE "+l.name+" TOKEN "+l.token
	r := &req{line: "RELEASE " + l.name, on: own, alt: byToken, prepare: func(_ *conn, c *call) {
		// The name stays taken on its connection until the broker has
		// forgotten the hold, or an ACQUIRE of it there would be ERR HELD.
		if !own.dead && own.names[l.name] == l {
			own.names[l.name] = nil
			c.unres, c.name = own, l.name
		}
	}}
	if keptAway {
		r = &req{line: byToken}
	}
	c, err := cl.do(ctx, r, true)
	if err != nil {
		return err
	}
	if c.lines[0] != "OK" {
		return replyError(c.lines[0])
	}
	return nil
}

// Extend sets a TTL lease to d from now (EXTEND; it replaces what is left).
// A shorter lease is trusted from the moment it is sent. A session lease
// is renewed by the broker and cannot be extended (ErrInvalid).
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	if l.session {
		return fmt.Errorf("%w: a session lease is renewed by the broker; Extend is for TTL leases", ErrInvalid)
	}
	cl, n := l.cl, msUp(d)
	sent := time.Now()
	cl.mu.Lock()
	err := l.gone()
	if end := validityEnd(sent, ms(uint64(n))); end.Before(l.end) {
		l.end = end
	}
	cl.mu.Unlock()
	if err != nil {
		return err
	}
	line := "EXTEND " + l.name + " " + strconv.FormatInt(n, 10)
	c, err := cl.do(ctx, &req{line: line, on: l.cn, alt: line + " TOKEN " + l.token}, true)
	if err != nil {
		return err
	}
	f := fields(c.lines[0])
	if len(f) != 2 || f[0] != "OK" {
		err = replyError(c.lines[0])
		if errors.Is(err, ErrNotHeld) { // the broker has forgotten it too
			cl.mu.Lock()
			cl.lose(l, "stolen")
			cl.mu.Unlock()
		}
		return err
	}
	got, perr := strconv.ParseUint(f[1], 10, 62)
	if perr != nil {
		return protoError("bad EXTEND reply " + quote(c.lines[0]))
	}
	cl.mu.Lock()
	l.ttl, l.end = ms(got), validityEnd(sent, ms(got))
	cl.mu.Unlock()
	return nil
}
