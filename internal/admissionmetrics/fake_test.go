package admissionmetrics

import (
	"context"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// fakeServer records registrations; nothing else of a webhook server is
// used by Server.
type fakeServer struct {
	handlers map[string]http.Handler
}

func (f *fakeServer) NeedLeaderElection() bool                { return false }
func (f *fakeServer) Register(path string, hook http.Handler) { f.handlers[path] = hook }
func (f *fakeServer) Start(context.Context) error             { return nil }
func (f *fakeServer) StartedChecker() healthz.Checker         { return healthz.Ping }
func (f *fakeServer) WebhookMux() *http.ServeMux              { return http.NewServeMux() }
