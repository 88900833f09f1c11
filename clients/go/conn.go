package lockbroker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one connection of the pool, with a goroutine reading its replies
// in order and its EVENT lines whenever they come.
type conn struct {
	cl       *Client
	nc       net.Conn
	npending int32 // atomic: calls written and not yet answered

	mu      sync.Mutex // orders writes with pending
	pending []*call    // written, waiting for their reply, in order
	err     error      // why it ended, once it has

	// Under cl.mu:
	blocked *call             // a waiting ACQUIRE/FILL: nothing but its CANCEL may follow
	names   map[string]*Lease // held here; nil while an ACQUIRE or RELEASE of it is in flight
	dead    bool
}

// call is one request written on a connection, until its reply is read.
type call struct {
	line   string
	multi  bool     // WHO: lines up to END
	acq    *acqInfo // ACQUIRE/FILL: the reader makes the lease from an OK
	unres  *conn    // a RELEASE: the name to free on this connection when answered
	name   string
	popped bool // under cn.mu: its reply is read, a CANCEL would be too late
	size   int
	lines  []string
	lease  *Lease
	err    error
	done   chan struct{}
}

func newCall(line string) *call { return &call{line: line, done: make(chan struct{})} }

func newConn(cl *Client, nc net.Conn) *conn {
	cn := &conn{cl: cl, nc: nc, names: make(map[string]*Lease)}
	go cn.readLoop()
	return cn
}

// write sends c, under cn.mu. A failed write closes the connection, and
// the reader then fails c with the rest.
func (cn *conn) write(c *call) error {
	if cn.err != nil {
		return &brokenError{cn.err}
	}
	cn.pending = append(cn.pending, c)
	atomic.AddInt32(&cn.npending, 1)
	cn.nc.SetWriteDeadline(time.Now().Add(cn.cl.timeout))
	if _, err := io.WriteString(cn.nc, c.line+"\n"); err != nil {
		cn.err = err
		cn.nc.Close()
	}
	return nil
}

// await waits for c's reply at most limit. A reply that does not come in
// time cannot be told from one that never will, and a late one would be
// read as the next request's: so the connection is closed.
func (cn *conn) await(ctx context.Context, c *call, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		cn.kill(fmt.Errorf("%w: no reply within %v", ErrTimeout, limit))
		<-c.done
		return c.err
	case <-ctx.Done():
		return &cancelError{ctx.Err()}
	}
}

func (cn *conn) readLoop() {
	br := bufio.NewReaderSize(cn.nc, maxLine)
	for {
		line, err := readLine(br)
		if err == nil {
			atomic.StoreInt64(&cn.cl.heard, time.Now().UnixNano())
			if strings.HasPrefix(line, "EVENT ") {
				cn.cl.event(cn, line)
				continue
			}
			err = cn.deliver(line)
		}
		if err != nil {
			cn.kill(err)
			return
		}
	}
}

// readLine reads one line of at most maxLine bytes: a longer one, or one
// cut by the end of the stream, is a protocol error, never a growing buffer.
func readLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return "", protoError("a reply line longer than 64 KiB")
	case err == io.EOF && len(b) > 0:
		return "", protoError("connection closed mid-reply")
	case err != nil:
		return "", err
	}
	b = b[:len(b)-1]
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return string(b), nil
}

// deliver gives a reply line to the oldest call waiting on this connection.
func (cn *conn) deliver(line string) error {
	cn.mu.Lock()
	if len(cn.pending) == 0 {
		cn.mu.Unlock()
		if strings.HasPrefix(line, "ERR ") { // the broker closing us: idle, LIMIT
			return replyError(line)
		}
		return protoError("a reply nobody asked for: " + quote(line))
	}
	c := cn.pending[0]
	c.size += len(line)
	if c.size > maxReply {
		cn.mu.Unlock()
		return protoError("a reply longer than 4 MiB")
	}
	c.lines = append(c.lines, line)
	if c.multi && line != "END" && !strings.HasPrefix(line, "ERR ") {
		cn.mu.Unlock()
		return nil
	}
	cn.pending[0] = nil
	cn.pending = cn.pending[1:]
	c.popped = true
	atomic.AddInt32(&cn.npending, -1)
	cn.mu.Unlock()
	err := cn.cl.answered(cn, c)
	close(c.done)
	return err
}

