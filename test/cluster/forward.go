package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// forwarder relays TCP connections from one address to another. The API
// server listens on the loopback address only; a real node reaches it on
// the machine's end of its veth pair, where a forwarder relays to it, so
// that nothing of the cluster listens on any other address of the
// machine.
type forwarder struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// forward listens on listen and relays every connection to target.
func forward(listen, target string) (*forwarder, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("forward %s to %s: %w", listen, target, err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is where the forwarder listens.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// track remembers a connection so that close can end it; it refuses once
// the forwarder is closed.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	_ = c.Close()
}

func (f *forwarder) relay(in net.Conn) {
	defer f.wg.Done()
	if !f.track(in) {
		_ = in.Close()
		return
	}
	defer f.untrack(in)
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	if !f.track(out) {
		_ = out.Close()
		return
	}
	defer f.untrack(out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close, so that the other side sees the end of the stream.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// close stops listening, ends every relayed connection and waits for the
// relays.
func (f *forwarder) close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
