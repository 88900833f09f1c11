// Package lockbroker is a client for lockbrokerd (docs/protocol.md): exclusive,
// shared and semaphore locks with fences, single-flight FILL, cancellable
// waits, and leases that say when they are lost.
//
// A Client keeps a pool of connections to one broker. A session lock lives
// as long as the connection that acquired it, and one connection runs one
// request at a time (a waiting ACQUIRE holds up the lines behind it), so the
// pool spreads the locks over connections (at most 64 each, the broker's
// limits.max_locks_per_client) and gives each waiting request a connection
// of its own. Requests that do not wait are pipelined. Every method is safe
// for use from many goroutines.
package lockbroker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure Dial. The zero value reads the environment.
type Options struct {
	// Addr is "HOST:PORT", "[V6]:PORT", "HOST" (port 7878) or a Unix socket
	// "/PATH". Empty: $LOCKBROKER_ADDR, else 127.0.0.1:7878 (docs/clients.md).
	Addr string
	// Secret is sent with AUTH on every connection. Empty: $LOCKBROKER_SECRET;
	// if that is empty too, no AUTH is sent.
	Secret string
	// Timeout bounds the wait for each reply (for a waiting ACQUIRE or FILL:
	// beyond its wait). On expiry the request fails with ErrTimeout and its
	// connection is closed. 0 means 5 s; keep it above the broker's
	// redis.command_timeout_ms (1 s by default).
	Timeout time.Duration
	// MaxConns bounds the connections (0: 512). Each waiting Acquire or
	// Fill takes one for its wait; beyond MaxConns, further waits queue here.
	MaxConns int
	// CA is a PEM file of the CAs that sign the broker's certificate, which
	// must name the host of Addr: TLS to the broker's TLS listener. Empty:
	// $LOCKBROKER_CA; if that is empty too, no TLS.
	CA string
	// Cert and Key are a client certificate and its key (PEM files), sent
	// with TLS. Empty: $LOCKBROKER_CERT, $LOCKBROKER_KEY.
	Cert, Key string
	// TLSConfig, if set, is used as it is instead of CA, Cert and Key.
	TLSConfig *tls.Config
}

const (
	defaultAddr     = "127.0.0.1:7878"
	defaultTimeout  = 5 * time.Second
	defaultMaxConns = 512
	maxLocksPerConn = 64       // limits.max_locks_per_client's default
	maxPipeline     = 16       // requests in flight on a connection; the broker allows 32
	maxDials        = 4        // connections being opened at once: a burst reuses before it dials
	maxLine         = 64 << 10 // a longer reply line is a protocol error
	maxReply        = 4 << 20  // nor may a multi-line reply (WHO) grow beyond this
)

// Client is a pool of connections to one broker.
type Client struct {
	heard                 int64 // atomic (first: 64-bit aligned on 32-bit systems): UnixNano of the last line read
	network, addr, secret string
	tls                   *tls.Config // nil: plain TCP or a socket
	timeout               time.Duration
	maxConns              int

	mu      sync.Mutex
	conns   []*conn
	dialing int
	changed chan struct{} // closed and replaced when a connection frees up, comes or goes
	closed  bool
}

// Dial checks the address and secret and opens a first connection (AUTH,
// or PING without a secret), so that a wrong address or secret shows here.
func Dial(ctx context.Context, o Options) (*Client, error) {
	network, addr, err := parseAddr(o.Addr)
	if err != nil {
		return nil, err
	}
	secret := o.Secret
	if secret == "" {
		secret = os.Getenv("LOCKBROKER_SECRET")
	}
	if secret != "" && !validWord(secret) {
		return nil, fmt.Errorf("%w: a secret is one word of printable bytes", ErrInvalid)
	}
	tc, err := tlsConfig(o, network, addr)
	if err != nil {
		return nil, err
	}
	cl := &Client{network: network, addr: addr, secret: secret, tls: tc,
		timeout: o.Timeout, maxConns: o.MaxConns, changed: make(chan struct{})}
	if cl.timeout <= 0 {
		cl.timeout = defaultTimeout
	}
	if cl.maxConns <= 0 {
		cl.maxConns = defaultMaxConns
	}
	cn, err := cl.dial(ctx, true)
	if err != nil {
		return nil, err
	}
	cl.conns = append(cl.conns, cn)
	return cl, nil
}

var addrRE = regexp.MustCompile(`^(?:\[([^\]]+)\]|([^:\[\]]+))(?::(\d+))?$`)

