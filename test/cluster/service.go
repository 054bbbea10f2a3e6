package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Service stands in, on 127.0.0.1, for the Kubernetes Service in front of
// replicas that run as processes of the test (OperatorProcess): it
// forwards each TCP connection to the next endpoint, round robin, among
// those whose readiness probe passed last, as kube-proxy forwards to the
// ready endpoints of a Service. With no ready endpoint a connection is
// refused (closed at once), like a Service without endpoints. It does not
// terminate TLS: the API server talks to the replica itself.
//
// The readiness probe is an HTTP GET of the endpoint's probe URL, every
// ProbePeriod with a timeout of ProbePeriod; one failure makes the
// endpoint unready (the deployed probe is slower, 10 s and three
// failures). A paused process accepts connections (the kernel does) but
// answers nothing: its probe times out, and connections that reached it
// before hang until their client gives up, as on a cluster.
type Service struct {
	ln     net.Listener
	period time.Duration
	http   *http.Client

	mu        sync.Mutex
	endpoints []*serviceEndpoint
	next      int
	// down refuses every connection, as a configuration pointing at an
	// address where nothing listens.
	down bool
	// open are the forwarded connections (client side -> upstream side).
	open map[net.Conn]net.Conn
}

type serviceEndpoint struct {
	name  string
	addr  string
	probe string
	ready bool
}

// ServiceProbePeriod is the default readiness probe period of a Service.
const ServiceProbePeriod = 500 * time.Millisecond

// StartService listens on a free port of 127.0.0.1 and forwards until ctx
// ends. probePeriod 0 means ServiceProbePeriod.
func StartService(ctx context.Context, probePeriod time.Duration) (*Service, error) {
	if probePeriod <= 0 {
		probePeriod = ServiceProbePeriod
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the service: %w", err)
	}
	s := &Service{ln: ln, period: probePeriod, http: &http.Client{Timeout: probePeriod}, open: map[net.Conn]net.Conn{}}
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	go s.serve()
	go s.probeLoop(ctx)
	return s, nil
}

// Port is the port the service listens on.
func (s *Service) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// SetEndpoint adds an endpoint, or replaces the one of that name: addr
// receives the connections, probeURL is its readiness probe. A new
// endpoint is unready until its first probe passes.
func (s *Service) SetEndpoint(name, addr, probeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.endpoints {
		if e.name == name {
			e.addr, e.probe, e.ready = addr, probeURL, false
			return
		}
	}
	s.endpoints = append(s.endpoints, &serviceEndpoint{name: name, addr: addr, probe: probeURL})
}

// RemoveEndpoint forgets an endpoint.
func (s *Service) RemoveEndpoint(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.endpoints {
		if e.name == name {
			s.endpoints = append(s.endpoints[:i], s.endpoints[i+1:]...)
			return
		}
	}
}

// SetDown makes the service refuse every connection and cuts the open
// ones (true), or forward again (false): the address of a webhook
// configuration pointing nowhere.
func (s *Service) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		for c, up := range s.open {
			_ = c.Close()
			_ = up.Close()
		}
	}
}

// Ready returns the names of the endpoints whose last probe passed.
func (s *Service) Ready() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.endpoints {
		if e.ready {
			out = append(out, e.name)
		}
	}
	return out
}

// pick returns the address of the next ready endpoint, "" when none.
func (s *Service) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return ""
	}
	for range s.endpoints {
		e := s.endpoints[s.next%len(s.endpoints)]
		s.next++
		if e.ready {
			return e.addr
		}
	}
	return ""
}

func (s *Service) serve() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.forward(conn)
	}
}

func (s *Service) forward(conn net.Conn) {
	defer conn.Close()
	addr := s.pick()
	if addr == "" {
		return
	}
	up, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return
	}
	s.open[conn] = up
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.open, conn)
		s.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	// Either side ending ends both: HTTP over TLS needs no half-close, and
	// a client that gave up on a paused upstream frees its goroutines.
	<-done
	_ = conn.Close()
	_ = up.Close()
	<-done
}

func (s *Service) probeLoop(ctx context.Context) {
	tick := time.NewTicker(s.period)
	defer tick.Stop()
	for {
		s.mu.Lock()
		probes := map[*serviceEndpoint]string{}
		for _, e := range s.endpoints {
			probes[e] = e.probe
		}
		s.mu.Unlock()
		var wg sync.WaitGroup
		results := make(map[*serviceEndpoint]bool, len(probes))
		var rmu sync.Mutex
		for e, url := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok := s.probe(ctx, url) == nil
				rmu.Lock()
				results[e] = ok
				rmu.Unlock()
			}()
		}
		wg.Wait()
		s.mu.Lock()
		for e, ok := range results {
			if e.probe == probes[e] {
				e.ready = ok
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Service) probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}