// answered settles, under cl.mu, what the reply to c means for its
// connection. A grant becomes a lease here, before any EVENT LOST for it
// can be read.
func (cl *Client) answered(cn *conn, c *call) (err error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cn.blocked == c {
		cn.blocked = nil
	}
	if c.unres != nil && !c.unres.dead && c.unres.names[c.name] == nil {
		delete(c.unres.names, c.name)
	}
	if a := c.acq; a != nil && !cn.dead {
		delete(cn.names, a.name)
		if strings.HasPrefix(c.lines[0], "OK ") {
			if c.lease, err = a.lease(cl, cn, c.lines[0]); err != nil {
				c.err = err
			} else {
				cn.names[a.name] = c.lease
			}
		}
	}
	cl.notify()
	return err
}

// event handles an EVENT line; only LOST is known (others are ignored).
func (cl *Client) event(cn *conn, line string) {
	f := fields(line)
	if len(f) != 5 || f[1] != "LOST" {
		return
	}
	fence, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if l := cn.names[f[2]]; l != nil && l.fence == fence {
		cl.lose(l, f[4])
	}
}

// kill ends the connection: its calls fail, its leases are lost.
func (cn *conn) kill(why error) {
	cn.mu.Lock()
	if cn.err == nil {
		cn.err = why
	}
	why = cn.err
	pend := cn.pending
	cn.pending = nil
	cn.mu.Unlock()
	cn.nc.Close()
	for _, c := range pend {
		c.err = &brokenError{why}
		close(c.done)
	}
	cn.cl.drop(cn)
}

// quit sends QUIT (the broker releases at once, with no lock delay) and
// closes.
func (cn *conn) quit() {
	cn.mu.Lock()
	if cn.err == nil {
		cn.nc.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(cn.nc, "QUIT\n")
	}
	cn.mu.Unlock()
	cn.kill(ErrClosed)
}

// drop takes a dead connection out of the pool; its leases are lost.
func (cl *Client) drop(cn *conn) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cn.dead {
		return
	}
	cn.dead = true
	for i, o := range cl.conns {
		if o == cn {
			cl.conns = append(cl.conns[:i], cl.conns[i+1:]...)
			break
		}
	}
	reason := "disconnected"
	if cl.closed {
		reason = "closed"
	}
	for _, l := range cn.names {
		if l != nil {
			cl.lose(l, reason)
		}
	}
	cn.names = map[string]*Lease{}
	cl.notify()
}

// retryable: the connection broke under the request (not a timeout, not a
// reply that made no sense), so its outcome is unknown and it may go again.
func retryable(err error) bool {
	var b *brokenError
	return errors.As(err, &b) && errors.Is(err, ErrUnavailable)
}

// fields splits a reply on the broker's blanks (spaces and tabs).
func fields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' })
}

func ms(n uint64) time.Duration { return time.Duration(n) * time.Millisecond }

// msUp rounds a duration up to whole milliseconds, as docs/clients.md says.
func msUp(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// checkName refuses what the broker would (docs/protocol.md §2), and above
// all blanks and line ends, which would smuggle in another request.
func checkName(name string) error {
	if len(name) < 1 || len(name) > 200 || !validWord(name) {
		return fmt.Errorf("%w: a name is 1-200 bytes of 0x21-0x7E or 0x80-0xFF", ErrInvalid)
	}
	return nil
}

func validWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return s != ""
}

func checkToken(t string) error {
	ok := len(t) >= 1 && len(t) <= 64
	for i := 0; ok && i < len(t); i++ {
		b := t[i]
		ok = b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-'
	}
	if !ok {
		return fmt.Errorf("%w: a token is 1-64 of A-Z a-z 0-9 _ . -", ErrInvalid)
	}
	return nil
}

// newToken makes a token as the broker does: 128 random bits in hex.
func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("lockbroker: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}