// parseAddr follows docs/clients.md: HOST:PORT, [V6]:PORT, HOST, /PATH.
func parseAddr(a string) (network, addr string, err error) {
	if a == "" {
		a = os.Getenv("LOCKBROKER_ADDR")
	}
	if a == "" {
		// The old variables are refused, not ignored: ignored, they would
		// send the client to the default broker.
		for _, v := range []string{"LOCKBROKER_HOST", "LOCKBROKER_PORT", "LOCKBROKER_UNIX"} {
			if os.Getenv(v) != "" {
				return "", "", fmt.Errorf("%w: %s is gone; set LOCKBROKER_ADDR=HOST:PORT (or a socket path)", ErrInvalid, v)
			}
		}
		a = defaultAddr
	}
	if a[0] == '/' {
		return "unix", a, nil
	}
	m := addrRE.FindStringSubmatch(a)
	port := 7878
	if m != nil && m[3] != "" {
		port, _ = strconv.Atoi(m[3])
	}
	if m == nil || port <= 0 || port > 65535 {
		return "", "", fmt.Errorf("%w: bad broker address %q (HOST:PORT or /PATH)", ErrInvalid, a)
	}
	return "tcp", net.JoinHostPort(m[1]+m[2], strconv.Itoa(port)), nil
}

// tlsConfig is the TLS configuration Options ask for (nil: none): the CA
// file's certificates as the roots, the host of addr as the name the
// broker's certificate must have, and a client certificate if given.
func tlsConfig(o Options, network, addr string) (*tls.Config, error) {
	env := func(v, name string) string {
		if v == "" {
			return os.Getenv(name)
		}
		return v
	}
	ca, cert, key := env(o.CA, "LOCKBROKER_CA"), env(o.Cert, "LOCKBROKER_CERT"), env(o.Key, "LOCKBROKER_KEY")
	if o.TLSConfig == nil && ca == "" {
		if cert != "" || key != "" {
			return nil, fmt.Errorf("%w: a client certificate needs TLS: set CA", ErrInvalid)
		}
		return nil, nil
	}
	if network != "tcp" {
		return nil, fmt.Errorf("%w: TLS is over TCP, not a Unix socket", ErrInvalid)
	}
	if o.TLSConfig != nil {
		return o.TLSConfig, nil
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%w: a client certificate needs its key, and a key its certificate", ErrInvalid)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %v", ErrInvalid, err)
	}
	host, _, _ := net.SplitHostPort(addr)
	c := &tls.Config{RootCAs: x509.NewCertPool(), ServerName: host, MinVersion: tls.VersionTLS12}
	if !c.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA %s: no certificate in it", ErrInvalid, ca)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrInvalid, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// dial opens and authenticates one connection (not yet in the pool).
func (cl *Client) dial(ctx context.Context, first bool) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, cl.timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, cl.network, cl.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if cl.tls != nil {
		tc := tls.Client(nc, cl.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("%w: TLS: %v", ErrUnavailable, err)
		}
		nc = tc
	}
	cn := newConn(cl, nc)
	line, want := "", ""
	switch {
	case cl.secret != "":
		line, want = "AUTH "+cl.secret, "OK"
	case first:
		line, want = "PING", "PONG"
	default:
		return cn, nil
	}
	c := newCall(line)
	cn.mu.Lock()
	err = cn.write(c)
	cn.mu.Unlock()
	if err == nil {
		err = cn.await(ctx, c, cl.timeout)
	}
	if err == nil && c.lines[0] != want {
		err = replyError(c.lines[0])
	}
	if err != nil {
		cn.kill(err)
		return nil, err
	}
	return cn, nil
}

// req is a request for send: its line, and what the connection it goes on
// must satisfy.
type req struct {
	line     string
	on       *conn  // the connection it should go on (a lease's own), if any
	alt      string // the line for any other connection, when on is busy or gone
	name     string // ACQUIRE/FILL: the connection must not hold this name, and have room
	blocking bool   // it may wait: nothing but CANCEL may follow it on its connection
	multi    bool   // a reply of lines up to END (WHO)
	acq      *acqInfo
	prepare  func(cn *conn, c *call) // run under cl.mu once the connection is chosen
}

