package ledger

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Turns go to the waiting tenant that used the least engine time, and
// first come first served within a tenant.
func TestTurnsAreFair(t *testing.T) {
	tu := newTurns()
	release, err := tu.acquire(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	got := make(chan string, 10)
	wait := func(tenant, name string) {
		go func() {
			r, err := tu.acquire(context.Background(), tenant)
			if err != nil {
				t.Error(err)
				return
			}
			got <- name
			used := time.Millisecond
			if tenant == "busy" {
				used = time.Second
			}
			r(used)
		}()
	}
	// busy queues three, quiet one; busy already used a lot.
	for i, n := range []string{"busy-1", "busy-2", "busy-3"} {
		wait("busy", n)
		waitQueued(t, tu, "busy", i+1)
	}
	wait("quiet", "quiet-1")
	waitQueued(t, tu, "quiet", 1)
	release(10 * time.Second)
	for range 4 {
		order = append(order, <-got)
	}
	if want := []string{"quiet-1", "busy-1", "busy-2", "busy-3"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

func waitQueued(t *testing.T, tu *turns, tenant string, n int) {
	t.Helper()
	for range 1000 {
		tu.mu.Lock()
		k := len(tu.waiting[tenant])
		tu.mu.Unlock()
		if k == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("tenant %s: never %d waiting", tenant, n)
}

// A waiter whose context ends leaves the queue, and a turn handed to it as
// it leaves goes on to the next.
func TestTurnsCancel(t *testing.T) {
	tu := newTurns()
	release, _ := tu.acquire(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tu.acquire(ctx, "b")
		errc <- err
	}()
	waitQueued(t, tu, "b", 1)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled waiter got the turn")
	}
	release(0)
	done := make(chan struct{})
	go func() {
		r, err := tu.acquire(context.Background(), "c")
		if err == nil {
			r(0)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the turn was lost with the cancelled waiter")
	}
}
