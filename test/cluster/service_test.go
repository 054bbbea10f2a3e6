package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// nameServer answers every TCP connection with its name and a newline.
func nameServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, name)
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// holdServer says "held" on every connection and keeps it open.
func holdServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, "held")
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return ln.Addr().String()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// probeServer answers its probe with 200 while ready holds true, else 500.
func probeServer(t *testing.T, ready *atomic.Bool) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// ask connects through the service and returns what the endpoint said,
// "" when the connection was refused or closed without an answer.
func ask(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if line == "" {
		return ""
	}
	return line[:len(line)-1]
}

// waitReady waits until the service counts want ready endpoints.
func waitReady(t *testing.T, s *Service, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Ready()) != want {
		if time.Now().After(deadline) {
			t.Fatalf("ready endpoints %v, want %d", s.Ready(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServiceForwardsToReadyEndpoints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := StartService(ctx, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := ask(t, s.Port()); got != "" {
		t.Fatalf("a service without endpoints answered %q", got)
	}
	var readyA, readyB atomic.Bool
	readyA.Store(true)
	readyB.Store(true)
	s.SetEndpoint("a", nameServer(t, "a"), probeServer(t, &readyA))
	s.SetEndpoint("b", nameServer(t, "b"), probeServer(t, &readyB))
	waitReady(t, s, 2)
	seen := map[string]int{}
	for range 10 {
		seen[ask(t, s.Port())]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Errorf("round robin over two ready endpoints: %v, want 5 each", seen)
	}

	readyB.Store(false)
	waitReady(t, s, 1)
	for range 5 {
		if got := ask(t, s.Port()); got != "a" {
			t.Errorf("with b unready got %q, want a", got)
		}
	}

	s.SetDown(true)
	if got := ask(t, s.Port()); got != "" {
		t.Errorf("a service set down answered %q", got)
	}
	s.SetDown(false)
	if got := ask(t, s.Port()); got != "a" {
		t.Errorf("after SetDown(false) got %q, want a", got)
	}

	// An open connection is cut when the service goes down.
	held := holdServer(t)
	s.SetEndpoint("held", held, probeServer(t, &readyA))
	s.RemoveEndpoint("a")
	waitReady(t, s, 1)
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); line != "held\n" {
		t.Fatalf("through the service to the holding endpoint: %q, %v", line, err)
	}
	s.SetDown(true)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadByte(); err == nil || isTimeout(err) {
		t.Errorf("an open connection survived SetDown(true): %v", err)
	}
	s.SetDown(false)

	s.RemoveEndpoint("held")
	if got := ask(t, s.Port()); got != "" {
		t.Errorf("with only an unready endpoint left the service answered %q", got)
	}
}