// send writes r on a suitable connection, opening one if none is free, and
// returns the call to await. The choice and the write are ordered under
// cl.mu then cn.mu, so that what was decided about a connection (a name
// reserved, a CANCEL right behind its wait) holds on the wire.
func (cl *Client) send(ctx context.Context, r *req) (*conn, *call, error) {
	for {
		cl.mu.Lock()
		if cl.closed {
			cl.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if r.on != nil && (r.on.dead || r.on.blocked != nil) {
			r = &req{line: r.alt, multi: r.multi, prepare: r.prepare}
		}
		if cn := cl.pick(r); cn != nil {
			c := newCall(r.line)
			c.multi, c.acq = r.multi, r.acq
			if r.name != "" {
				cn.names[r.name] = nil
			}
			if r.blocking {
				cn.blocked = c
			}
			if r.prepare != nil {
				r.prepare(cn, c)
			}
			cn.mu.Lock()
			cl.mu.Unlock()
			err := cn.write(c)
			cn.mu.Unlock()
			return cn, c, err
		}
		// Quick requests may pass MaxConns: they must never wait behind
		// waits that only they (a Release) can end.
		if r.on == nil && cl.dialing < maxDials && (!r.blocking || len(cl.conns)+cl.dialing < cl.maxConns) {
			cl.dialing++
			cl.mu.Unlock()
			cn, err := cl.dial(ctx, false)
			cl.mu.Lock()
			cl.dialing--
			if err == nil && !cl.closed {
				cl.conns = append(cl.conns, cn)
			} else if err == nil {
				go cn.kill(ErrClosed)
			}
			cl.notify()
			cl.mu.Unlock()
			if err != nil {
				return nil, nil, err
			}
			continue
		}
		ch := cl.changed
		cl.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, &cancelError{ctx.Err()}
		}
	}
}

// pick chooses, under cl.mu, the least loaded connection r may go on.
func (cl *Client) pick(r *req) *conn {
	// One bound to its connection waits there for room too: past the
	// broker's limits.max_pending it would close the connection, and every
	// lease on it would be lost.
	if r.on != nil {
		if atomic.LoadInt32(&r.on.npending) < maxPipeline {
			return r.on
		}
		return nil
	}
	var best *conn
	var bestN int32
	for _, cn := range cl.conns {
		if cn.blocked != nil {
			continue
		}
		if _, has := cn.names[r.name]; r.name != "" && (has || len(cn.names) >= maxLocksPerConn) {
			continue
		}
		n := atomic.LoadInt32(&cn.npending)
		if n < maxPipeline && (best == nil || n < bestN) {
			best, bestN = cn, n
			if n == 0 {
				break
			}
		}
	}
	return best
}

// notify wakes, under cl.mu, whoever waits for a connection.
func (cl *Client) notify() {
	close(cl.changed)
	cl.changed = make(chan struct{})
}

// do sends r and waits for its reply (Options.Timeout); with retry, once
// more (in the TOKEN form, alt, when it has one) after a broken connection.
func (cl *Client) do(ctx context.Context, r *req, retry bool) (*call, error) {
	for try := 0; ; try++ {
		cn, c, err := cl.send(ctx, r)
		if err == nil {
			err = cn.await(ctx, c, cl.timeout)
		}
		if err != nil && retry && try == 0 && retryable(err) && ctx.Err() == nil {
			if r.alt != "" {
				r = &req{line: r.alt, multi: r.multi, prepare: r.prepare}
			}
			continue
		}
		return c, err
	}
}

// line sends one request whose outcome does not depend on the connection
// and returns its reply lines.
func (cl *Client) line(ctx context.Context, line string, multi, retry bool) ([]string, error) {
	c, err := cl.do(ctx, &req{line: line, multi: multi}, retry)
	if err != nil {
		return nil, err
	}
	return c.lines, nil
}

// alive tells whether the broker answers: a line heard lately, or a PING.
func (cl *Client) alive() error {
	if time.Since(time.Unix(0, atomic.LoadInt64(&cl.heard))) < cl.timeout/4 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cl.timeout)
	defer cancel()
	lines, err := cl.line(ctx, "PING", false, false)
	switch {
	case ctx.Err() != nil: // a dial and its AUTH took all that: no answer
		return fmt.Errorf("%w: no PONG within %v", ErrTimeout, 2*cl.timeout)
	case err == nil && lines[0] != "PONG":
		err = replyError(lines[0])
	}
	return err
}

// Close ends every connection (QUIT, so the broker releases their session
// and fixed locks at once) and every lease on them (reason "closed"; kept
// locks stay in the broker until their TTL).
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.closed = true
	conns := append([]*conn(nil), cl.conns...)
	cl.notify()
	cl.mu.Unlock()
	for _, cn := range conns {
		cn.quit()
	}
	return nil
}

// Status is what STATUS says of a name.
type Status struct {
	Held    bool
	TTL     time.Duration // the lease left in Redis (the longest, if shared)
	Fence   uint64        // the holder's (the latest grant's, if shared)
	Mode    string        // "EXCLUSIVE", "SHARED" or "LIMIT"
	Limit   int           // n of LIMIT n
	Holders int
}

// Status asks who holds name, in general terms (Who lists them).
func (cl *Client) Status(ctx context.Context, name string) (Status, error) {
	var s Status
	if err := checkName(name); err != nil {
		return s, err
	}
	lines, err := cl.line(ctx, "STATUS "+name, false, true)
	if err != nil {
		return s, err
	}
	f := fields(lines[0])
	if len(f) == 2 && f[0] == "OK" && f[1] == "FREE" {
		return s, nil
	}
	if len(f) < 4 || f[0] != "OK" || f[1] != "HELD" {
		return s, replyError(lines[0])
	}
	ttl, err1 := strconv.ParseUint(f[2], 10, 62)
	fence, err2 := strconv.ParseUint(f[3], 10, 64)
	s = Status{Held: true, TTL: ms(ttl), Fence: fence, Mode: "EXCLUSIVE", Holders: 1}
	var err3, err4 error
	switch {
	case len(f) == 4:
	case len(f) == 6 && f[4] == "SHARED":
		s.Mode = "SHARED"
		s.Holders, err3 = strconv.Atoi(f[5])
	case len(f) == 6 && len(f[4]) > 6 && f[4][:6] == "LIMIT=":
		s.Mode = "LIMIT"
		s.Limit, err3 = strconv.Atoi(f[4][6:])
		s.Holders, err4 = strconv.Atoi(f[5])
	default:
		err3 = ErrProtocol
	}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Status{}, protoError("bad STATUS reply " + quote(lines[0]))
	}
	return s, nil
}

// Validate tells whether fence is the fence of a grant of name held right
// now (and, with a token, held by that token): VALIDATE, for a resource
// that cannot compare fences itself.
func (cl *Client) Validate(ctx context.Context, name string, fence uint64, token string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	line := "VALIDATE " + name + " " + strconv.FormatUint(fence, 10)
	if token != "" {
		if err := checkToken(token); err != nil {
			return false, err
		}
		line += " TOKEN " + token
	}
	lines, err := cl.line(ctx, line, false, true)
	switch {
	case err != nil:
		return false, err
	case lines[0] == "OK VALID":
		return true, nil
	case lines[0] == "OK STALE":
		return false, nil
	}
	return false, replyError(lines[0])
}

// Holder is one line of WHO.
type Holder struct {
	Fence  uint64        // 0 for a grant of an older broker ("-")
	TTL    time.Duration // its lease left in Redis
	Mode   string        // EXCLUSIVE, FILL, SHARED or LIMIT=<n>
	Broker string        // <hostname>:<pid> of the broker(s) that granted it
	Client string        // <id>@<peer> in that broker
	Since  time.Time     // when it was granted (zero if unknown)
}

// Who lists the holders of name, on every broker.
func (cl *Client) Who(ctx context.Context, name string) ([]Holder, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	lines, err := cl.line(ctx, "WHO "+name, true, true)
	if err != nil {
		return nil, err
	}
	if last := lines[len(lines)-1]; last != "END" {
		return nil, replyError(last)
	}
	hs := make([]Holder, 0, len(lines)-1)
	for _, l := range lines[:len(lines)-1] {
		f := fields(l)
		if len(f) != 7 || f[0] != "HOLDER" {
			return nil, protoError("bad WHO line " + quote(l))
		}
		h := Holder{Mode: f[3], Broker: f[4], Client: f[5]}
		ttl, err := strconv.ParseUint(f[2], 10, 62)
		if f[1] != "-" && err == nil {
			h.Fence, err = strconv.ParseUint(f[1], 10, 64)
		}
		if f[6] != "-" && err == nil {
			h.Since, err = time.Parse(time.RFC3339, f[6])
		}
		if err != nil {
			return nil, protoError("bad WHO line " + quote(l))
		}
		h.TTL = ms(ttl)
		hs = append(hs, h)
	}
	return hs, nil
}

// Revoke takes name from every holder (REVOKE: needs a client dialed with
// auth.admin_secret) and says how many held it.
func (cl *Client) Revoke(ctx context.Context, name string) (int, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	// Not retried: a second REVOKE would answer 0 for what the first took.
	lines, err := cl.line(ctx, "REVOKE "+name, false, false)
	if err != nil {
		return 0, err
	}
	f := fields(lines[0])
	if len(f) == 2 && f[0] == "OK" {
		if n, err := strconv.Atoi(f[1]); err == nil {
			return n, nil
		}
	}
	return 0, replyError(lines[0])
}
